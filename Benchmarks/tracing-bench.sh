#!/usr/bin/env bash
# What traces cost (issue #46): one-task POSTs (wrk -t1 -c64, Benchmarks/wrk/post-job.lua) against
# one build of taskserver with tracing off, on with sampling 0 (always_off), on at 100 % into a
# local OTLP receiver, and on at 100 % into a collector that is down (connection refused), answers
# 500, answers after 10 s, or closes the connection — variants alternated round by round, a fresh
# server each run, so that every ratio comes from one sitting. Prints one line per run and, per
# variant, the median and range of requests/s, p99, server CPU per job (utime+stime over
# taskserver_jobs_submitted_total), and spans exported and dropped; then each variant's ratio to off.
# Usage: Benchmarks/tracing-bench.sh ROUNDS SECONDS memory|sqlite BIN
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: $0 ROUNDS SECONDS memory|sqlite BIN" >&2; exit 64; }
rounds=$1 secs=$2 store=$3 bin=$4
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
py=.build/venv/bin/python
[ -x "$py" ] || py=python3
. scripts/server.sh
work=$(mktemp -d)
pid="" receiver=""
trap 'kill $pid $receiver 2>/dev/null || true; rm -rf "$work"' EXIT
receiver_port=${TRACING_BENCH_RECEIVER_PORT:-14319}
"$py" Tests/tracing/otlp_receiver.py --port "$receiver_port" --mode count >"$work/receiver.log" 2>&1 &
receiver=$!
for _ in $(seq 1 250); do curl -fsS -o /dev/null "http://127.0.0.1:$receiver_port/stats" 2>/dev/null && break; sleep 0.02; done
hz=$(getconf CLK_TCK)
metric() { curl -s "$1/metrics" | awk -v m="^$2" '$0 ~ m { s += $2 } END { print s + 0 }'; }
cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua >"$work/post.lua"
read -r -a variants <<<"${TRACING_BENCH_VARIANTS:-off sampled0 on100 down err500 slow closed}"
: >"$work/runs"
for round in $(seq 1 "$rounds"); do
    for variant in "${variants[@]}"; do
        rm -f "$work"/ts.sqlite*
        if [ "$store" = memory ]; then args=(--memory); else args=(--data "$work/ts.sqlite"); fi
        env=(OTEL_BSP_SCHEDULE_DELAY=1000)
        mode=count
        case $variant in
        off) ;;
        sampled0) args+=(--otlp-endpoint "http://127.0.0.1:$receiver_port") env+=(OTEL_TRACES_SAMPLER=always_off) ;;
        on100) args+=(--otlp-endpoint "http://127.0.0.1:$receiver_port") ;;
        down) args+=(--otlp-endpoint "http://127.0.0.1:9") ;;
        err500) args+=(--otlp-endpoint "http://127.0.0.1:$receiver_port") mode=500 ;;
        slow) args+=(--otlp-endpoint "http://127.0.0.1:$receiver_port") mode=slow ;;
        closed) args+=(--otlp-endpoint "http://127.0.0.1:$receiver_port") mode=close ;;
        esac
        curl -fsS -o /dev/null -X POST --data "$mode" "http://127.0.0.1:$receiver_port/mode"
        for setting in "${env[@]}"; do export "${setting?}"; done
        start_server "$work/log" "$bin" serve "${args[@]}" --log-level notice
        for setting in "${env[@]}"; do unset "${setting%%=*}"; done
        pid=$SERVER_PID url=$SERVER_URL
        wrk -t1 -c64 -d1s -s "$work/post.lua" "$url/v1/jobs" >/dev/null # warm-up
        ticks0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
        jobs0=$(metric "$url" taskserver_jobs_submitted_total)
        line=$(wrk -t1 -c64 -d"${secs}s" -s "$work/post.lua" "$url/v1/jobs" | grep RESULT)
        ticks1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
        jobs1=$(metric "$url" taskserver_jobs_submitted_total)
        exported=$(metric "$url" taskserver_spans_exported_total)
        dropped=$(metric "$url" taskserver_spans_dropped_total)
        kill "$pid"
        for _ in $(seq 1 500); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done
        rps=$(echo "$line" | sed -n 's/.*rps=\([0-9.]*\).*/\1/p')
        p99=$(echo "$line" | sed -n 's/.*p99=\([0-9.]*\).*/\1/p')
        cpu=$(awk -v t=$((ticks1 - ticks0)) -v j=$((jobs1 - jobs0)) -v hz="$hz" \
            'BEGIN { if (j > 0) printf "%.1f", t / hz * 1e6 / j; else print "nan" }')
        echo "round $round $variant $store rps=$rps p99_ms=$p99 cpu_us_per_job=$cpu spans_exported=$exported spans_dropped=$dropped" |
            tee -a "$work/runs"
    done
done
python3 - "$work/runs" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+) \S+ rps=([\d.]+) p99_ms=([\d.]+) cpu_us_per_job=([\d.]+) spans_exported=(\d+) spans_dropped=(\d+)", line)
    if m:
        runs.setdefault(m[1], []).append(tuple(float(v) for v in m.groups()[1:]))
med = {}
for variant, values in runs.items():
    cols = list(zip(*values))
    med[variant] = [statistics.median(c) for c in cols]
    show = lambda i, f: f"{f.format(statistics.median(cols[i]))} [{f.format(min(cols[i]))}-{f.format(max(cols[i]))}]"
    print(f"{variant:9} rps {show(0, '{:.0f}')}  p99_ms {show(1, '{:.1f}')}  cpu_us_per_job {show(2, '{:.1f}')}"
          f"  spans exported {show(3, '{:.0f}')} dropped {show(4, '{:.0f}')}")
if "off" in med:
    off = med["off"]
    for variant, m in med.items():
        if variant != "off":
            print(f"ratio {variant:9} rps {m[0] / off[0]:.3f} of off; cpu per job +{m[2] - off[2]:.1f} us ({off[2] / m[2]:.3f} of off's cost)")
PY
