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
"$bin/taskserver" serve --memory --port 18080 --log-level error >/dev/null 2>&1 &
ts=$!
"$bin/bare-nio" 18090 >/dev/null 2>&1 &
bare=$!
datadir=$(mktemp -d)
"$bin/taskserver" serve --data "$datadir/taskserver.sqlite" --port 18081 --log-level error >/dev/null 2>&1 &
durable=$!
trap 'kill $ts $bare $durable 2>/dev/null || true; rm -rf "$datadir"' EXIT
sleep 1

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

job=$(curl -s "http://127.0.0.1:18080/v1/jobs?waitMs=5000" -H 'content-type: application/json' \
    -d '{"graph":{"type":"task","action":"value","params":{"value":42}}}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')

bare_get=$(wrk -t1 -c64 -d"${secs}s" -s Benchmarks/wrk/report.lua http://127.0.0.1:18090/ | grep RESULT | field rps)
ts_health=$(wrk -t1 -c64 -d"${secs}s" -s Benchmarks/wrk/report.lua http://127.0.0.1:18080/healthz | grep RESULT | field rps)
ts_getjob=$(wrk -t1 -c64 -d"${secs}s" -s Benchmarks/wrk/report.lua "http://127.0.0.1:18080/v1/jobs/$job" | grep RESULT | field rps)
cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua > /tmp/ts-post.lua
cat Benchmarks/wrk/post-job-wait.lua Benchmarks/wrk/report.lua > /tmp/ts-post-wait.lua
bare_post=$(wrk -t1 -c64 -d"${secs}s" -s /tmp/ts-post.lua http://127.0.0.1:18090/ | grep RESULT | field rps)
ts_post=$(wrk -t1 -c64 -d"${secs}s" -s /tmp/ts-post.lua http://127.0.0.1:18080/v1/jobs | grep RESULT | field rps)
durable_line=$(wrk -t1 -c64 -d"${secs}s" -s /tmp/ts-post.lua http://127.0.0.1:18081/v1/jobs | grep RESULT)
durable_post=$(echo "$durable_line" | field rps)
durable16_line=$(wrk -t1 -c16 -d"${secs}s" -s /tmp/ts-post.lua http://127.0.0.1:18081/v1/jobs | grep RESULT)
wait_line=$(wrk -t1 -c32 -d"${secs}s" -s /tmp/ts-post-wait.lua http://127.0.0.1:18080/ | grep RESULT)

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
