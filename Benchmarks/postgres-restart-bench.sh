#!/usr/bin/env bash
# Restart time of the PostgreSQL store (issue #30), as Benchmarks/restart-bench.sh measures the
# SQLite one: a database with 100,000 finished jobs and 1,000 unfinished ones (each waiting in an
# `await` task), then the time from starting the server to its first `200` on /readyz — every
# unfinished job resumed by then. The rows are made by the server itself (one finished job, one
# waiting job, then SIGKILL) and multiplied with SQL, so they are exactly what the server writes.
# A durable PostgreSQL 15 (fsync on) is started in a temporary directory (scripts/postgres.sh).
# Usage: Benchmarks/postgres-restart-bench.sh [finished, default 100000] [unfinished, default 1000]
set -euo pipefail
cd "$(dirname "$0")/.."
finished=${1:-100000}
unfinished=${2:-1000}
swift build -c release --product taskserver >/dev/null
bin=$(swift build -c release --show-bin-path)/taskserver
. scripts/server.sh
dir=$(mktemp -d)
pg=$(mktemp -d) # its own: mktemp's 0700 directories are closed to the postgres user
pid=""
trap 'kill $pid 2>/dev/null || true; bash scripts/postgres.sh stop "$pg"; rm -rf "$dir" "$pg"' EXIT
db=$(bash scripts/postgres.sh start "$pg" --durable)
sql() { psql "$db" -v ON_ERROR_STOP=1 -tAqc "$1"; }

start_server "$dir/make.log" "$bin" serve --database "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL
done_id=$(curl -fsS "$url/v1/jobs?waitMs=5000" -H 'content-type: application/json' \
    -d '{"labels":{"kind":"done"},"graph":{"type":"series","id":"s","steps":[{"type":"task","id":"a","action":"value","params":{"value":1}},{"type":"task","id":"b","action":"value","params":{"value":2}}]}}' | jq -r .id)
wait_id=$(curl -fsS "$url/v1/jobs" -H 'content-type: application/json' \
    -d '{"labels":{"kind":"waiting"},"graph":{"type":"series","id":"s","steps":[{"type":"task","id":"a","action":"value","params":{"value":1}},{"type":"task","id":"gate","action":"await"}]}}' | jq -r .id)
# Kill once the database holds both as they are to be copied: the first job finished, the second's
# await started (its node row is committed with the event that starts it).
stored() {
    [ "$(sql "SELECT state FROM jobs WHERE id = '$done_id'")" = succeeded ] &&
        [ "$(sql "SELECT count(*) FROM nodes WHERE job = (SELECT position FROM jobs WHERE id = '$wait_id') AND node_id = 'gate' AND state = 'running'")" = 1 ]
}
for _ in $(seq 1 500); do stored && break; sleep 0.02; done
stored || { echo "the jobs did not reach the database in 10 s"; cat "$dir/make.log"; exit 1; }
kill -9 "$pid"
wait "$pid" 2>/dev/null || true

copy() { # copy ID COUNT PREFIX
    sql "
CREATE TEMP TABLE source AS SELECT position FROM jobs WHERE id = '$1';
CREATE TEMP TABLE copies AS SELECT i, nextval('jobs_position') AS position FROM generate_series(1, $2) AS i;
INSERT INTO jobs (position, id, state, created_at, started_at, finished_at, cancel_requested, name, labels,
                  error, progress, result, document, nodes)
    SELECT c.position, '$3' || lpad(c.i::text, 7, '0'), state, created_at, started_at, finished_at, cancel_requested,
           name, labels, error, progress, result, document, nodes
    FROM jobs, copies c WHERE id = '$1';
INSERT INTO labels SELECT key, value, c.position FROM labels, copies c WHERE labels.position = (SELECT position FROM source);
INSERT INTO nodes SELECT c.position, node_id, ordinal, type, action, executor, parent, state, attempts, result, error,
                         started_at, finished_at
    FROM nodes, copies c WHERE job = (SELECT position FROM source);
INSERT INTO events SELECT c.position, seq, events FROM events, copies c WHERE job = (SELECT position FROM source);
DROP TABLE source; DROP TABLE copies;"
}
copy "$done_id" "$finished" f
copy "$wait_id" "$((unfinished - 1))" w
sql "ANALYZE jobs, labels, nodes, events" >/dev/null
echo "database: $(sql "SELECT count(*) FROM jobs WHERE state IN ('succeeded','failed','cancelled')") finished, $(sql "SELECT count(*) FROM jobs WHERE state IN ('pending','running')") unfinished, $(sql "SELECT pg_size_pretty(pg_database_size(current_database()))")"

start=$(date +%s%N)
START_SERVER_POLL=0.005 START_SERVER_TIMEOUT=300 start_server "$dir/restart.log" "$bin" serve --database "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL
for _ in $(seq 1 2000); do curl -fsS "$url/readyz" >/dev/null 2>&1 && break; sleep 0.005; done
end=$(date +%s%N)
curl -fsS "$url/readyz" >/dev/null || { echo "/readyz is not 200 after the restart"; cat "$dir/restart.log"; exit 1; }
echo "restart_ready_ms $(((end - start) / 1000000)) ms"
echo "resumed job: $(curl -fsS "$url/v1/jobs/w0000001/tasks/gate" | jq -c '{state, attempts}')"
echo "finished job: $(curl -fsS "$url/v1/jobs/f0000001" | jq -c '{state, result}')"
