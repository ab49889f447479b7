#!/usr/bin/env bash
# A killed worker's task runs again on another worker within its heartbeat timeout + 1 s (SPEC §10).
#
#   scripts/worker-kill-test.sh [BIN]     # BIN: the taskserver binary (default: $TASKSERVER_BIN,
#                                         # then `swift build --show-bin-path`/taskserver; not built here)
#
# Starts the server (SQLite store in a temporary directory, `--executor images=external`, port of
# its choosing via scripts/server.sh), then worker A, which claims the job's only task: action
# `sleep` with params {"seconds": 60, "onAttempt": 1} (attempt 1 sleeps 60 s, later attempts return
# at once), heartbeatTimeoutMs 2000, retry {maxAttempts: 2}. Once the task is `running`, A is killed
# with SIGKILL (its whole process group) and worker B is started; the script asserts that the job
# succeeds, the task in 2 attempts by another worker, within 2000 + 1000 ms of the kill, and prints
# that time. Exit status 0 when every check passes. Every process it started is killed on exit.
#
# Workers: `python3 examples/worker.py` (python3 from .build/venv when it exists: it has `requests`).
# WORKER_CMD replaces it: a command run by `bash -c` with TASKSERVER_URL and TASKSERVER_BIN exported,
# that must run the `sleep` action as above, e.g. the reference worker with the example's handlers:
#   WORKER_CMD='"$TASKSERVER_BIN" worker --server "$TASKSERVER_URL" --executor images --concurrency 1 \
#               -- python3 examples/worker.py --stdin' scripts/worker-kill-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ -x .build/venv/bin/python ] && export PATH="$root/.build/venv/bin:$PATH"
bin=${1:-${TASKSERVER_BIN:-}}
[ -n "$bin" ] || bin=$(swift build --show-bin-path)/taskserver
[ -x "$bin" ] || { echo "no server binary at $bin"; exit 2; }
export TASKSERVER_BIN=$bin
heartbeat_ms=2000
limit_ms=$((heartbeat_ms + 1000))

dir=$(mktemp -d)
server=""
workers=()
status_ok=0
cleanup() {
    local status=$?
    # Workers run in their own process groups (setsid): killing the group also ends a command
    # the reference worker started.
    for pid in "${workers[@]+"${workers[@]}"}"; do kill -KILL -- "-$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    if [ -n "$server" ]; then kill -KILL "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    if [ "$status" -ne 0 ] && [ "$status_ok" -eq 0 ]; then
        for f in "$dir"/*.log; do echo "--- $(basename "$f")"; tail -n 40 "$f"; done
    fi
    rm -rf "$dir"
    exit "$status"
}
trap cleanup EXIT

. scripts/server.sh
# shellcheck disable=SC2046 # store_args prints options without spaces
start_server "$dir/server.log" "$bin" serve $(store_args "$dir") --executor images=external
server=$SERVER_PID
export TASKSERVER_URL=$SERVER_URL
echo "server $bin on $TASKSERVER_URL (store: ${TEST_STORE_URL:+PostgreSQL }${TEST_STORE_URL:-SQLite in $dir})"
. examples/lib.sh # submit/get/wait_job/wait_task_state/expect_* (uses TASKSERVER_URL)

# start_worker NAME — starts a worker in a process group of its own; sets WORKER_PID.
start_worker() {
    local name=$1
    if [ -n "${WORKER_CMD:-}" ]; then
        setsid bash -c "exec $WORKER_CMD" >"$dir/worker-$name.log" 2>&1 &
    else
        setsid python3 examples/worker.py --executor images --worker-id "kill-test-$name" --concurrency 1 \
            >"$dir/worker-$name.log" 2>&1 &
    fi
    WORKER_PID=$!
    workers+=("$WORKER_PID")
    echo "worker $name started (pid $WORKER_PID): ${WORKER_CMD:-python3 examples/worker.py}"
}

start_worker A
pid_a=$WORKER_PID
job=$(post /v1/jobs "$(jq -nc --argjson hb "$heartbeat_ms" '{
  name: "worker-kill-test",
  graph: {type: "task", id: "nap", executor: "images", action: "sleep",
          params: {seconds: 60, onAttempt: 1},
          heartbeatTimeoutMs: $hb, retry: {maxAttempts: 2, delayMs: 0}}}')")
id=$(jqr .id "$job")
track_job "$id"
echo "job $id: task nap (images/sleep: 60 s on attempt 1), heartbeatTimeoutMs $heartbeat_ms, retry maxAttempts 2"

node=$(wait_task_state "$id" nap running 15000)
worker_a=$(jqr .workerId "$node")
echo "nap is running on worker $worker_a (attempt $(jqr .attempts "$node"))"
# Let A heartbeat at least once, so the lease is a live one being kept alive when A dies.
sleep 1
node=$(task_json "$id" nap)
expect_eq "$(jqr .state "$node")/$(jqr .attempts "$node")" running/1 "nap still running in attempt 1 a second later (A heartbeats it)"

kill_ms=$(now_ms)
kill -KILL -- "-$pid_a"
wait "$pid_a" 2>/dev/null || true
echo "worker A killed (SIGKILL)"
start_worker B

job=$(wait_job "$id")
done_ms=$(now_ms)
took=$((done_ms - kill_ms))
node=$(task_json "$id" nap)
finished_ms=$(jq -r "$JQ_MS .finishedAt | ms" <<<"$job")
echo "job $id → $(jqr .state "$job") $((done_ms - kill_ms)) ms after the kill (its finishedAt: $((finished_ms - kill_ms)) ms after)"
echo "nap: $(jqc '{state, attempts, workerId, result}' "$node")"
jq -r '.[] | select(.taskId == "nap") | "  seq \(.seq)  \(.type)  \(.data // {} | tojson)"' <<<"$(all_events "$id")"

expect_eq "$(jqr .state "$job")" succeeded "the job succeeded"
expect_eq "$(jqr .state "$node")/$(jqr .attempts "$node")" succeeded/2 "nap succeeded in attempt 2"
[ "$(jqr .workerId "$node")" != "$worker_a" ] || die "attempt 2 ran on the killed worker $worker_a"
ok "attempt 2 ran on another worker ($(jqr .workerId "$node"))"
expect_lt "$took" "$((limit_ms + 1))" "the task ran again and finished within heartbeatTimeoutMs + 1 s of the kill ($took ms ≤ $limit_ms ms)"
status_ok=1
echo "worker kill test passed: kill → job succeeded in $took ms (heartbeatTimeoutMs $heartbeat_ms)"
