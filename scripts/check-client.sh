#!/usr/bin/env bash
# End-to-end test of the terminal client (`taskserver submit|get|cancel|redrive|events|definitions|
# schedules`) against a live server on a port of its choosing (--port 0, read from its log:
# scripts/server.sh), with an API key, behind a TLS terminator (scripts/tls-proxy.py, a
# self-signed certificate for localhost): every command goes through https:// with the certificate
# from TASKSERVER_CACERT, as a user of a remote server would. Checked: exit statuses, output,
# --watch on a pipe and on a pseudo-terminal (script(1)), the messages for connection, TLS and
# problem+json errors, --cacert / --api-key / --timeout and their environment variables, plain
# http://. It waits for conditions (output written, a port bound), never for a fixed time.
# usage: check-client.sh [PATH/TO/taskserver]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh openssl jq curl python3
. scripts/server.sh
bin=${1:-$(swift build --show-bin-path)/taskserver}
work=$(mktemp -d)
key=client-test-key-0123456789
server="" holder="" proxy="" silent=""
cleanup() {
    local pid
    for pid in $server $holder $proxy $silent; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
start_server "$work/server.log" "$bin" serve --memory --api-key "$key"
server=$SERVER_PID
plain_url=$SERVER_URL

# TLS in front of the server: a certificate for localhost that only $work/cert.pem vouches for.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>"$work/openssl.log"
python3 scripts/tls-proxy.py "$work/cert.pem" "$work/key.pem" "$SERVER_PORT" >"$work/proxy.port" 2>"$work/proxy.log" &
proxy=$!
export TASKSERVER_URL="" TASKSERVER_API_KEY="$key" TASKSERVER_CACERT="$work/cert.pem"

fail() { echo "FAIL: $*"; echo "-- server log"; cat "$work/server.log"; exit 1; }
# wait_until SECONDS COMMAND… — runs COMMAND until it succeeds (a bounded poll); fails after SECONDS.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.02
    done
}
# lines_at_least FILE N — FILE has N lines or more.
lines_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
wait_until 10 lines_at_least "$work/proxy.port" 1 || fail "the TLS proxy did not start: $(cat "$work/proxy.log")"
export TASKSERVER_URL="https://localhost:$(head -n1 "$work/proxy.port")"
echo "server on $plain_url, TLS in front of it on $TASKSERVER_URL"
# run EXPECTED_STATUS cmd… — runs the client, keeps stdout/stderr in $work/out and $work/err.
run() {
    local expected=$1; shift
    local status=0
    "$bin" "$@" >"$work/out" 2>"$work/err" || status=$?
    [ "$status" -eq "$expected" ] || fail "taskserver $* exited $status, expected $expected; stdout: $(cat "$work/out"); stderr: $(cat "$work/err")"
}

echo '{"graph":{"type":"task","action":"value","params":{"value":42}}}' >"$work/ok.json"
echo '{"graph":{"type":"task","action":"fail","params":{"code":"demo.broken","message":"it broke"}}}' >"$work/fail.json"
echo '{"graph":{"type":"task","id":"slow","action":"delay","params":{"ms":60000}}}' >"$work/slow.json"
cat >"$work/parallel.json" <<'JSON'
{"graph":{"type":"parallel","branches":[
  {"type":"task","id":"a","action":"delay","params":{"ms":300}},
  {"type":"task","id":"b","action":"delay","params":{"ms":600}},
  {"type":"task","id":"c","action":"delay","params":{"ms":900}}]}}
JSON

run 0 submit "$work/ok.json" --wait
[ "$(jq -r .state "$work/out")" = succeeded ] && [ "$(jq -r .result "$work/out")" = 42 ] || fail "submit --wait: $(cat "$work/out")"
echo "✔ submit --wait: succeeded, exit 0"

run 1 submit "$work/fail.json" --wait
[ "$(jq -r .error.code "$work/out")" = demo.broken ] || fail "submit --wait of a failing job: $(cat "$work/out")"
echo "✔ submit --wait of a failing job: exit 1"

run 0 submit - <"$work/slow.json"
id=$(jq -r .id "$work/out")
run 0 get "$id"
[ "$(jq -r .state "$work/out")" = running ] || fail "get: $(cat "$work/out")"
run 0 status "$id" # the old name of get
[ "$(jq -r .id "$work/out")" = "$id" ] || fail "status: $(cat "$work/out")"
echo "✔ submit from stdin, then get (and status, its old name): running"

