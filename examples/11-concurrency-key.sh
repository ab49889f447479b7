#!/usr/bin/env bash
# 11 — A concurrency key: never more than one import per customer at once.
#
# The `import` task carries "concurrency": {"key": "customer-${input.customer}", "max": 1}
# (SPEC §8): at most one attempt per evaluated key runs at once, across the whole server; the
# others wait — by priority, then in arrival order — holding no pool slot, and their node shows
# "waitingFor": "concurrency". Here `import` is an `await` task, a stand-in for a long import that
# the script finishes by hand (POST …/tasks/import/complete). Two imports for acme and one for
# globex: globex's runs at once (another key), acme's second waits for the first to finish.
# The customer names carry a per-run suffix, so a rerun against the same server uses fresh keys.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

run="$$-$(now_ms)"
acme="acme-$run"
globex="globex-$run"
ids=()

# On the way out (also after a failed check): cancel whatever is still waiting.
cleanup() {
  local id
  for id in "${ids[@]+"${ids[@]}"}"; do
    [[ $(jqr .state "$(_raw GET "/v1/jobs/$id")" 2>/dev/null) == running ]] || continue
    _raw POST "/v1/jobs/$id/cancel" >/dev/null
  done
}
trap cleanup EXIT

# submit_import CUSTOMER FILE — submit 11-concurrency-key.json for that customer and file; prints the id.
submit_import() {
  local job
  job=$(post /v1/jobs "$(jq -c --arg c "$1" --arg f "$2" '.input = {customer: $c, file: $f}' 11-concurrency-key.json)")
  jqr .id "$job"
}

# wait_waiting_for JOB TASK WANT — read the node until its `waitingFor` is WANT ("" = none), at
# most 10 s; prints the node. Leaving a wait records no event, so this one polls (every 50 ms).
wait_waiting_for() {
  local job=$1 task=$2 want=$3 deadline node
  deadline=$(( $(now_ms) + 10000 ))
  while :; do
    node=$(task_json "$job" "$task") || return 1
    if [[ $(jqr '.waitingFor // ""' "$node") == "$want" ]]; then
      printf '%s\n' "$node"
      return 0
    fi
    if (( $(now_ms) >= deadline )); then
      printf '✘ task %s of job %s: waitingFor is %s after 10 s (wanted %s)\n' \
        "$task" "$job" "$(jqr '.waitingFor // "none"' "$node")" "${want:-none}" >&2
      return 1
    fi
    sleep 0.05
  done
}

# node_line JOB TASK — "state running, waitingFor concurrency" for a node.
node_line() {
  jqr '"state \(.state)" + (if .waitingFor then ", waitingFor \(.waitingFor)" else "" end)' "$(task_json "$1" "$2")"
}

a1=$(submit_import "$acme" orders-1.csv); ids+=("$a1")
track_job "$a1"
node=$(wait_task_state "$a1" import running)
say "acme import #1: job $a1 → task import $(node_line "$a1" import)"
expect_eq "$(jqr '.waitingFor // "none"' "$node")" none "acme's first import runs at once (key customer-$acme is free)"

a2=$(submit_import "$acme" orders-2.csv); ids+=("$a2")
g1=$(submit_import "$globex" orders-1.csv); ids+=("$g1")
say "acme import #2: job $a2; globex import: job $g1"

track_job "$a2"
node=$(wait_waiting_for "$a2" import concurrency)
say "acme import #2 → task import $(node_line "$a2" import)"
expect_eq "$(jqr .waitingFor "$node")" concurrency "acme's second import waits for its key (waitingFor: concurrency)"
track_job "$g1"
node=$(wait_task_state "$g1" import running)
say "globex import → task import $(node_line "$g1" import)"
expect_eq "$(jqr '.waitingFor // "none"' "$node")" none "globex's import runs at once: another key"

say "completing the waiting acme import #2 before its turn:"
call POST "/v1/jobs/$a2/tasks/import/complete" '{"result": {"rows": 0}}'
say "→ $STATUS $(jqr '.code // empty' "$BODY" 2>/dev/null || true)"
expect_eq "$STATUS" 409 "it has not started: 409"
expect_eq "$(jqr .code "$BODY")" task.notRunning "with code task.notRunning"

track_job "$a1"
say "POST /v1/jobs/$a1/tasks/import/complete {\"result\":{\"rows\":1200}} (acme import #1 is done)"
node=$(post "/v1/jobs/$a1/tasks/import/complete" '{"result": {"rows": 1200}}')
expect_eq "$(jqr .state "$node")" succeeded "acme import #1 succeeded"
job=$(wait_job "$a1")
expect_json "$(jqc .result "$job")" "$(jq -nc --arg c "$acme" '{customer: $c, file: "orders-1.csv", rows: 1200}')" \
  "acme import #1's job succeeded with its report"

track_job "$a2"
node=$(wait_waiting_for "$a2" import "")
say "acme import #2 → task import $(node_line "$a2" import)"
expect_eq "$(jqr .state "$node")/$(jqr '.waitingFor // "none"' "$node")" running/none \
  "acme import #2 runs now that #1 released the key"
call POST "/v1/jobs/$a2/tasks/import/complete" '{"result": {"rows": 800}}'
expect_eq "$STATUS" 200 "acme import #2 can be completed now: 200"
call POST "/v1/jobs/$g1/tasks/import/complete" '{"result": {"rows": 300}}'
expect_eq "$STATUS" 200 "globex's import completed: 200"

for id in "$a1" "$a2" "$g1"; do
  track_job "$id"
  job=$(wait_job "$id")
  say "job $id → $(jqr .state "$job"): $(jqc .result "$job")"
  expect_eq "$(jqr .state "$job")" succeeded "job $(jqr .input.customer "$job") $(jqr .input.file "$job") succeeded"
done

