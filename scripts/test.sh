#!/usr/bin/env bash
# Runs every test of TaskServer:
#   1. the Swift test suites (TaskCore, TaskGraph, TaskServer) — `swift test`;
#   2. every suite again under ThreadSanitizer, with the TSan-visible lock (-DTASKSERVER_TSAN);
#      any "WARNING: ThreadSanitizer" in the output fails the step;
#   3. the built server, started on a port of its choosing (--port 0), against its OpenAPI
#      contract (schemathesis), the examples/ scripts and a webhook verifier;
#   4. the crash test: the server killed with SIGKILL and restarted, three times;
#   5. the lifecycle, terminal client and container checks.
# Each stage prints its duration, and a table of them ends the run (also when a stage fails).
# The Python tools run from .build/venv (pinned in scripts/requirements.txt), first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/server.sh

stage_names=()
stage_times=()
stage_name=""
stage_start=0
run_start=$(date +%s)
# stage NAME — ends the current stage (printing its duration) and starts NAME.
stage() {
    local now
    now=$(date +%s)
    if [ -n "$stage_name" ]; then
        stage_names+=("$stage_name")
        stage_times+=($((now - stage_start)))
        echo "-- $stage_name: $((now - stage_start)) s"
    fi
    stage_name=${1:-}
    stage_start=$now
    [ -z "$stage_name" ] || echo "== $stage_name ($(date -u +%H:%M:%S))"
}
summary() { # summary EXIT_STATUS
    local status=$1 i
    stage
    echo "== stage durations"
    for i in "${!stage_names[@]}"; do printf '  %5d s  %s\n' "${stage_times[$i]}" "${stage_names[$i]}"; done
    printf '  %5d s  total (exit %d)\n' $(($(date +%s) - run_start)) "$status"
}
server=""
on_exit() {
    local status=$?
    if [ -n "${venv_job:-}" ]; then kill "$venv_job" 2>/dev/null || true; wait "$venv_job" 2>/dev/null || true; fi
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    summary "$status"
}
trap on_exit EXIT

stage "dependencies (Debian packages)"
bash scripts/install-deps.sh jq
# The Python environment (40-50 s when it is made, on a fresh clone: mostly downloads) is made
# while Swift builds; the first stage that needs it waits for it.
venv_log=$(mktemp)
bash scripts/install-deps.sh --venv >"$venv_log" 2>&1 &
venv_job=$!
py="$PWD/.build/venv/bin/python"
# venv_ready — waits for the Python environment (once), failing with its log; then puts it first
# on PATH (python3, st, hadolint: the pinned ones).
venv_ready() {
    [ -n "$venv_job" ] || return 0
    local status=0 start=$SECONDS
    wait "$venv_job" || status=$?
    venv_job=""
    cat "$venv_log"
    rm -f "$venv_log"
    [ "$status" -eq 0 ] || { echo "making .build/venv failed (exit $status)"; exit 1; }
    echo "Python environment ready (waited $((SECONDS - start)) s): $("$py" --version)"
    export VIRTUAL_ENV="$PWD/.build/venv"
    export PATH="$VIRTUAL_ENV/bin:$PATH"
}

stage "swift build --build-tests"
swift build --build-tests
stage "swift test"
swift test

stage "swift build --build-tests under ThreadSanitizer"
tsan_flags=(--sanitize=thread --scratch-path .build-tsan -Xswiftc -DTASKSERVER_TSAN)
swift build --build-tests "${tsan_flags[@]}"
stage "swift test under ThreadSanitizer (every suite)"
# Reports in full (second stacks of deadlocks, a longer history for the earlier access), and no
# stop at the first one: every race is listed, and the grep below decides. TSan does not always
# turn reports into a failing exit status (they may come from a process the runner does not
# check), so any report fails the step whatever the status.
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0 second_deadlock_stack=1 history_size=4}"
tsan_log=$(mktemp)
tsan_status=0
swift test "${tsan_flags[@]}" 2>&1 | tee "$tsan_log" || tsan_status=$?
unset TSAN_OPTIONS
tsan_reports=$(grep -c "WARNING: ThreadSanitizer" "$tsan_log" || true)
if [ "$tsan_reports" -gt 0 ]; then
    echo "ThreadSanitizer: $tsan_reports reports; where (SUMMARY lines, by count):"
    grep "SUMMARY: ThreadSanitizer" "$tsan_log" | sort | uniq -c | sort -rn | head -50
fi
rm -f "$tsan_log"
[ "$tsan_reports" -eq 0 ] || { echo "ThreadSanitizer reported $tsan_reports warnings"; exit 1; }
[ "$tsan_status" -eq 0 ] || { echo "swift test under ThreadSanitizer failed (exit $tsan_status)"; exit 1; }
echo "ThreadSanitizer: every suite passed, no warnings"

stage "Python environment (made during the Swift stages; waiting for it)"
venv_ready
stage "live server: start"
bin=$(swift build --show-bin-path)/taskserver
log=$(mktemp)
# The live server runs on the embedded SQLite store, the default users get. Outbound requests
# (http tasks, webhooks, including the ones schemathesis makes up) reach loopback only.
datadir=$(mktemp -d)
start_server "$log" "$bin" serve --data "$datadir/taskserver.sqlite" --executor default=8 --executor io=16 \
    --outbound-deny 0.0.0.0/0 --outbound-deny ::/0 --outbound-allow 127.0.0.0/8 --outbound-allow ::1/128
server=$SERVER_PID
url=$SERVER_URL
curl -fsS "$url/healthz" >/dev/null || { echo "server does not answer /healthz:"; cat "$log"; exit 1; }
echo "listening on $url"

stage "examples"
TASKSERVER_URL="$url" bash examples/run-all.sh

stage "webhooks (standardwebhooks)"
TASKSERVER_URL="$url" TASKSERVER_BIN="$bin" "$py" scripts/verify-webhooks.py

stage "contract (schemathesis)"
# One worker: with two, Hypothesis' threads hit CPython 3.11's "AST constructor recursion depth
# mismatch" SystemError (cpython#106905) now and then while generating cases; one is as fast here.
# Tests/contract/st.py also gives it room to recurse.
"$py" Tests/contract/st.py --config-file Tests/contract/schemathesis.toml run openapi.yaml \
    --url "$url" --checks all --max-examples "${SCHEMATHESIS_EXAMPLES:-50}" \
    --seed 1 --workers 1

stage "live server: SIGTERM"
# The server must still be healthy, and stop cleanly on SIGTERM with exit status 0.
curl -fsS "$url/healthz" >/dev/null
kill -TERM "$server"
status=0
wait "$server" || status=$?
server=""
if [ "$status" -ne 0 ]; then echo "server exited with status $status on SIGTERM"; cat "$log"; exit 1; fi
echo "server stopped cleanly on SIGTERM"
rm -rf "$log" "$datadir"

stage "crash test (SIGKILL and restart)"
"$py" scripts/crash-test.py "$bin"

stage "lifecycle"
"$py" scripts/check-lifecycle.py "$bin"
stage "terminal client"
bash scripts/check-client.sh "$bin"
stage "container"
bash scripts/check-container.sh
stage
echo "all tests passed"
