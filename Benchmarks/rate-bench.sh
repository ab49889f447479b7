#!/usr/bin/env bash
# A pool's rate limit under load (SPEC §8 rate limits, §10 "a 100/s rate limit within ±5% over 10 s
# while other pools run at full speed"), and what the limited pool costs the others.
# Servers: BIN serve --memory --executor default=8 --executor paced=16,rate=100/s (the memory store,
# so that no fsync or writer thread stands between the two pools: the figure is about CPU and the
# queues). Each phase runs on a fresh server (port 0, its log in a temporary directory), so neither
# inherits the other's stored jobs; each starts with a 1 s wrk warm-up that is not measured.
#   phase 1  wrk (2 threads, 32 connections, one-task jobs on `default`: Benchmarks/wrk/post-job.lua)
#            for SECONDS: default_jobs_per_s_alone;
#   phase 2  one job holding a `map` over ITEMS items (3,000 — 30 s at 100/s, more than the window —
#            or 100 × (SECONDS + 10) when SECONDS > 20) whose template is a `value` task on `paced`;
#            after 1 s (the burst, 10 tokens, is spent), `completed` of `paced` is read from
#            GET /v1/executors, the same wrk load runs for SECONDS, and `completed` is read again;
#            the rate is the difference over the real time between the two reads (each read timed
#            at the middle of its request). Then the map job is cancelled.
# Printed (`name value unit`): paced_rate_per_s, paced_error_pct ((rate − 100) / 100 · 100),
# default_jobs_per_s_alone, default_jobs_per_s_with_paced, default_ratio (with / alone), and the
# paced pool's state at the end of the window (it must still have had work queued).
# wrk and the server share this machine's cores (2 here): the default pool's rate is what is left
# to the server beside wrk, in both phases alike.
# Usage: Benchmarks/rate-bench.sh BIN [SECONDS, default 10]    (BIN: e.g. .build/release/taskserver)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BIN [SECONDS]" >&2; exit 2; }
bin=$(realpath "$1")
secs=${2:-10}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
. scripts/server.sh
work=$(mktemp -d)
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
cat Benchmarks/wrk/post-job.lua Benchmarks/wrk/report.lua >"$work/post.lua"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
start() { # start LOG — a fresh server; sets pid and url
    start_server "$1" "$bin" serve --memory --executor default=8 --executor paced=16,rate=100/s --log-level notice
    pid=$SERVER_PID url=$SERVER_URL
}
stop() {
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
}
load() { # load SECONDS → the RESULT line of wrk posting one-task jobs on `default`
    wrk -t2 -c32 -d"$1s" -s "$work/post.lua" "$url/v1/jobs" | grep RESULT
}
paced() { # paced → "TIME_NS COMPLETED QUEUED RUNNING TOKENS": the paced pool, TIME_NS the middle of the request
    local a b body
    a=$(date +%s%N)
    body=$(curl -fsS "$url/v1/executors")
    b=$(date +%s%N)
    python3 -c '
import json, sys
t, body = int(sys.argv[1]), json.loads(sys.argv[2])
p = next(i for i in body["items"] if i["name"] == "paced")
print(t, p["completed"], p["queued"], p["running"], p.get("rate", {}).get("tokens", "-"))' $(((a + b) / 2)) "$body"
}

# Phase 1: the default pool alone.
start "$work/server1.log"
load 1 >/dev/null
alone_line=$(load "$secs")
alone=$(echo "$alone_line" | field rps)
stop

# Phase 2: the same load while `paced` works through a map at its limit.
start "$work/server2.log"
load 1 >/dev/null
items=3000
[ "$secs" -le 20 ] || items=$((100 * (secs + 10)))
job=$(python3 -c '
import json, sys
n = int(sys.argv[1])
print(json.dumps({"name": "rate-bench", "input": list(range(n)),
                  "graph": {"type": "map", "id": "fan", "items": "${input}",
                            "template": {"type": "task", "id": "paced", "executor": "paced",
                                         "action": "value", "params": {"value": 1}}}}))' "$items")
id=$(curl -fsS "$url/v1/jobs" -H 'content-type: application/json' -d "$job" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
[ -n "$id" ] || { echo "the map job was not accepted" >&2; exit 1; }
sleep 1
read -r t0 c0 _ _ _ < <(paced)
[ -n "${c0:-}" ] || { echo "GET /v1/executors: no paced pool" >&2; exit 1; }
with_line=$(load "$secs")
read -r t1 c1 q1 r1 k1 < <(paced)
with=$(echo "$with_line" | field rps)
curl -fsS -o /dev/null -X POST "$url/v1/jobs/$id/cancel"
stop

awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v a="$alone" -v w="$with" -v n="$items" \
    -v q="$q1" -v r="$r1" -v k="$k1" -v ea="$(echo "$alone_line" | field errors)" -v ew="$(echo "$with_line" | field errors)" 'BEGIN {
    s = (t1 - t0) / 1e9; rate = (c1 - c0) / s
    printf "# rate-bench: memory store, --executor default=8 --executor paced=16,rate=100/s, wrk -t2 -c32 one-task POSTs on default; map of %d items on paced\n", n
    printf "paced_rate_per_s %.2f tasks/s (%d attempts completed in %.3f s)\n", rate, c1 - c0, s
    printf "paced_error_pct %+.2f %%\n", (rate - 100) / 100 * 100
    printf "paced_at_end %d queued, %d running, %s tokens (queued must be > 0: the pool had work for the whole window)\n", q, r, k
    printf "default_jobs_per_s_alone %.0f jobs/s (wrk errors %d)\n", a, ea
    printf "default_jobs_per_s_with_paced %.0f jobs/s (wrk errors %d)\n", w, ew
    printf "default_ratio %.3f with/alone\n", w / a
}'
