#!/usr/bin/env bash
# 15 — Bulk redrive: after a downstream outage, run every job it failed again with one filter.
#
# Twelve jobs (label `outage` = a name of this run) each wait at a `ledger` step (an await task,
# standing in for a call to a downstream service), then publish. The "ledger" is down: each step is
# completed with an error and every job fails. POST /v1/jobs/redrive?state=failed&label=… with
# limit=5 redrives them a page at a time, following nextCursor (5 + 5 + 2), each item 202; the same
# call again finds nothing failed. The ledger is back: each step succeeds and every job succeeds,
# its first step not run again.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

run="outage-$(now_ms)"
job="{\"labels\": {\"outage\": \"$run\"}, \"graph\": {\"type\": \"series\", \"steps\": [
  {\"type\": \"task\", \"id\": \"prepare\", \"action\": \"value\", \"params\": {\"value\": 1}},
  {\"type\": \"task\", \"id\": \"ledger\", \"action\": \"await\"},
  {\"type\": \"task\", \"id\": \"publish\", \"action\": \"value\", \"params\": {\"value\": \"booked\"}}]}}"
ids=()
for _ in $(seq 12); do ids+=("$(jqr .id "$(post /v1/jobs "$job")")"); done
for id in "${ids[@]}"; do
  wait_task_state "$id" ledger running >/dev/null
  post "/v1/jobs/$id/tasks/ledger/complete" '{"error": {"code": "ledger.unavailable", "message": "503"}}' >/dev/null
done
for id in "${ids[@]}"; do [[ $(jqr .state "$(wait_job "$id")") == failed ]] || die "job $id did not fail"; done
ok "the outage failed all 12 jobs"

cursor="" pages=() redriven=0
while :; do
  call POST "/v1/jobs/redrive?state=failed&label=outage:$run&limit=5${cursor:+&cursor=$cursor}"
  expect_eq "$STATUS" 200 "POST /v1/jobs/redrive answers 200"
  pages+=("$(jqr '.items | length' "$BODY")")
  redriven=$(( redriven + $(jqr '[.items[] | select(.status == 202)] | length' "$BODY") ))
  cursor=$(jqr '.nextCursor // empty' "$BODY")
  [[ -n $cursor ]] || break
done
expect_eq "${pages[*]}" "5 5 2" "three pages of at most 5, following nextCursor"
expect_eq "$redriven" 12 "every failed job was redriven (202 each)"
call POST "/v1/jobs/redrive?state=failed&label=outage:$run"
expect_eq "$(jqr '.items | length' "$BODY")" 0 "the same call again finds nothing failed"

for id in "${ids[@]}"; do
  wait_task_state "$id" ledger running >/dev/null
  post "/v1/jobs/$id/tasks/ledger/complete" '{"result": "ok"}' >/dev/null
done
succeeded=0
for id in "${ids[@]}"; do [[ $(jqr .state "$(wait_job "$id")") == succeeded ]] && succeeded=$(( succeeded + 1 )); done
expect_eq "$succeeded" 12 "the ledger is back: all 12 succeed"
prepared=$(jqr .attempts "$(task_json "${ids[0]}" prepare)")
expect_eq "$prepared" 1 "what had succeeded did not run again"