# events --follow ends by itself when the job ends (here: when it is cancelled).
"$bin" events "$id" --follow >"$work/events" 2>"$work/events.err" &
follower=$!
# Following: it has printed every event the job has so far (so it waits for the next one).
so_far=$(curl -fsS --cacert "$TASKSERVER_CACERT" -H "Authorization: Bearer $key" "$TASKSERVER_URL/v1/jobs/$id/events" | jq '.items | length')
wait_until 10 lines_at_least "$work/events" "$so_far" \
    || fail "events --follow printed $(wc -l <"$work/events") of $so_far events: $(cat "$work/events" "$work/events.err")"
kill -0 "$follower" 2>/dev/null || fail "events --follow ended before the job did: $(cat "$work/events" "$work/events.err")"
run 0 cancel "$id"
[ "$(jq -r .state "$work/out")" = cancelled ] || fail "cancel: $(cat "$work/out")"
follow_status=0
timeout 10 tail --pid="$follower" -f /dev/null || fail "events --follow did not end after the job was cancelled"
wait "$follower" || follow_status=$?
[ "$follow_status" -eq 0 ] || fail "events --follow exited $follow_status"
[ "$(head -1 "$work/events" | jq -r .type)" = job.created ] || fail "events: $(cat "$work/events")"
[ "$(tail -1 "$work/events" | jq -r .type)" = job.cancelled ] || fail "events --follow: $(cat "$work/events")"
echo "✔ events --follow: $(wc -l <"$work/events") events, ended with job.cancelled; cancel exit 0"
run 0 events "$id" --after 1
[ "$(head -1 "$work/out" | jq -r .seq)" = 2 ] || fail "events --after 1: $(cat "$work/out")"
run 0 cancel "$id" # a repeat on a cancelled job is 200
echo "✔ events --after; repeated cancel accepted"

run 0 submit "$work/ok.json"
done_id=$(jq -r .id "$work/out")
"$bin" submit "$work/ok.json" --wait >/dev/null
run 3 cancel "$done_id"
grep -q "409 job.terminal" "$work/err" || fail "cancel of a finished job: $(cat "$work/err")"
echo "✔ cancel of a finished job: exit 3, $(cat "$work/err")"

# redrive: the cancelled slow job runs again (then is cancelled again); a succeeded one cannot.
run 0 redrive "$id"
[ "$(jq -r .state "$work/out")" = running ] || fail "redrive: $(cat "$work/out")"
run 0 cancel "$id"
run 3 redrive "$done_id"
grep -q "409 job.notRedrivable" "$work/err" || fail "redrive of a succeeded job: $(cat "$work/err")"
echo "✔ redrive of a cancelled job: running again, exit 0; of a succeeded one: exit 3, $(cat "$work/err")"

run 0 submit "$work/parallel.json" --watch
lines=$(wc -l <"$work/out")
grep -q $'\r' "$work/out" && fail "--watch on a pipe must print plain lines: $(cat -A "$work/out")"
tail -1 "$work/out" | grep -q "succeeded  3 succeeded  0 running  0 failed  of 3" || fail "--watch last line: $(cat "$work/out")"
[ "$lines" -ge 2 ] && [ "$lines" -le 8 ] || fail "--watch on a pipe printed $lines lines (one per change expected): $(cat "$work/out")"
echo "✔ submit --watch on a pipe: $lines plain lines, last: $(tail -1 "$work/out")"

: >"$work/out" # not the previous command's output
run 2 submit "$work/slow.json" --watch --idempotency-key watch-cancel &
watcher=$!
# Watching: it has printed its first line (the job is submitted and running).
wait_until 10 lines_at_least "$work/out" 1 || fail "submit --watch printed nothing: $(cat "$work/out" "$work/err")"
watched=$(curl -fsS --cacert "$TASKSERVER_CACERT" -H "Authorization: Bearer $key" "$TASKSERVER_URL/v1/jobs?state=running" | jq -r '.items[0].id')
"$bin" cancel "$watched" >/dev/null
wait "$watcher" || fail "submit --watch of a job cancelled meanwhile should exit 2"
echo "✔ submit --watch of a job cancelled meanwhile: exit 2"

# A pseudo-terminal: one line redrawn in place (carriage return + erase line), the clock ticking.
script -qec "$bin submit $work/parallel.json --watch" /dev/null >"$work/tty" || fail "--watch on a terminal: $(cat -A "$work/tty")"
redraws=$(grep -o $'\r\e\\[2K' "$work/tty" | wc -l)
[ "$redraws" -ge 2 ] || fail "--watch on a terminal should redraw one line: $(cat -A "$work/tty")"
grep -q "succeeded  3 succeeded  0 running  0 failed  of 3  [0-9.]*s" "$work/tty" || fail "--watch on a terminal: $(cat -A "$work/tty")"
echo "✔ submit --watch on a terminal: $redraws redraws of one line"

