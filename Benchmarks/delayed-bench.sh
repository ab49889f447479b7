#!/usr/bin/env bash
# Delayed starts on the SQLite store (issue #28): a million jobs asleep for an hour, then a batch
# that falls due at once.
#   1. SLEEPING jobs (default 1,000,000) submitted over HTTP with delayMs = 1 h (wrk, 64
#      connections): the submission rate, then the server's resident memory while they sleep;
#   2. SIGKILL and restart: the time from exec to the first 200 on /readyz, and the memory after;
#   3. DUE jobs (default 100,000) submitted with one runAt, ~40 s ahead; once it has passed and
#      they all ended, from the file: each job's lateness (startedAt − runAt: `job.started`), its
#      task's (`task.started` − runAt) and its end's (finishedAt − runAt), p50 / p99 / max; and
#      that each started once.
# Usage: Benchmarks/delayed-bench.sh [sleeping] [due]
set -euo pipefail
cd "$(dirname "$0")/.."
sleeping=${1:-1000000}
due=${2:-100000}
swift build -c release --product taskserver >/dev/null
bin=$(swift build -c release --show-bin-path)/taskserver
. scripts/server.sh
dir=$(mktemp -d)
db=$dir/taskserver.sqlite
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
rss() { awk '/^VmRSS/ {printf "%.0f MB", $2 / 1024}' "/proc/$1/status"; }
hwm() { awk '/^VmHWM/ {printf "%.0f MB", $2 / 1024}' "/proc/$1/status"; }
post() { # post COUNT BODY LABEL — COUNT jobs (about: each wrk thread stops after its share)
    local out=$dir/wrk.out wrk_pid
    COUNT=$1 THREADS=2 JOB_BODY=$2 wrk -t2 -c64 -d3600s -s Benchmarks/wrk/post-count.lua "$url/v1/jobs" >"$out" &
    wrk_pid=$!
    # wrk's main thread sleeps for its whole duration even once its threads stopped: it is told
    # to stop (SIGINT, it then reports) when the jobs are in the file.
    until [ "$(sqlite3 "$db" "SELECT count(*) FROM labels WHERE key = 'batch' AND value = '$3'")" -ge "$1" ]; do sleep 0.5; done
    kill -INT "$wrk_pid"
    wait "$wrk_pid" || true
    grep -E "Requests/sec|Non-2xx" "$out" || true
}

start_server "$dir/server.log" "$bin" serve --data "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL
echo "== $sleeping jobs delayed by an hour"
start=$(date +%s.%N)
post "$sleeping" '{"labels":{"batch":"later"},"delayMs":3600000,"graph":{"type":"task","id":"t","action":"value","params":{"value":1}}}' later
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
echo "submitted in $elapsed s ($(echo "$sleeping / $elapsed" | bc) jobs/s, durable 201s)"
sleep 5
echo "server memory while they sleep: RSS $(rss "$pid") (peak $(hwm "$pid")); sleeping rows: $(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE state = 'sleeping'")"

echo "== SIGKILL and restart"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
start=$(date +%s%N)
start_server "$dir/server2.log" "$bin" serve --data "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL
until curl -fsS -o /dev/null "$url/readyz"; do sleep 0.005; done
echo "restart to ready: $(( ($(date +%s%N) - start) / 1000000 )) ms; RSS $(rss "$pid")"

run_at=$(date -u -d "@$(( $(date +%s) + 40 ))" +%Y-%m-%dT%H:%M:%SZ)
echo "== $due jobs due at $run_at"
post "$due" "{\"labels\":{\"batch\":\"due\"},\"runAt\":\"$run_at\",\"graph\":{\"type\":\"task\",\"id\":\"t\",\"action\":\"value\",\"params\":{\"value\":1}}}" due
echo "submitted by $(date -u +%H:%M:%S); RSS $(rss "$pid")"
sleep "$(( $(date -d "$run_at" +%s) - $(date +%s) + 3 ))"
for _ in $(seq 1 120); do
    left=$(sqlite3 "$db" "SELECT count(*) FROM jobs JOIN labels USING (position) WHERE key = 'batch' AND value = 'due' AND finished_at IS NULL")
    [ "$left" = 0 ] && break
    sleep 1
done
echo "all ended (left: $left); server RSS $(rss "$pid"), peak $(hwm "$pid")"
percentiles() { # percentiles WHAT SQL
    sqlite3 "$db" "$2" | sort -n |
        awk -v what="$1" '{ v[NR] = $1 } END { printf "%s of %d jobs: p50 %d ms, p99 %d ms, max %d ms\n", what, NR, v[int(NR * 0.5)], v[int(NR * 0.99)], v[NR] }'
}
batch="FROM jobs JOIN labels USING (position) WHERE key = 'batch' AND value = 'due'"
percentiles "lateness of the start (startedAt - runAt)" "SELECT started_at - run_at $batch"
percentiles "lateness of the task's start (its task.started - runAt)" \
    "SELECT (SELECT min(e.value ->> 2) FROM events, json_each(events.events) AS e WHERE events.job = jobs.position AND e.value ->> 1 = 'task.started') - run_at $batch"
percentiles "end (finishedAt - runAt)" "SELECT finished_at - run_at $batch"
echo "still asleep: $(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE state = 'sleeping'"); job.started events of the due batch: $(sqlite3 "$db" "SELECT count(*) FROM events JOIN labels ON labels.position = events.job, json_each(events.events) AS e WHERE labels.key = 'batch' AND labels.value = 'due' AND e.value ->> 1 = 'job.started'")"
