#!/usr/bin/env bash
# The PostgreSQL store beside the SQLite store, one-task POSTs, in one run (issue #30): a durable
# PostgreSQL 15 (fsync and synchronous_commit on; scripts/postgres.sh --durable, with
# pg_stat_statements) and two servers of the release build, one per store (SQLite `--sync full`).
# ROUNDS rounds, each a wrk run per store at 64 and at 16 connections (the order alternates
# between rounds); then per concurrency the median PostgreSQL and SQLite rates, their ratio, p99,
# and what the database sees per job:
#   statements_per_job   statements PostgreSQL ran (pg_stat_statements) / jobs; a commit of new
#                        jobs and journal entries is one round trip (libpq's pipeline mode)
#   commits_per_job      transactions committed (pg_stat_database.xact_commit) / jobs
#   wal_bytes_per_job    WAL written (pg_current_wal_lsn) / jobs
#   cpu_us_per_job       CPU of the server process, and of the PostgreSQL processes, per job
# Usage: Benchmarks/postgres-bench.sh [seconds per run, default 8] [rounds, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-3}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
swift build -c release --product taskserver >/dev/null
bin=$(swift build -c release --show-bin-path)/taskserver
. scripts/server.sh
work=$(mktemp -d)
pg=$(mktemp -d) # its own: mktemp's 0700 directories are closed to the postgres user
sqlite="" postgres=""
trap 'kill $sqlite $postgres 2>/dev/null || true; bash scripts/postgres.sh stop "$pg"; rm -rf "$work" "$pg"' EXIT
url=$(PG_EXTRA="-c shared_preload_libraries=pg_stat_statements" bash scripts/postgres.sh start "$pg" --durable)
admin() { psql -h "$pg" -p "$(cat "$pg/port")" -U postgres -d taskserver -tAqc "$1"; }
admin "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
echo "PostgreSQL $(admin "SHOW server_version"), fsync=$(admin "SHOW fsync"), synchronous_commit=$(admin "SHOW synchronous_commit")"

start_server "$work/sqlite.log" "$bin" serve --data "$work/taskserver.sqlite" --sync full --log-level notice
sqlite=$SERVER_PID sqlite_url=$SERVER_URL
start_server "$work/postgres.log" "$bin" serve --database "$url" --log-level notice
postgres=$SERVER_PID postgres_url=$SERVER_URL
cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua >"$work/post.lua"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
metric() { # metric URL NAME — an unlabelled sample of a server's /metrics
    local page
    page=$(curl -fsS "$1/metrics")
    awk -v n="$2" '$1 == n { print $2; exit }' <<<"$page"
}
run() { # run URL CONNECTIONS → "rps p99"
    local line
    line=$(wrk -t1 -c"$2" -d"${secs}s" -s "$work/post.lua" "$1/v1/jobs" | grep RESULT)
    echo "$(echo "$line" | field rps) $(echo "$line" | field p99)"
}
# The database's counters: "statements commits wal_bytes postgres_cpu_ticks".
database() {
    local statements commits wal ticks=0 pid
    statements=$(admin "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements")
    commits=$(admin "SELECT xact_commit FROM pg_stat_database WHERE datname = 'taskserver'")
    wal=$(admin "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
    local postmaster
    postmaster=$(head -1 "$pg/data/postmaster.pid")
    for pid in "$postmaster" $(pgrep -P "$postmaster"); do
        ticks=$((ticks + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$statements $commits $wal $ticks"
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

run "$sqlite_url" 64 >/dev/null
run "$postgres_url" 64 >/dev/null
hz=$(getconf CLK_TCK)
results=$work/results
: >"$results"
for round in $(seq 1 "$rounds"); do
    for c in 64 16; do
        if [ $((round % 2)) = 1 ]; then
            read -r srps sp99 < <(run "$sqlite_url" "$c")
        fi
        read -r s0 k0 w0 t0 < <(database)
        jobs0=$(metric "$postgres_url" taskserver_jobs_submitted_total)
        cpu0=$(ticks "$postgres")
        read -r prps pp99 < <(run "$postgres_url" "$c")
        read -r s1 k1 w1 t1 < <(database)
        jobs1=$(metric "$postgres_url" taskserver_jobs_submitted_total)
        cpu1=$(ticks "$postgres")
        if [ $((round % 2)) = 0 ]; then
            read -r srps sp99 < <(run "$sqlite_url" "$c")
        fi
        awk -v r="$round" -v c="$c" -v p="$prps" -v pp="$pp99" -v s="$srps" -v sp="$sp99" -v j0="$jobs0" -v j1="$jobs1" \
            -v s0="$s0" -v s1="$s1" -v k0="$k0" -v k1="$k1" -v w0="$w0" -v w1="$w1" -v t0="$t0" -v t1="$t1" \
            -v c0="$cpu0" -v c1="$cpu1" -v hz="$hz" \
            'BEGIN { j = j1 - j0
                printf "%d %d %.0f %.2f %.0f %.2f %.2f %.3f %.3f %.0f %.1f %.1f\n", r, c, p, pp, s, sp, p / s,
                    (s1 - s0) / j, (k1 - k0) / j, (w1 - w0) / j, (c1 - c0) * 1e6 / hz / j, (t1 - t0) * 1e6 / hz / j }' >>"$results"
    done
done
echo "round conns postgres_rps postgres_p99_ms sqlite_rps sqlite_p99_ms postgres_vs_sqlite statements_per_job" \
    "commits_per_job wal_bytes_per_job server_cpu_us_per_job postgres_cpu_us_per_job"
cat "$results"
# median COLUMN CONNECTIONS — the median of a column over the rounds at that concurrency.
median() { awk -v c="$2" -v k="$1" '$2 == c { print $k }' "$results" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for c in 64 16; do
    printf 'c%d medians: postgres %s jobs/s (p99 %s ms), sqlite %s jobs/s (p99 %s ms), postgres/sqlite %s; per job: %s statements, %s commits, %s WAL bytes, server %s us CPU, postgres %s us CPU\n' \
        "$c" "$(median 3 "$c")" "$(median 4 "$c")" "$(median 5 "$c")" "$(median 6 "$c")" "$(median 7 "$c")" \
        "$(median 8 "$c")" "$(median 9 "$c")" "$(median 10 "$c")" "$(median 11 "$c")" "$(median 12 "$c")"
done
