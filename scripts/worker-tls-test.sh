#!/usr/bin/env bash
# `taskserver worker` against a server behind TLS, and the key order of a command's JSON output.
#
#   scripts/worker-tls-test.sh [BIN]     # BIN: the taskserver binary (default: $TASKSERVER_BIN,
#                                        # then `swift build --show-bin-path`/taskserver; not built here)
#
# Makes a self-signed certificate for localhost and 127.0.0.1 (openssl), starts the server
# (`--memory --executor images=external`, port of its choosing via scripts/server.sh) and
# scripts/tls-proxy.py, a TLS terminator in front of it, then checks that:
#   1. a worker given https://localhost:PORT without the certificate refuses the server (libcurl
#      verifies it) and takes no task;
#   2. `TASKSERVER_CACERT` naming a file that cannot be read stops the worker at once (exit 64);
#   3. with --cacert, the worker claims, heartbeats (tasks outlast their heartbeatTimeoutMs) and
#      completes every task through https, over a few kept-alive connections;
#   4. a command that prints an object of twelve keys in a fixed, non-alphabetical order gives
#      the task (and the job) that result with its keys in that order, byte for byte.
# Exit status 0 when every check passes. Every process it started is killed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh openssl jq curl python3
bin=${1:-${TASKSERVER_BIN:-}}
[ -n "$bin" ] || bin=$(swift build --show-bin-path)/taskserver
[ -x "$bin" ] || { echo "no server binary at $bin"; exit 2; }

dir=$(mktemp -d)
pids=()
cleanup() {
    local status=$?
    for pid in "${pids[@]+"${pids[@]}"}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    if [ "$status" -ne 0 ]; then
        for f in "$dir"/*.log; do [ -e "$f" ] && { echo "--- $(basename "$f")"; tail -n 40 "$f"; }; done
    fi
    rm -rf "$dir"
    exit "$status"
}
trap cleanup EXIT

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>"$dir/openssl.log"

. scripts/server.sh
start_server "$dir/server.log" "$bin" serve --memory --executor images=external
pids+=("$SERVER_PID")
export TASKSERVER_URL=$SERVER_URL
. examples/lib.sh

python3 scripts/tls-proxy.py "$dir/cert.pem" "$dir/key.pem" "$SERVER_PORT" >"$dir/proxy.port" 2>"$dir/proxy.log" &
pids+=("$!")
for _ in $(seq 100); do [ -s "$dir/proxy.port" ] && break; sleep 0.05; done
[ -s "$dir/proxy.port" ] || { echo "the TLS proxy did not start"; exit 1; }
https_url="https://localhost:$(head -n1 "$dir/proxy.port")"
say "server on $SERVER_URL, TLS in front of it on $https_url"

# The command: reads its task, naps (longer than the heartbeat timeout, so heartbeats must go
# through), prints twelve keys in a fixed order that is not alphabetical.
expected='{"r_zeta":0,"r_alpha":1,"r_mike":2,"r_bravo":3,"r_yankee":4,"r_charlie":5,"r_xray":6,"r_delta":7,"r_whiskey":8,"r_echo":9,"r_victor":10,"r_foxtrot":11}'
cat >"$dir/ordered.sh" <<SCRIPT
#!/bin/sh
cat >/dev/null
sleep 1.5
printf '%s\n' '$expected'
SCRIPT
chmod +x "$dir/ordered.sh"

tasks=3
job=$(post /v1/jobs "$(jq -nc --argjson n "$tasks" '{name: "worker-tls-test",
  graph: {type: "parallel", branches: [range($n) | {type: "task", id: "t\(.)", executor: "images",
          action: "ordered", heartbeatTimeoutMs: 1000}]}}')")
id=$(jqr .id "$job")
track_job "$id"

# 1. No certificate: the worker cannot verify the server, and takes nothing.
"$bin" worker --server "$https_url" --executor images --worker-id no-ca -- "$dir/ordered.sh" >"$dir/worker-no-ca.log" 2>&1 &
no_ca=$!
pids+=("$no_ca")
for _ in $(seq 200); do grep -q "certificate" "$dir/worker-no-ca.log" && break; sleep 0.05; done
grep -q "certificate" "$dir/worker-no-ca.log" || { echo "✘ no certificate error from a worker without --cacert"; exit 1; }
ok "without --cacert the worker refuses the server: $(grep -o 'SSL certificate problem: [a-z -]*' "$dir/worker-no-ca.log" | head -n1)"
kill -TERM "$no_ca"
wait "$no_ca" || { echo "✘ the worker without --cacert did not exit 0 on SIGTERM"; exit 1; }
expect_eq "$(get "/v1/jobs/$id/tasks" | jq -c '[.items[] | select(.type == "task") | .state] | unique')" '["pending"]' \
    "no task was claimed"

# 2. An unreadable CA file named by the environment stops the worker before it starts.
status=0
TASKSERVER_CACERT="$dir/missing.pem" "$bin" worker --server "$https_url" --executor images -- "$dir/ordered.sh" \
    >"$dir/worker-bad-ca.log" 2>&1 || status=$?
expect_eq "$status" 64 "exit status with TASKSERVER_CACERT naming a missing file"
grep -q -- "--cacert: cannot read" "$dir/worker-bad-ca.log" || { echo "✘ no --cacert message"; exit 1; }
ok "TASKSERVER_CACERT is read (a missing file: exit 64)"

# 3. With the certificate, every task runs through https.
before=$(grep -c '^connection' "$dir/proxy.log" || true)
"$bin" worker --server "$https_url" --cacert "$dir/cert.pem" --executor images --concurrency "$tasks" \
    --worker-id with-ca -- "$dir/ordered.sh" >"$dir/worker.log" 2>&1 &
pids+=("$!")
final=$(wait_job "$id")
expect_eq "$(jqr .state "$final")" succeeded "the job's state"
for i in $(seq 0 $((tasks - 1))); do
    node=$(task_json "$id" "t$i")
    expect_eq "$(jqr .workerId "$node")" with-ca "t$i ran on the worker with --cacert"
    expect_eq "$(jqr .attempts "$node")" 1 "t$i took one attempt (its heartbeats went through)"
    # 4. The key order, byte for byte (jq -c keeps the order it reads).
    expect_eq "$(jqc .result "$node")" "$expected" "t$i's result, keys in the command's order"
done
ok "$tasks tasks claimed, heartbeated and completed through $https_url; results keep the command's key order"
connections=$(($(grep -c '^connection' "$dir/proxy.log" || true) - before))
# Claims, a heartbeat batch every ~330 ms per lease held, completions: dozens of requests on the
# claimer's, the heartbeater's and the completer's kept-alive connections.
[ "$connections" -le 4 ] || { echo "✘ $connections TLS connections for one worker: keep-alive does not work"; exit 1; }
ok "the worker used $connections TLS connections (kept alive)"
say "worker TLS test passed"
