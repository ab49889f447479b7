#!/usr/bin/env bash
# HTTP benchmarks with wrk, TaskServer beside a bare SwiftNIO server in one run, on loopback.
# Prints one line per figure (`<id> <number> <unit>`) and the ratios the issue asks for.
# Usage: Benchmarks/run-http-bench.sh [seconds per run, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# One product per call: swift build honours only the last --product it is given.
for product in taskserver bare-nio; do swift build -c release --product "$product" >/dev/null; done
bin=$(swift build -c release --show-bin-path)
. scripts/server.sh
work=$(mktemp -d)
ts="" bare="" durable=""
trap 'kill $ts $bare $durable 2>/dev/null || true; rm -rf "$work"' EXIT
# The servers take ports of their choosing (--port 0) and log them; at `notice` they log nothing
# per request (request logs are `debug`), as at `error`.
start_server "$work/ts.log" "$bin/taskserver" serve --memory --log-level notice
ts=$SERVER_PID ts_url=$SERVER_URL
start_server "$work/durable.log" "$bin/taskserver" serve --data "$work/taskserver.sqlite" --log-level notice
durable=$SERVER_PID durable_url=$SERVER_URL
# bare-nio takes a fixed port and says nothing we can read in time (its stdout is buffered): wait
# until it answers (a bounded poll), or until it has exited (the port was taken).
bare_port=${BARE_NIO_PORT:-18090}
bare_url=http://127.0.0.1:$bare_port
"$bin/bare-nio" "$bare_port" >"$work/bare.log" 2>&1 &
bare=$!
for _ in $(seq 1 500); do
    curl -fsS -o /dev/null "$bare_url/" 2>/dev/null && break
    kill -0 "$bare" 2>/dev/null || { echo "bare-nio exited:"; cat "$work/bare.log"; exit 1; }
    sleep 0.02
done
curl -fsS -o /dev/null "$bare_url/" || { echo "bare-nio does not answer on $bare_url"; exit 1; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

job=$(curl -s "$ts_url/v1/jobs?waitMs=5000" -H 'content-type: application/json' \
    -d '{"graph":{"type":"task","action":"value","params":{"value":42}}}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')

bare_get=$(wrk -t1 -c64 -d"${secs}s" -s Benchmarks/wrk/report.lua "$bare_url/" | grep RESULT | field rps)
ts_health=$(wrk -t1 -c64 -d"${secs}s" -s Benchmarks/wrk/report.lua "$ts_url/healthz" | grep RESULT | field rps)
ts_getjob=$(wrk -t1 -c64 -d"${secs}s" -s Benchmarks/wrk/report.lua "$ts_url/v1/jobs/$job" | grep RESULT | field rps)
cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua > "$work/ts-post.lua"
cat Benchmarks/wrk/post-job-wait.lua Benchmarks/wrk/report.lua > "$work/ts-post-wait.lua"
bare_post=$(wrk -t1 -c64 -d"${secs}s" -s "$work/ts-post.lua" "$bare_url/" | grep RESULT | field rps)
ts_post=$(wrk -t1 -c64 -d"${secs}s" -s "$work/ts-post.lua" "$ts_url/v1/jobs" | grep RESULT | field rps)
durable_line=$(wrk -t1 -c64 -d"${secs}s" -s "$work/ts-post.lua" "$durable_url/v1/jobs" | grep RESULT)
durable_post=$(echo "$durable_line" | field rps)
durable16_line=$(wrk -t1 -c16 -d"${secs}s" -s "$work/ts-post.lua" "$durable_url/v1/jobs" | grep RESULT)
wait_line=$(wrk -t1 -c32 -d"${secs}s" -s "$work/ts-post-wait.lua" "$ts_url/" | grep RESULT)

echo "bare_get_rps $bare_get req/s"
echo "healthz_rps $ts_health req/s"
echo "get_job_rps $ts_getjob req/s"
echo "bare_post_codable_rps $bare_post req/s"
echo "post_job_rps $ts_post req/s"
echo "post_job_durable_rps $durable_post req/s (SQLite, synchronous=FULL, 64 connections)"
echo "post_job_durable_p99 $(echo "$durable_line" | field p99) ms (64 connections)"
echo "post_job_durable_c16_rps $(echo "$durable16_line" | field rps) req/s, p99 $(echo "$durable16_line" | field p99) ms (16 connections)"
echo "submit_wait_rps $(echo "$wait_line" | field rps) req/s"
echo "submit_wait_p50 $(echo "$wait_line" | field p50) ms"
echo "submit_wait_p99 $(echo "$wait_line" | field p99) ms"
awk -v a="$ts_health" -v b="$bare_get" 'BEGIN { printf "healthz_vs_bare_get %.2f ratio\n", a / b }'
awk -v a="$ts_post" -v b="$bare_post" 'BEGIN { printf "post_job_vs_bare_post %.2f ratio\n", a / b }'
awk -v a="$durable_post" -v b="$ts_post" 'BEGIN { printf "durable_vs_memory_post %.2f ratio\n", a / b }'
