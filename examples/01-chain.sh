#!/usr/bin/env bash
# 01 — Chaining tasks without a "pyramid of callbacks".
#
# Bolts: `[[[[findAsync:query] continueWithSuccessBlock:…saveAsync:valedictorian]
#          continueWithSuccessBlock:…findAsync:query] continueWithSuccessBlock:…saveAsync:salutatorian]
#          continueWithSuccessBlock:…"Everything is done!"]`
# Each block gets the previous task's result and returns the next one.
#
# TaskServer: a `series` of `value` tasks. Step i+1 receives step i's result as its
# input and reshapes it with templates (`${input.students[0].name}`,
# `${tasks.find.result.students}`, `${job.name}`); the series' result is the last step's.
#
# Prints every node's state and result (GET /v1/jobs/{id}/tasks) and checks the final result.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

job=$(submit 01-chain.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")) to $TS"

job=$(wait_job "$id")
say "job $id → $(jqr .state "$job")"
print_tasks "$id"
say "final result: $(jqc .result "$job")"

expect_eq "$(jqr .state "$job")" succeeded "job succeeded"
for step in find saveValedictorian findAgain saveSalutatorian "done"; do
  expect_eq "$(jqr .state "$(task_json "$id" "$step")")" succeeded "step $step succeeded"
done
expect_json "$(jqc '.result.students | map(.name)' "$(task_json "$id" findAgain)")" \
  '["Ada","Grace","Linus"]' "findAgain read the first step's result via tasks.find.result.students"
expect_json "$(jqc .result "$job")" '{
  "valedictorian": "Ada",
  "salutatorian": "Grace",
  "message": "Everything is done! Ada and Grace were saved (job chain-valedictorian)."
}' "final result is the last step's result"
expect_eq "$(jqr .progress.succeeded "$job")/$(jqr .progress.total "$job")" 5/5 "progress counts 5 of 5 tasks succeeded"
