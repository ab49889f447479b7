#!/usr/bin/env bash
# The durable store against the memory store, one-task POSTs, in one run (issue #16):
# both servers up side by side; ROUNDS rounds, each a wrk run per store at 64 and at 16 connections
# (the order of the stores alternates between rounds, so drift favours none); then the median
# and range of the durable / memory ratio at each concurrency, the durable p99, and what the
# store's writer costs per job:
#   writer_cpu_us_per_job    CPU time of the `store-writer` thread (/proc/PID/task/TID/stat) / jobs
#   commit_us_per_job        wall time inside transactions, fsync included (store_commit_duration)
#   jobs_per_commit          jobs / transactions (how much one fsync serves)
#   cpu_us_per_job           CPU time of the whole process per job (/proc/PID/stat), durable and memory,
#                            and the durable server's split: its thread completing commits
#                            (`store-completion`: starting jobs, building responses) and its event loops
# and at the end the data file's size per job (after a clean stop, so the WAL is checkpointed).
# With BASELINE_BIN=path/to/another/taskserver (an older build, e.g. from a `git worktree`), a third
# server runs that binary on a data file of its own, in every round beside the other two, and the
# summary adds this build's SQLite rate over the baseline's: a before/after measured in one run.
# Usage: [BASELINE_BIN=…] Benchmarks/store-bench.sh [seconds per run, default 8] [rounds, default 3] [sync: full|normal]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-3}
sync=${3:-full}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
swift build -c release --product taskserver >/dev/null
bin=$(swift build -c release --show-bin-path)/taskserver
. scripts/server.sh
work=$(mktemp -d)
memory="" durable="" baseline=""
trap 'kill $memory $durable $baseline 2>/dev/null || true; rm -rf "$work"' EXIT
start_server "$work/memory.log" "$bin" serve --memory --log-level notice
memory=$SERVER_PID memory_url=$SERVER_URL
start_server "$work/durable.log" "$bin" serve --data "$work/taskserver.sqlite" --sync "$sync" --log-level notice
durable=$SERVER_PID durable_url=$SERVER_URL
if [ -n "${BASELINE_BIN:-}" ]; then
    start_server "$work/baseline.log" "$BASELINE_BIN" serve --data "$work/baseline.sqlite" --sync "$sync" --log-level notice
    baseline=$SERVER_PID baseline_url=$SERVER_URL
