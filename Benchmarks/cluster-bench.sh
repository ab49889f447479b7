#!/usr/bin/env bash
# A cluster on this machine's one PostgreSQL (issue #31, SPEC §10): one-task POSTs with 1, 2 and 3
# servers (release build) sharing a durable PostgreSQL 15 (fsync and synchronous_commit on,
# pg_stat_statements), 64 connections in all split evenly over the servers (wrk per server, at
# once), ROUNDS rounds of SECONDS each; then the idle database load with 3 servers, and the
# takeover time over KILLS SIGKILLs. Printed per server count (median round):
#   jobs_per_s            jobs accepted (201) per second, the sum over the servers
#   finished_per_s        the round's jobs over the time until the last has ended (a job whose
#                         key is held waits: accepted can outrun finished); the costs below are
#                         measured over that whole time
#   p99_ms                the worst server's p99
#   server_cpu_us_per_job CPU of each server process per job it took (the mean over the servers)
#   postgres_cpu_us_per_job, statements_per_job
#   writes_per_job        the servers' write transactions per job (each opens with the fence)
#   xacts_per_job         every transaction PostgreSQL counted per job (pg_stat_database), the
#                         listeners' reads of the notification queue included
# On 2 cores the servers and PostgreSQL share the CPU: the per-job figures are what predict a
# bigger machine. With KEYS=distinct (10,000 keys, max 1) or KEYS=hot (one key, max KEY_MAX, 8) each
# job's task holds a concurrency key (issue #42). Usage: [TASKSERVER_BIN=…] [KEYS=…] Benchmarks/cluster-bench.sh [seconds, default 8] [rounds, default 3]
# [kills, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-3}
kills=${3:-10}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# TASKSERVER_BIN: another build to measure (a comparison in one sitting); the release build otherwise.
if [ -n "${TASKSERVER_BIN:-}" ]; then
    bin=$TASKSERVER_BIN
else
    swift build -c release --product taskserver >/dev/null
    bin=$(swift build -c release --show-bin-path)/taskserver
fi
. scripts/server.sh
work=$(mktemp -d)
pg=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; bash scripts/postgres.sh stop "$pg"; rm -rf "$work" "$pg"' EXIT
url=$(PG_EXTRA="-c shared_preload_libraries=pg_stat_statements" bash scripts/postgres.sh start "$pg" --durable)
admin() { psql -h "$pg" -p "$(cat "$pg/port")" -U postgres -d taskserver -tAqc "$1"; }
admin "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
echo "PostgreSQL $(admin "SHOW server_version"), fsync=$(admin "SHOW fsync"), synchronous_commit=$(admin "SHOW synchronous_commit"), $(nproc) cores"
# KEYS=distinct|hot: each job's task holds a concurrency key (Benchmarks/wrk/post-keyed-job.lua).
if [ -n "${KEYS:-}" ]; then
    echo "each job's task holds a concurrency key: KEYS=$KEYS"
    cat Benchmarks/wrk/post-keyed-job.lua Benchmarks/wrk/report.lua >"$work/post.lua"
else
    cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua >"$work/post.lua"
