#!/usr/bin/env bash
# One-task POSTs against several builds of taskserver, alternated round by round (a fresh server
# each run), to compare builds in one sitting on a shared, noisy machine: what a regression costs
# and which change brought it. Prints one line per run and, per build, the median and range of
# requests/s, p99 and server CPU per job (utime+stime over taskserver_jobs_submitted_total).
# Usage: Benchmarks/builds-bench.sh ROUNDS SECONDS memory|sqlite BIN…   (wrk -t1 -c64)
# A BIN may be written BIN@SCRIPT (a file of Benchmarks/wrk/) to post that request instead of
# post-job.lua; BENCH_SETUP, when set, is run (with SERVER_URL exported) after each server starts.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: $0 ROUNDS SECONDS memory|sqlite BIN…" >&2; exit 64; }
rounds=$1 secs=$2 store=$3
shift 3
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
. scripts/server.sh
work=$(mktemp -d)
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
hz=$(getconf CLK_TCK)
submitted() { curl -s "$1/metrics" | awk '/^taskserver_jobs_submitted_total/ { s += $2 } END { print s + 0 }'; }
: >"$work/runs"
for round in $(seq 1 "$rounds"); do
    for entry in "$@"; do
        bin=${entry%@*} script=post-job.lua
        [ "$entry" = "$bin" ] || script=${entry##*@}
        cat "Benchmarks/wrk/$script" Benchmarks/wrk/report.lua >"$work/post.lua"
        rm -f "$work"/ts.sqlite*
        if [ "$store" = memory ]; then args=(--memory); else args=(--data "$work/ts.sqlite"); fi
        start_server "$work/log" "$bin" serve "${args[@]}" --log-level notice
        pid=$SERVER_PID
        if [ -n "${BENCH_SETUP:-}" ]; then SERVER_URL=$SERVER_URL bash -c "$BENCH_SETUP"; fi
        wrk -t1 -c64 -d1s -s "$work/post.lua" "$SERVER_URL/v1/jobs" >/dev/null # warm-up
        ticks0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
        jobs0=$(submitted "$SERVER_URL")
        line=$(wrk -t1 -c64 -d"${secs}s" -s "$work/post.lua" "$SERVER_URL/v1/jobs" | grep RESULT)
        ticks1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
        jobs1=$(submitted "$SERVER_URL")
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        rps=$(echo "$line" | sed -n 's/.*rps=\([0-9.]*\).*/\1/p')
        p99=$(echo "$line" | sed -n 's/.*p99=\([0-9.]*\).*/\1/p')
        cpu=$(awk -v t=$((ticks1 - ticks0)) -v j=$((jobs1 - jobs0)) -v hz="$hz" \
            'BEGIN { if (j > 0) printf "%.1f", t / hz * 1e6 / j; else print "nan" }')
        echo "round $round $entry $store rps=$rps p99_ms=$p99 cpu_us_per_job=$cpu" | tee -a "$work/runs"
    done
done
python3 - "$work/runs" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+) \S+ rps=([\d.]+) p99_ms=([\d.]+) cpu_us_per_job=([\d.]+)", line)
    if m:
        runs.setdefault(m[1], []).append(tuple(float(v) for v in m.groups()[1:]))
for bin, values in runs.items():
    cols = list(zip(*values))
    show = lambda i, f: f"{f.format(statistics.median(cols[i]))} [{f.format(min(cols[i]))}-{f.format(max(cols[i]))}]"
    print(f"{bin}: rps {show(0, '{:.0f}')}  p99_ms {show(1, '{:.1f}')}  cpu_us_per_job {show(2, '{:.1f}')}")
PY