# Errors: readable messages, exit status 3.
run 3 get no-such-job
grep -q "404 job.notFound" "$work/err" || fail "get of a missing job: $(cat "$work/err")"
echo '{"graph":{"type":"task","action":"nope"}}' >"$work/bad.json"
run 3 submit "$work/bad.json"
grep -q "422 graph.invalid" "$work/err" && grep -q "/graph/action" "$work/err" || fail "invalid job: $(cat "$work/err")"
run 3 submit "$work/missing.json"
grep -q "cannot read" "$work/err" || fail "missing file: $(cat "$work/err")"
TASKSERVER_API_KEY= run 3 get "$id"
grep -q "401 auth.required" "$work/err" || fail "no API key: $(cat "$work/err")"
# A port bound but not listening (held by a helper process until the check is done): connections
# to it are refused, and no one else can take it meanwhile.
python3 -c 'import signal, socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1], flush=True); signal.pause()' >"$work/closed" &
holder=$!
wait_until 10 lines_at_least "$work/closed" 1 || fail "the port holder printed no port"
closed=$(cat "$work/closed")
run 3 get "$id" --server "http://127.0.0.1:$closed"
kill "$holder"
wait "$holder" 2>/dev/null || true
holder=""
grep -q "cannot connect to http://127.0.0.1:$closed" "$work/err" || fail "connection refused: $(cat "$work/err")"
run 3 get "$id" --server "https://example.invalid"
run 64 submit "$work/ok.json" --wait --watch
echo "✔ errors: 404, 422 with pointers, unreadable file, 401, connection refused, https, --wait with --watch"

# submit --jsonl: 1,200 jobs in batches of 500 (three requests), one line out per job in order; a
# line that is not JSON and an invalid job are refused in their places (exit 1); the same file
# again names the same jobs through their idempotency keys.
python3 - "$work/jobs.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(1200):
        job = {"idempotencyKey": f"cli-{i}", "graph": {"type": "task", "action": "value", "params": {"value": i}}}
        if i == 7: f.write("{not json\n"); continue
        if i == 600: job["graph"]["action"] = "nope"
        if i == 10: f.write("\n")
        f.write(json.dumps(job) + "\n")
PY
run 1 submit --jsonl "$work/jobs.jsonl"
[ "$(wc -l <"$work/out")" -eq 1200 ] || fail "submit --jsonl printed $(wc -l <"$work/out") lines"
[ "$(jq -s '[.[].line] == ([range(1;11)] + [range(12;1202)])' "$work/out")" = true ] || fail "submit --jsonl lines out of order"
[ "$(jq -s '[.[] | select(.status == 201)] | length' "$work/out")" -eq 1198 ] || fail "submit --jsonl: $(jq -c 'select(.status != 201)' "$work/out")"
[ "$(jq -s -r '[.[] | select(.status != 201) | .status] | join(",")' "$work/out")" = "400,422" ] || fail "submit --jsonl refusals: $(jq -c 'select(.status != 201)' "$work/out")"
grep -q "1198 accepted, 2 refused" "$work/err" || fail "submit --jsonl summary: $(cat "$work/err")"
jq -r 'select(.status == 201) | .id' "$work/out" >"$work/ids"
run 1 submit --jsonl "$work/jobs.jsonl" --batch-size 1000
[ "$(jq -s '[.[] | select(.status == 200)] | length' "$work/out")" -eq 1198 ] || fail "submit --jsonl again: $(head -3 "$work/out")"
cmp -s "$work/ids" <(jq -r 'select(.status == 200) | .id' "$work/out") || fail "submit --jsonl again named other jobs"
run 64 submit --jsonl "$work/jobs.jsonl" --wait
run 64 submit --jsonl "$work/jobs.jsonl" --batch-size 1001
echo "✔ submit --jsonl: 1,198 accepted in order, 2 refused in place (exit 1), the same file again: the same jobs"
# Definitions (issue #45): apply a file (its base name names it), again (unchanged), changed (a new
# version); start it by name with an input; a refused input exits 1 with the server's pointer.
cat >"$work/greet.json" <<'JSON'
{"inputSchema": {"type": "object", "required": ["who"]},
 "graph": {"type": "task", "action": "value", "params": {"value": "hello ${input.who}"}}}
