# shellcheck shell=bash disable=SC2034  # STATUS, BODY, JQ_MS are used by the examples
# Shared helpers for the TaskServer examples. Source it, do not run it:
#
#   . "$(dirname "$0")/lib.sh"
#
# Environment:
#   TASKSERVER_URL      base URL of the server (default http://127.0.0.1:8080)
#   TASKSERVER_API_KEY  if set, sent as "Authorization: Bearer …" (server started with --api-key)
#
# Every helper that talks to the server prints the response body on stdout and, when the
# server answers an error, prints a readable message on stderr and returns non-zero, so
# `job=$(submit f.json)` under `set -e` stops the example with a clear reason.

TS=${TASKSERVER_URL:-http://127.0.0.1:8080}
TS=${TS%/}
shopt -s inherit_errexit 2>/dev/null || true

command -v jq >/dev/null || { echo "jq is required (apt-get install jq)"; exit 2; }
command -v curl >/dev/null || { echo "curl is required (apt-get install curl)"; exit 2; }

AUTH=()
if [[ -n ${TASKSERVER_API_KEY:-} ]]; then
  AUTH=(-H "Authorization: Bearer ${TASKSERVER_API_KEY}")
fi

# The job the current example is about; assertion failures dump it (set by track_job).
CURRENT_JOB=""

# ------------------------------------------------------------------ output

say()  { printf '%s\n' "$*"; }
ok()   { printf '✔ %s\n' "$*"; }
die()  {
  printf '✘ %s\n' "$*" >&2
  dump_job >&2
  exit 1
}

# dump_job — print the current job, its nodes and its events (for failure messages).
dump_job() {
  [[ -n $CURRENT_JOB ]] || return 0
  printf -- '--- job %s\n' "$CURRENT_JOB"
  _raw GET "/v1/jobs/$CURRENT_JOB" | jq . 2>/dev/null || true
  printf -- '--- tasks\n'
  _raw GET "/v1/jobs/$CURRENT_JOB/tasks" \
    | jq -c '.items[]? | {id, type, state, attempts, result, error}' 2>/dev/null || true
  printf -- '--- events\n'
  _raw GET "/v1/jobs/$CURRENT_JOB/events?after=0" \
    | jq -c '.items[]? | [.seq, .type, .taskId]' 2>/dev/null || true
}

track_job() { CURRENT_JOB=$1; }

# ------------------------------------------------------------------ HTTP

# _raw METHOD PATH — best effort, no error handling (used by dump_job).
_raw() { curl -sS --max-time 10 "${AUTH[@]}" -X "$1" "$TS$2" 2>/dev/null || true; }

# _check WHAT OUTPUT RC — turn a failed `curl --fail-with-body` into a message.
_check() {
  if [[ $3 -ne 0 ]]; then
    printf '✘ %s failed (curl exit %s): %s\n' "$1" "$3" "$2" >&2
    return 1
  fi
  printf '%s\n' "$2"
}

# submit FILE [QUERY] — POST /v1/jobs with the job in FILE; prints the job JSON.
#   submit 01-chain.json            submit 04.json 'waitMs=30000'
submit() {
  local file=$1 query=${2:-} out rc=0
  out=$(curl -sS --fail-with-body --max-time 90 "${AUTH[@]}" \
        -H 'content-type: application/json' --data-binary "@$file" \
        "$TS/v1/jobs${query:+?$query}") || rc=$?
  _check "POST /v1/jobs ($file)" "$out" "$rc"
}

# get PATH — GET $TS$PATH; prints the body.
get() {
  local out rc=0
  out=$(curl -sS --fail-with-body --max-time 90 "${AUTH[@]}" "$TS$1") || rc=$?
  _check "GET $1" "$out" "$rc"
}

# post PATH [BODY] — POST $TS$PATH, with BODY as JSON if given; prints the body.
post() {
  local out rc=0
  if [[ $# -ge 2 ]]; then
    out=$(curl -sS --fail-with-body --max-time 90 "${AUTH[@]}" \
          -H 'content-type: application/json' --data-binary "$2" "$TS$1") || rc=$?
  else
    out=$(curl -sS --fail-with-body --max-time 90 "${AUTH[@]}" \
          -X POST -H 'content-length: 0' "$TS$1") || rc=$?
  fi
  _check "POST $1" "$out" "$rc"
}

# call METHOD PATH [BODY] — any request, any status. Sets the globals STATUS and BODY
# (call it directly, not inside $(…), or the globals are lost). Returns non-zero only
# when no HTTP answer arrived at all.
STATUS=""
BODY=""
call() {
  local method=$1 path=$2 tmp rc=0
  tmp=$(mktemp)
  if [[ $# -ge 3 ]]; then
    STATUS=$(curl -sS --max-time 90 "${AUTH[@]}" -X "$method" -o "$tmp" -w '%{http_code}' \
             -H 'content-type: application/json' --data-binary "$3" "$TS$path") || rc=$?
  else
    STATUS=$(curl -sS --max-time 90 "${AUTH[@]}" -X "$method" -o "$tmp" -w '%{http_code}' \
             -H 'content-length: 0' "$TS$path") || rc=$?
  fi
  BODY=$(cat "$tmp")
  rm -f "$tmp"
  if [[ $rc -ne 0 ]]; then
    printf '✘ %s %s: no answer (curl exit %s)\n' "$method" "$path" "$rc" >&2
    return 1
  fi
}

# ------------------------------------------------------------------ JSON

# jqr FILTER JSON [jq args…] — raw output (strings without quotes).
jqr() { local f=$1 j=$2; shift 2; jq -r "$@" "$f" <<<"$j"; }
# jqc FILTER JSON [jq args…] — compact JSON output.
jqc() { local f=$1 j=$2; shift 2; jq -c "$@" "$f" <<<"$j"; }

# enc ID — percent-encode a task id for a URL path (delete[3] → delete%5B3%5D).
enc() { jq -rn --arg s "$1" '$s | @uri'; }

# jq function: RFC 3339 timestamp ("2025-01-02T03:04:05.678Z") → Unix milliseconds.
JQ_MS='def ms: sub("\\+00:?00$"; "Z")
  | capture("^(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z$")
  | ((.s + "Z") | fromdateiso8601) * 1000 + (((.f // "") + "000")[0:3] | tonumber);'

now_ms() { date +%s%3N; }

# ------------------------------------------------------------------ waiting

is_terminal() { [[ $1 == succeeded || $1 == failed || $1 == cancelled ]]; }

# wait_job ID — long-poll GET /v1/jobs/ID?waitMs=… until the job is terminal (≤ ~60 s);
# prints the final job JSON.
wait_job() {
  local id=$1 deadline job state left
  deadline=$(( $(now_ms) + 60000 ))
  while :; do
    left=$(( deadline - $(now_ms) ))
    (( left > 30000 )) && left=30000
    (( left < 0 )) && left=0
    job=$(get "/v1/jobs/$id?waitMs=$left") || return 1
    state=$(jqr .state "$job")
    if is_terminal "$state"; then
      printf '%s\n' "$job"
      return 0
    fi
    if (( $(now_ms) >= deadline )); then
      printf '✘ job %s still %s after 60 s\n' "$id" "$state" >&2
      return 1
    fi
  done
}

# wait_task_state JOB TASK STATE [TIMEOUT_MS] — wait until GET /v1/jobs/JOB/tasks/TASK has state
# STATE (default timeout 15 s); prints the node JSON. No polling interval: between two reads of
# the node it long-polls the job's events (every change of a node's state is an event), so it
# wakes as soon as something happened.
wait_task_state() {
  local job=$1 task=$2 want=$3 timeout=${4:-15000} deadline node state after=0 page left
  deadline=$(( $(now_ms) + timeout ))
  while :; do
    node=$(get "/v1/jobs/$job/tasks/$(enc "$task")") || return 1
    state=$(jqr .state "$node")
    if [[ $state == "$want" ]]; then
      printf '%s\n' "$node"
      return 0
    fi
    if [[ $state != pending && $state != running ]]; then
      printf '✘ task %s ended %s while waiting for %s: %s\n' "$task" "$state" "$want" "$node" >&2
      return 1
    fi
    left=$(( deadline - $(now_ms) ))
    if (( left <= 0 )); then
      printf '✘ task %s still %s after %s ms (wanted %s)\n' "$task" "$state" "$timeout" "$want" >&2
      return 1
    fi
    (( left > 30000 )) && left=30000
    # The first pass (after=0) returns at once with every event so far; later ones wait for the
    # next event, which a change of the node made after the read above would have produced.
    page=$(get "/v1/jobs/$job/events?after=$after&waitMs=$left") || return 1
    after=$(jqr "[.items[].seq] | max // $after" "$page")
  done
}

# all_events JOB — every event of the job as one JSON array (follows `after` until empty).
all_events() {
  local job=$1 after=0 page n all='[]' i
  for (( i = 0; i < 1000; i++ )); do
    page=$(get "/v1/jobs/$job/events?after=$after") || return 1
    n=$(jqr '.items | length' "$page")
    (( n == 0 )) && break
    all=$(jq -c --argjson p "$page" '. + $p.items' <<<"$all")
    after=$(jqr '.items[-1].seq' "$page")
  done
  printf '%s\n' "$all"
}

# print_tasks JOB — one line per node: "task <id> (<type>) → <state>: <result or error>".
print_tasks() {
  local tasks
  tasks=$(get "/v1/jobs/$1/tasks") || return 1
  jq -r '.items[]
    | "  task \(.id) (\(.type)\(if .action then " " + .action else "" end)) → \(.state)"
      + (if .state == "succeeded" then ": " + (.result | tojson)
         elif .state == "failed" then ": " + (.error | tojson)
         else "" end)' <<<"$tasks"
}

# task_json JOB TASK — GET one node.
task_json() { get "/v1/jobs/$1/tasks/$(enc "$2")"; }

# ------------------------------------------------------------------ assertions

# expect_eq ACTUAL EXPECTED MESSAGE — string equality.
expect_eq() {
  if [[ $1 == "$2" ]]; then
    ok "$3"
  else
    printf '✘ %s\n    expected: %s\n    actual:   %s\n' "$3" "$2" "$1" >&2
    dump_job >&2
    exit 1
  fi
}

# expect_json ACTUAL EXPECTED MESSAGE — JSON equality (key order and spacing ignored).
expect_json() {
  local a e
  a=$(jq -cS . <<<"$1" 2>/dev/null) || a="(not JSON) $1"
  e=$(jq -cS . <<<"$2")
  expect_eq "$a" "$e" "$3"
}

# expect_lt ACTUAL LIMIT MESSAGE / expect_ge ACTUAL MIN MESSAGE — integer comparisons.
expect_lt() {
  if [[ $1 =~ ^-?[0-9]+$ ]] && (( $1 < $2 )); then ok "$3"
  else printf '✘ %s\n    expected: < %s\n    actual:   %s\n' "$3" "$2" "$1" >&2; dump_job >&2; exit 1; fi
}
expect_ge() {
  if [[ $1 =~ ^-?[0-9]+$ ]] && (( $1 >= $2 )); then ok "$3"
  else printf '✘ %s\n    expected: >= %s\n    actual:   %s\n' "$3" "$2" "$1" >&2; dump_job >&2; exit 1; fi
}