fi
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
pgticks() {
    local total=0 pid postmaster
    postmaster=$(head -1 "$pg/data/postmaster.pid")
    for pid in "$postmaster" $(pgrep -P "$postmaster"); do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
statements() { admin "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"; }
writes() { admin "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '%taskserver_fence(%'"; }
commits() { admin "SELECT xact_commit FROM pg_stat_database WHERE datname = 'taskserver'"; }
hz=$(getconf CLK_TCK)

urls=()
start_node() { # start_node NAME
    start_server "$work/$1.log" "$bin" serve --database "$url" --node-name "$1" --log-level notice
    pids+=("$SERVER_PID")
    urls+=("$SERVER_URL")
}

results=$work/results
: >"$results"
for n in 1 2 3; do
    start_node "n$n"
    per=$((64 / n))
    loads=()
    for i in $(seq 0 $((n - 1))); do
        wrk -t1 -c"$per" -d2s -s "$work/post.lua" "${urls[$i]}/v1/jobs" >/dev/null &
        loads+=($!)
    done
    wait "${loads[@]}" # not a bare `wait`: the servers are this shell's children too
    for round in $(seq 1 "$rounds"); do
        s0=$(statements) w0=$(writes) k0=$(commits) p0=$(pgticks)
        c0=()
        for i in $(seq 0 $((n - 1))); do c0+=("$(ticks "${pids[$i]}")"); done
        loads=()
        for i in $(seq 0 $((n - 1))); do
            wrk -t1 -c"$per" -d"${secs}s" -s "$work/post.lua" "${urls[$i]}/v1/jobs" | grep RESULT >"$work/wrk$i" &
            loads+=($!)
        done
        wait "${loads[@]}"
        # Until every job accepted has ended (a job whose key is taken waits for it): the costs
        # below are the round's jobs' whole, and finished_per_s counts jobs done, not accepted.
        drain=$(date +%s.%N)
        until [ "$(admin "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')")" = 0 ]; do
            if [ "$(echo "$(date +%s.%N) - $drain > 300" | bc)" = 1 ]; then echo "jobs left unfinished after 300 s" >&2; exit 1; fi
            sleep 0.1
        done
        drain=$(echo "$(date +%s.%N) - $drain" | bc)
        s1=$(statements) w1=$(writes) k1=$(commits) p1=$(pgticks)
        rps=0 p99=0 cpu=0
        for i in $(seq 0 $((n - 1))); do
            line=$(cat "$work/wrk$i")
            rps=$(awk -v a="$rps" -v b="$(echo "$line" | field rps)" 'BEGIN { print a + b }')
            p99=$(awk -v a="$p99" -v b="$(echo "$line" | field p99)" 'BEGIN { print (b > a) ? b : a }')
            cpu=$((cpu + $(ticks "${pids[$i]}") - c0[i]))
        done
        awk -v n="$n" -v r="$round" -v rps="$rps" -v p99="$p99" -v secs="$secs" -v cpu="$cpu" -v hz="$hz" \
            -v s="$((s1 - s0))" -v w="$((w1 - w0))" -v k="$((k1 - k0))" -v p="$((p1 - p0))" -v drain="$drain" \
            'BEGIN { j = rps * secs
                printf "%d %d %.0f %.2f %.1f %.1f %.2f %.3f %.3f %.0f\n", n, r, rps, p99, cpu * 1e6 / hz / j, p * 1e6 / hz / j, s / j, w / j, k / j, j / (secs + drain) }' \
            >>"$results"
    done
done
echo "nodes round jobs_per_s p99_ms server_cpu_us_per_job postgres_cpu_us_per_job statements_per_job writes_per_job xacts_per_job finished_per_s"
cat "$results"
median() { awk -v n="$2" -v k="$1" '$1 == n { print $k }' "$results" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for n in 1 2 3; do
    printf '%d node(s), medians: %s jobs/s accepted, %s finished; p99 %s ms; per job: server %s us CPU, postgres %s us CPU, %s statements, %s write transactions, %s transactions\n' \
        "$n" "$(median 3 "$n")" "$(median 10 "$n")" "$(median 4 "$n")" "$(median 5 "$n")" "$(median 6 "$n")" "$(median 7 "$n")" "$(median 8 "$n")" "$(median 9 "$n")"
done

# Idle: 3 servers, no client, 10 s, once autovacuum has nothing left from the load to do (its
# transactions count in pg_stat_database too).
admin "VACUUM ANALYZE" >/dev/null
sleep 12 # PostgreSQL 15 flushes an idle backend's counters up to 10 s late
s0=$(statements) k0=$(commits) p0=$(pgticks)
sleep 10
s1=$(statements) k1=$(commits) p1=$(pgticks)
awk -v s="$((s1 - s0))" -v k="$((k1 - k0))" -v p="$((p1 - p0))" -v hz="$hz" \
    'BEGIN { printf "idle, 3 servers: %.1f statements/s, %.1f commits/s, postgres CPU %.2f%% of a core\n", s / 10, k / 10, p * 100 / hz / 10 }'

# Takeover: each time a server holding running jobs is killed, the time until none of its
# unfinished jobs is owned by it any more (it is started again before the next kill).
long='{"graph":{"type":"task","id":"t","action":"delay","params":{"ms":60000}}}'
times=()
for k in $(seq 1 "$kills"); do
    i=$(((k - 1) % 3))
    for _ in $(seq 1 20); do curl -fsS -o /dev/null -H 'content-type: application/json' -d "$long" "${urls[$i]}/v1/jobs"; done
    start=$(date +%s%N)
    kill -9 "${pids[$i]}"
    wait "${pids[$i]}" 2>/dev/null || true
    while [ "$(admin "SELECT count(*) FROM jobs WHERE owner = 'n$((i + 1))' AND state IN ('pending', 'running')")" != 0 ]; do
        sleep 0.05
    done
    times+=("$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')")
    start_server "$work/n$((i + 1)).log" "$bin" serve --database "$url" --node-name "n$((i + 1))" --log-level notice
    pids[i]=$SERVER_PID
    urls[i]=$SERVER_URL
done
printf '%s\n' "${times[@]}" | sort -g | awk '{ v[NR] = $1 } END { printf "takeover after SIGKILL over %d kills: p50 %.2f s, max %.2f s (all: ", NR, v[int((NR + 1) / 2)], v[NR] }'
echo "${times[*]})"
