#!/usr/bin/env bash
# 16 — Child jobs: one workflow starts another per item and waits for each.
#
# A definition `invoice-<run>` renders one invoice (a value task standing in for the work). A parent
# job maps over three customers with a `job` node: each item starts a child job of that definition,
# and the parent's result is the children's results in item order. GET /v1/jobs?parent=<id> lists
# the three children, each with parentJobId / parentTaskId. Then a parent whose child waits at an
# approval (an await task) is cancelled: the child is cancelled too.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

run=$(now_ms)
call PUT "/v1/definitions/invoice-$run" \
  '{"graph": {"type": "task", "id": "render", "action": "value", "params": {"value": "invoice for ${input.customer}"}}}'
expect_eq "$STATUS" 201 "PUT the child's definition"
call PUT "/v1/definitions/approval-$run" '{"graph": {"type": "task", "id": "approve", "action": "await"}}'
expect_eq "$STATUS" 201 "PUT a definition that waits for an approval"

parent=$(post '/v1/jobs?waitMs=20000' "{\"input\": {\"customers\": [\"ada\", \"grace\", \"alan\"]},
  \"graph\": {\"type\": \"map\", \"id\": \"each\", \"items\": \"\${input.customers}\",
    \"template\": {\"type\": \"job\", \"id\": \"invoice\", \"definition\": \"invoice-$run\",
                   \"input\": {\"customer\": \"\${input}\"}}}}")
id=$(jqr .id "$parent")
track_job "$id"
expect_eq "$(jqr .state "$parent")" succeeded "the parent succeeded once its children did"
expect_json "$(jqc .result "$parent")" '["invoice for ada","invoice for grace","invoice for alan"]' \
  "its result: the children's, in item order"
children=$(get "/v1/jobs?parent=$id")
expect_eq "$(jqr '.items | length' "$children")" 3 "GET /v1/jobs?parent= lists its 3 children"
expect_eq "$(jqr '[.items[] | select(.parentJobId == "'"$id"'")] | length' "$children")" 3 \
  "each child names its parent (parentJobId)"

waiting=$(post /v1/jobs "{\"graph\": {\"type\": \"job\", \"id\": \"approval\", \"definition\": \"approval-$run\"}}")
wid=$(jqr .id "$waiting")
track_job "$wid"
child=""
for _ in $(seq 100); do
  child=$(jqr '.items[0].id // empty' "$(get "/v1/jobs?parent=$wid")")
  [[ -n $child ]] && break
  sleep 0.1
done
[[ -n $child ]] || die "the approval's child job never appeared"
wait_task_state "$child" approve running >/dev/null
post "/v1/jobs/$wid/cancel" >/dev/null
expect_eq "$(jqr .state "$(wait_job "$wid")")" cancelled "the parent is cancelled"
expect_eq "$(jqr .state "$(wait_job "$child")")" cancelled "and so is the child it waited for"
