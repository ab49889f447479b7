#!/usr/bin/env bash
# Restart time of the durable store: a data file with 100,000 finished jobs and 1,000 unfinished
# ones (each waiting in an `await` task), then the time from starting the server to its first
# `200` on /readyz — every unfinished job resumed by then.
# The file is made by the server itself (one finished job, one waiting job, then SIGKILL) and the
# rows are multiplied with SQL, so it holds exactly what the server writes. The server takes a port
# of its choosing each time (--port 0, read from its log by scripts/server.sh).
# Usage: Benchmarks/restart-bench.sh [finished, default 100000] [unfinished, default 1000]
set -euo pipefail
cd "$(dirname "$0")/.."
finished=${1:-100000}
unfinished=${2:-1000}
command -v sqlite3 >/dev/null || { apt-get update -qq && apt-get install -y -qq sqlite3; }
swift build -c release --product taskserver >/dev/null
bin=$(swift build -c release --show-bin-path)/taskserver
. scripts/server.sh
dir=$(mktemp -d)
db=$dir/taskserver.sqlite
pid=""
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT

start_server "$dir/make.log" "$bin" serve --data "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL
done_id=$(curl -fsS "$url/v1/jobs?waitMs=5000" -H 'content-type: application/json' \
    -d '{"labels":{"kind":"done"},"graph":{"type":"series","id":"s","steps":[{"type":"task","id":"a","action":"value","params":{"value":1}},{"type":"task","id":"b","action":"value","params":{"value":2}}]}}' | jq -r .id)
wait_id=$(curl -fsS "$url/v1/jobs" -H 'content-type: application/json' \
    -d '{"labels":{"kind":"waiting"},"graph":{"type":"series","id":"s","steps":[{"type":"task","id":"a","action":"value","params":{"value":1}},{"type":"task","id":"gate","action":"await"}]}}' | jq -r .id)
# Kill once the file holds both as they are to be copied: the first job finished, the second
# waiting in its await (the event that starts it is committed with the node's state). A bounded
# poll of the file itself (WAL: a reader does not disturb the writer).
on_disk() {
    [ "$(sqlite3 "$db" "SELECT state FROM jobs WHERE id = '$done_id'" 2>/dev/null)" = succeeded ] &&
        [ "$(sqlite3 "$db" "SELECT count(*) FROM events, json_each(events.events) AS e WHERE events.job = (SELECT position FROM jobs WHERE id = '$wait_id') AND e.value ->> 1 = 'task.started' AND e.value ->> 3 = 'gate'" 2>/dev/null)" = 1 ]
}
for _ in $(seq 1 500); do on_disk && break; sleep 0.02; done
on_disk || { echo "the jobs did not reach the file in 10 s"; cat "$dir/make.log"; exit 1; }
kill -9 "$pid"
wait "$pid" 2>/dev/null || true

# Schema 4: a job's rows are keyed by its position; the copies take positions after the originals.
copy() { # copy ID COUNT PREFIX
    sqlite3 "$db" <<SQL
CREATE TEMP TABLE source AS SELECT position FROM jobs WHERE id = '$1';
CREATE TEMP TABLE base AS SELECT max(position) AS top FROM jobs;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
INSERT INTO jobs (position, id, state, created_at, started_at, finished_at, cancel_requested, name, labels,
                  error, progress, result, document, nodes)
    SELECT base.top + i, printf('$3%07d', i), state, created_at, started_at, finished_at, cancel_requested, name,
           labels, error, progress, result, document, nodes
    FROM jobs, n, base WHERE id = '$1';
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
INSERT INTO labels SELECT key, value, base.top + i FROM labels, n, base WHERE position = (SELECT position FROM source);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
INSERT INTO nodes SELECT base.top + i, node_id, ordinal, type, action, executor, parent, state, attempts, result, error,
                         started_at, finished_at
    FROM nodes, n, base WHERE job = (SELECT position FROM source);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2)
INSERT INTO events SELECT base.top + i, seq, events FROM events, n, base WHERE job = (SELECT position FROM source);
SQL
}
copy "$done_id" "$finished" f
copy "$wait_id" "$((unfinished - 1))" w
echo "data file: $(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE state IN ('succeeded','failed','cancelled')") finished, $(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE state IN ('pending','running')") unfinished, $(du -h "$db" | cut -f1)"

start=$(date +%s%N)
# Unfinished jobs are resumed before the server listens; it logs its port once it does (polled
# every 5 ms here, as /readyz was polled before, so the figure keeps its resolution).
START_SERVER_POLL=0.005 START_SERVER_TIMEOUT=300 start_server "$dir/restart.log" "$bin" serve --data "$db" --log-level notice
pid=$SERVER_PID url=$SERVER_URL
for _ in $(seq 1 2000); do curl -fsS "$url/readyz" >/dev/null 2>&1 && break; sleep 0.005; done
end=$(date +%s%N)
curl -fsS "$url/readyz" >/dev/null || { echo "/readyz is not 200 after the restart"; cat "$dir/restart.log"; exit 1; }
echo "restart_ready_ms $(( (end - start) / 1000000 )) ms"
# The resumed jobs wait again; finished ones read back from the file.
echo "resumed job: $(curl -fsS "$url/v1/jobs/w0000001/tasks/gate" | jq -c '{state, attempts}')"
echo "finished job: $(curl -fsS "$url/v1/jobs/f0000001" | jq -c '{state, result}')"