fi
cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua >"$work/post.lua"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
# metric NAME [URL] — the value of an unlabelled sample of a server's /metrics (the durable one's).
metric() {
    local page
    page=$(curl -fsS "${2:-$durable_url}/metrics")
    awk -v n="$1" '$1 == n { print $2; exit }' <<<"$page"
}
# ticks PID — "process writer completion loops": CPU clock ticks so far of the whole process
# (exited threads included) and of its threads by name.
ticks() {
    local task comm process writer=0 completion=0 loops=0 t
    process=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
    for task in /proc/"$1"/task/*; do
        comm=$(cat "$task/comm" 2>/dev/null) || continue
        t=$(awk '{ print $14 + $15 }' "$task/stat" 2>/dev/null) || continue
        case $comm in
        store-writer) writer=$((writer + t)) ;;
        store-completi*) completion=$((completion + t)) ;;
        NIO-ELT-*) loops=$((loops + t)) ;;
        esac
    done
    echo "$process $writer $completion $loops"
}
run() { # run URL CONNECTIONS → "rps p99"
    local line
    line=$(wrk -t1 -c"$2" -d"${secs}s" -s "$work/post.lua" "$1/v1/jobs" | grep RESULT)
    echo "$(echo "$line" | field rps) $(echo "$line" | field p99)"
}

# Warm both (allocators, caches, the file's first pages).
run "$memory_url" 64 >/dev/null
run "$durable_url" 64 >/dev/null
[ -z "$baseline" ] || run "$baseline_url" 64 >/dev/null
hz=$(getconf CLK_TCK)
results=$work/results
: >"$results"
for round in $(seq 1 "$rounds"); do
    for c in 64 16; do
        read -r cpu0 writer0 completion0 loops0 < <(ticks "$durable")
        read -r mcpu0 _ < <(ticks "$memory")
        jobs0=$(metric taskserver_jobs_submitted_total) mjobs0=$(metric taskserver_jobs_submitted_total "$memory_url")
        commits0=$(metric taskserver_store_commit_duration_seconds_count)
        sum0=$(metric taskserver_store_commit_duration_seconds_sum)
        brps=0 bp99=0
        if [ $((round % 2)) = 1 ]; then
            read -r mrps _ < <(run "$memory_url" "$c")
            read -r drps dp99 < <(run "$durable_url" "$c")
            if [ -n "$baseline" ]; then read -r brps bp99 < <(run "$baseline_url" "$c"); fi
        else
            if [ -n "$baseline" ]; then read -r brps bp99 < <(run "$baseline_url" "$c"); fi
            read -r drps dp99 < <(run "$durable_url" "$c")
            read -r mrps _ < <(run "$memory_url" "$c")
        fi
        read -r cpu1 writer1 completion1 loops1 < <(ticks "$durable")
        read -r mcpu1 _ < <(ticks "$memory")
        jobs1=$(metric taskserver_jobs_submitted_total) mjobs1=$(metric taskserver_jobs_submitted_total "$memory_url")
        commits1=$(metric taskserver_store_commit_duration_seconds_count)
        sum1=$(metric taskserver_store_commit_duration_seconds_sum)
        awk -v r="$round" -v c="$c" -v m="$mrps" -v d="$drps" -v p="$dp99" -v t0="$writer0" -v t1="$writer1" \
            -v j0="$jobs0" -v j1="$jobs1" -v k0="$commits0" -v k1="$commits1" -v s0="$sum0" -v s1="$sum1" -v hz="$hz" \
            -v b="$brps" -v bp="$bp99" -v c0="$cpu0" -v c1="$cpu1" -v o0="$completion0" -v o1="$completion1" \
            -v l0="$loops0" -v l1="$loops1" -v mc0="$mcpu0" -v mc1="$mcpu1" -v mj0="$mjobs0" -v mj1="$mjobs1" \
            'BEGIN { j = j1 - j0; u = 1e6 / hz / j
                printf "%d %d %.0f %.0f %.3f %.3f %.1f %.1f %.1f %.0f %.3f %.3f %.1f %.1f %.1f %.1f\n", r, c, m, d, d / m, p,
                (t1 - t0) * u, (s1 - s0) * 1e6 / j, j / (k1 - k0), b, (b > 0 ? d / b : 0), bp,
                (c1 - c0) * u, (o1 - o0) * u, (l1 - l0) * u, (mc1 - mc0) * 1e6 / hz / (mj1 - mj0) }' >>"$results"
    done
done

echo "round conns memory_rps durable_rps ratio durable_p99_ms writer_cpu_us_per_job commit_us_per_job jobs_per_commit" \
    "baseline_rps durable_vs_baseline baseline_p99_ms durable_cpu_us_per_job completion_cpu_us_per_job" \
    "loops_cpu_us_per_job memory_cpu_us_per_job"
cat "$results"
for c in 64 16; do
    awk -v c="$c" '$2 == c { print $5 }' "$results" | sort -n | awk -v c="$c" \
        '{ v[NR] = $1 } END { printf "durable_vs_memory_c%d median %.2f range %.2f–%.2f (%d runs)\n", c, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
    awk -v c="$c" '$2 == c { print $6 }' "$results" | sort -n | awk -v c="$c" \
        '{ v[NR] = $1 } END { printf "durable_p99_c%d median %.2f ms, max %.2f ms\n", c, v[int((NR + 1) / 2)], v[NR] }'
    awk -v c="$c" '$2 == c { w += $7; k += $8; n++ } END { printf "writer_cpu_us_per_job_c%d %.1f us, commit_us_per_job %.1f us\n", c, w / n, k / n }' "$results"
    awk -v c="$c" '$2 == c { d += $13; w += $7; o += $14; l += $15; m += $16; n++ } END {
        printf "cpu_us_per_job_c%d durable %.1f us (writer %.1f, completion %.1f, event loops %.1f), memory %.1f us\n",
            c, d / n, w / n, o / n, l / n, m / n }' "$results"
    if [ -n "$baseline" ]; then
        awk -v c="$c" '$2 == c { print $11 }' "$results" | sort -n | awk -v c="$c" \
            '{ v[NR] = $1 } END { printf "durable_vs_baseline_c%d median %.2f range %.2f–%.2f\n", c, v[int((NR + 1) / 2)], v[1], v[NR] }'
        awk -v c="$c" '$2 == c { print $12 }' "$results" | sort -n | awk -v c="$c" \
            '{ v[NR] = $1 } END { printf "baseline_p99_c%d median %.2f ms, max %.2f ms\n", c, v[int((NR + 1) / 2)], v[NR] }'
    fi
done
jobs=$(metric taskserver_jobs)
kill -TERM "$durable"
wait "$durable" 2>/dev/null || true
durable=""
bytes=$(stat -c %s "$work/taskserver.sqlite")
awk -v b="$bytes" -v j="$jobs" 'BEGIN { printf "file_bytes_per_job %.0f B (%d jobs, %.1f MB)\n", b / j, j, b / 1e6 }'