JSON
run 0 definitions apply "$work/greet.json"
[ "$(jq -r .version "$work/out")" = 1 ] && grep -q "greet stored as version 1" "$work/err" || fail "definitions apply: $(cat "$work/out" "$work/err")"
run 0 definitions apply "$work/greet.json"
grep -q "greet unchanged: version 1" "$work/err" || fail "definitions apply again: $(cat "$work/err")"
jq '.graph.params.value = "hi ${input.who}" | .name = "greet"' "$work/greet.json" >"$work/other-file.json"
run 0 definitions apply "$work/other-file.json"
[ "$(jq -r .version "$work/out")" = 2 ] || fail "definitions apply of a change: $(cat "$work/out")"
run 0 submit --definition greet --input '{"who": "ada"}' --wait
[ "$(jq -r .result "$work/out")" = "hi ada" ] && [ "$(jq -r .definition.version "$work/out")" = 2 ] || fail "submit --definition: $(cat "$work/out")"
echo '{"who": "bob"}' >"$work/input.json"
run 0 submit --definition greet --version 1 --input "@$work/input.json" --wait
[ "$(jq -r .result "$work/out")" = "hello bob" ] || fail "submit --definition --version 1: $(cat "$work/out")"
run 3 submit --definition greet --input '{}'
grep -q "/input/who" "$work/err" || fail "submit --definition with a bad input: $(cat "$work/err")"
run 0 definitions list
[ "$(jq -r '[.items[].name] | join(",")' "$work/out")" = greet ] || fail "definitions list: $(cat "$work/out")"
run 0 definitions get greet --version 1
[ "$(jq -r .graph.params.value "$work/out")" = 'hello ${input.who}' ] || fail "definitions get --version 1: $(cat "$work/out")"
run 0 definitions retire greet
run 1 definitions get greet
run 64 submit "$work/ok.json" --definition greet
echo "✔ definitions apply (new, unchanged, changed), submit --definition (latest, pinned, bad input), list, get, retire"
# Bulk redrive (issue #45): every failed job of a label, through the pages of POST /v1/jobs/redrive.
echo '{"labels":{"cli":"bulk"},"graph":{"type":"task","action":"fail","params":{"code":"demo.down","message":"down"}}}' >"$work/down.json"
run 1 submit "$work/down.json" --wait
run 1 submit "$work/down.json" --wait
run 0 redrive --filter state=failed --filter label=cli:bulk
[ "$(jq -s '[.[] | select(.status == 202)] | length' "$work/out")" -eq 2 ] && grep -q "2 redriven, 0 left alone" "$work/err" || fail "redrive --filter: $(cat "$work/out" "$work/err")"
echo '{"labels":{"cli":"busy"},"graph":{"type":"task","action":"delay","params":{"ms":60000}}}' >"$work/busy.json"
run 0 submit "$work/busy.json"
busy=$(jq -r .id "$work/out")
run 1 redrive --filter label=cli:busy
grep -q "0 redriven, 1 left alone" "$work/err" && [ "$(jq -r .problem.code "$work/out")" = job.notRedrivable ] || fail "redrive --filter of a running job: $(cat "$work/out" "$work/err")"
run 0 cancel "$busy"
run 64 redrive some-id --filter state=failed
echo "✔ redrive --filter: every failed job of a label, one line each"
# Schedules: apply a file of two (created), again (unchanged: nothing sent), with one changed
# (updated, the other unchanged); one the server refuses is reported while the rest are applied
# (exit 1); list, pause, resume, trigger --wait; a missing one is a refusal (exit 1).
cat >"$work/schedules.json" <<'JSON'
[{"id": "cli-nightly", "cron": "0 2 * * *", "timezone": "Europe/Paris",
  "job": {"graph": {"type": "task", "action": "value", "params": {"value": "report"}}}},
 {"id": "cli-hourly", "cron": "0 * * * *",
  "job": {"graph": {"type": "task", "action": "value", "params": {"value": "tick"}}}}]
