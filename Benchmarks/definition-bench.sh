#!/usr/bin/env bash
# Starting a job by definition against submitting the same job inline (issue #45: within 5 %), on
# one server per round, the two alternated run by run (wrk -t1 -c64, one-task jobs). The definition
# "bench" holds the graph and timeoutMs of Benchmarks/wrk/post-job.lua; its starts carry the rest
# (name, input, labels), so both make the same job. Prints one line per run and, per form, the
# median and range of requests/s, p99 and server CPU per job, then the ratio of the medians.
# Usage: Benchmarks/definition-bench.sh ROUNDS SECONDS memory|sqlite BIN
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: $0 ROUNDS SECONDS memory|sqlite BIN" >&2; exit 64; }
rounds=$1 secs=$2 store=$3 bin=$4
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
. scripts/server.sh
work=$(mktemp -d)
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
hz=$(getconf CLK_TCK)
submitted() { curl -s "$1/metrics" | awk '/^taskserver_jobs_submitted_total/ { s += $2 } END { print s + 0 }'; }
: >"$work/runs"
for round in $(seq 1 "$rounds"); do
    for form in inline definition; do
        rm -f "$work"/ts.sqlite*
        if [ "$store" = memory ]; then args=(--memory); else args=(--data "$work/ts.sqlite"); fi
        start_server "$work/log" "$bin" serve "${args[@]}" --log-level notice
        pid=$SERVER_PID
        curl -sf -X PUT "$SERVER_URL/v1/definitions/bench" -H 'content-type: application/json' \
            -d '{"graph":{"type":"task","id":"fetch","action":"value","params":{"value":42}},"defaults":{"timeoutMs":600000}}' >/dev/null
        if [ "$form" = inline ]; then script=post-job.lua; else script=post-definition.lua; fi
        cat "Benchmarks/wrk/$script" Benchmarks/wrk/report.lua >"$work/post.lua"
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
        echo "round $round $form $store rps=$rps p99_ms=$p99 cpu_us_per_job=$cpu" | tee -a "$work/runs"
    done
done
python3 - "$work/runs" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+) \S+ rps=([\d.]+) p99_ms=([\d.]+) cpu_us_per_job=([\d.]+)", line)
    if m:
        runs.setdefault(m[1], []).append(tuple(float(v) for v in m.groups()[1:]))
medians = {}
for form, values in runs.items():
    cols = list(zip(*values))
    medians[form] = [statistics.median(c) for c in cols]
    show = lambda i, f: f"{f.format(statistics.median(cols[i]))} [{f.format(min(cols[i]))}-{f.format(max(cols[i]))}]"
    print(f"{form}: rps {show(0, '{:.0f}')}  p99_ms {show(1, '{:.1f}')}  cpu_us_per_job {show(2, '{:.1f}')}")
if "inline" in medians and "definition" in medians:
    i, d = medians["inline"], medians["definition"]
    print(f"definition/inline: rps {d[0] / i[0]:.3f}  cpu_us_per_job {d[2] / i[2]:.3f} (target: cpu within 1.05)")
PY
