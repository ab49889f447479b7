#!/usr/bin/env bash
# Cron schedules on the SQLite store (issue #28): SCHEDULES (default 10,000) schedules of
# `* * * * *`, each submitting a one-task job, created over HTTP; then MINUTES (default 2) minutes
# of fires. From the file: each fire's lateness (its job's createdAt − the whole minute it fired
# for), p50 / p99 / max, and whether any (schedule, minute) has two jobs.
# Usage: [TASKSERVER_BIN=…] Benchmarks/schedule-bench.sh [schedules] [minutes]
set -euo pipefail
cd "$(dirname "$0")/.."
schedules=${1:-10000}
minutes=${2:-2}
# TASKSERVER_BIN: another build to measure (a comparison in one sitting); the release build otherwise.
if [ -n "${TASKSERVER_BIN:-}" ]; then
    bin=$TASKSERVER_BIN
else
    swift build -c release --product taskserver >/dev/null
    bin=$(swift build -c release --show-bin-path)/taskserver
fi
. scripts/server.sh
dir=$(mktemp -d)
db=$dir/taskserver.sqlite
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
start_server "$dir/server.log" "$bin" serve --data "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL

echo "== creating $schedules schedules of * * * * *"
start=$(date +%s.%N)
COUNT=$schedules THREADS=2 JOB_BODY='{"cron":"* * * * *","job":{"graph":{"type":"task","id":"t","action":"value","params":{"value":1}}}}' \
    wrk -t2 -c16 -d3600s -s Benchmarks/wrk/post-count.lua "$url/v1/schedules" >"$dir/wrk.out" &
wrk_pid=$!
until [ "$(sqlite3 "$db" "SELECT count(*) FROM schedules")" -ge "$schedules" ]; do sleep 0.2; done
kill -INT "$wrk_pid"; wait "$wrk_pid" || true
echo "created $(sqlite3 "$db" "SELECT count(*) FROM schedules") in $(echo "$(date +%s.%N) - $start" | bc) s"
first=$(( ($(date +%s) / 60 + 1) * 60 ))
echo "first fire at $(date -u -d "@$first" +%H:%M:%S); waiting $minutes minute(s) of fires"
sleep $(( first + (minutes - 1) * 60 - $(date +%s) + 15 ))
kill -STOP "$pid"  # no more fires while the file is read
fired="FROM jobs JOIN labels USING (position) WHERE labels.key = 'schedule' AND jobs.created_at >= $first * 1000 AND jobs.created_at < ($first + $minutes * 60) * 1000"
echo "fires: $(sqlite3 "$db" "SELECT count(*) $fired") (expected $((schedules * minutes)))"
sqlite3 "$db" "SELECT created_at % 60000 $fired" | sort -n |
    awk '{ v[NR] = $1 } END { printf "fire lateness (createdAt - its minute) of %d fires: first %d ms, p50 %d ms, p99 %d ms, max %d ms\n", NR, v[1], v[int(NR * 0.5)], v[int(NR * 0.99)], v[NR] }'
echo "a (schedule, minute) with two jobs: $(sqlite3 "$db" "SELECT count(*) FROM (SELECT labels.value, jobs.created_at / 60000 AS minute, count(*) AS n $fired GROUP BY 1, 2 HAVING n > 1)")"
echo "server RSS $(awk '/^VmRSS/ {printf "%.0f MB", $2 / 1024}' "/proc/$pid/status")"
kill -CONT "$pid"
list=$(curl -s -o /dev/null -w '%{time_total} s, %{size_download} bytes' "$url/v1/schedules?limit=1000")
echo "GET /v1/schedules?limit=1000 (the largest page; 10,000 in one answer before paging): $list"