JSON
run 0 schedules apply "$work/schedules.json"
[ "$(jq -r '[.items[].id] | join(",")' "$work/out")" = cli-nightly,cli-hourly ] || fail "schedules apply: $(cat "$work/out")"
grep -q "cli-nightly created" "$work/err" && grep -q "cli-hourly created" "$work/err" || fail "schedules apply: $(cat "$work/err")"
run 0 schedules apply "$work/schedules.json"
[ "$(grep -c unchanged "$work/err")" -eq 2 ] || fail "schedules apply again: $(cat "$work/err")"
jq '.[1].cron = "30 * * * *"' "$work/schedules.json" >"$work/schedules2.json"
run 0 schedules apply "$work/schedules2.json"
grep -q "cli-nightly unchanged" "$work/err" && grep -q "cli-hourly updated" "$work/err" || fail "schedules apply of a change: $(cat "$work/err")"
[ "$(jq -r '.items[1].cron' "$work/out")" = "30 * * * *" ] || fail "schedules apply of a change: $(cat "$work/out")"
jq '. + [{"id": "cli-bad", "cron": "61 * * * *", "job": {"graph": {"type": "task", "action": "value"}}}]' \
    "$work/schedules2.json" >"$work/schedules3.json"
run 1 schedules apply "$work/schedules3.json"
grep -q "cli-bad refused: 422" "$work/err" && grep -q "/cron" "$work/err" || fail "schedules apply with a bad one: $(cat "$work/err")"
run 0 schedules list
[ "$(jq -r '[.items[].id] | sort | join(",")' "$work/out")" = cli-hourly,cli-nightly ] || fail "schedules list: $(cat "$work/out")"
[ "$(jq '.items[0].nextRuns | length' "$work/out")" -gt 0 ] || fail "schedules list without nextRuns: $(cat "$work/out")"
run 0 schedules pause cli-nightly
[ "$(jq -r .paused "$work/out")" = true ] || fail "schedules pause: $(cat "$work/out")"
run 0 schedules resume cli-nightly
[ "$(jq -r .paused "$work/out")" = false ] || fail "schedules resume: $(cat "$work/out")"
run 0 schedules trigger cli-nightly --wait
[ "$(jq -r .result "$work/out")" = report ] && [ "$(jq -r .labels.schedule "$work/out")" = cli-nightly ] || fail "schedules trigger --wait: $(cat "$work/out")"
run 1 schedules trigger no-such-schedule
grep -q "404" "$work/err" || fail "schedules trigger of a missing one: $(cat "$work/err")"
run 64 schedules trigger cli-nightly --wait --watch
echo "✔ schedules apply (created, unchanged, updated, one refused), list, pause, resume, trigger --wait"

# TLS and the connection options. Everything above went through https:// with TASKSERVER_CACERT.
TASKSERVER_CACERT= run 3 get "$id"
grep -q "certificate" "$work/err" || fail "https without the certificate: $(cat "$work/err")"
echo "✔ without the certificate: exit 3, $(grep -o 'SSL certificate problem: [a-z -]*' "$work/err" | head -n1)"
TASKSERVER_CACERT= run 0 get "$id" --cacert "$work/cert.pem"
run 64 get "$id" --cacert "$work/no-such.pem"
TASKSERVER_CACERT="$work/no-such.pem" run 64 get "$id"
TASKSERVER_URL="$plain_url" TASKSERVER_CACERT= run 0 get "$id"
TASKSERVER_API_KEY=wrong-key run 3 get "$id"
grep -q "401" "$work/err" || fail "a wrong key: $(cat "$work/err")"
TASKSERVER_API_KEY=wrong-key run 0 get "$id" --api-key "$key"
echo "✔ --cacert (and a missing file: exit 64), plain http://, --api-key over TASKSERVER_API_KEY"
# A server that accepts connections and never answers: --timeout bounds the wait.
python3 -c 'import signal, socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16); print(s.getsockname()[1], flush=True); signal.pause()' >"$work/silent" &
silent=$!
wait_until 10 lines_at_least "$work/silent" 1 || fail "the silent server printed no port"
started=$SECONDS
run 3 get "$id" --server "http://127.0.0.1:$(cat "$work/silent")" --timeout 1
[ $((SECONDS - started)) -le 5 ] || fail "--timeout 1 took $((SECONDS - started)) s"
grep -q "did not answer within 1" "$work/err" || fail "--timeout: $(cat "$work/err")"
TASKSERVER_TIMEOUT=1 run 3 get "$id" --server "http://127.0.0.1:$(cat "$work/silent")"
run 64 get "$id" --timeout 0
echo "✔ --timeout 1 (and TASKSERVER_TIMEOUT) against a server that never answers: exit 3 within $((SECONDS - started)) s"
[ "$(grep -c '^connection ' "$work/proxy.log")" -gt 0 ] || fail "no connection went through the TLS proxy"
echo "client checks passed ($(grep -c '^connection ' "$work/proxy.log") TLS connections)"
