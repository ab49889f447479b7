#!/usr/bin/env bash
# 02 — Error handling: a failure skips the success path and is recovered.
#
# Bolts: an error returned by a task is passed down the chain — every
# `continueWithSuccessBlock:` after it is skipped — until a `continueWithBlock:`
# (or Bolts-Swift `continueOnErrorWith`) looks at `task.error` and returns a value
# instead, which *recovers* the chain:
#
#   [[[self findAsync:q] continueWithSuccessBlock:^(t){ return [self saveAsync:…]; }]
#                        continueWithBlock:^(t){ if (t.error) return @[]; … }];
#
# TaskServer: `fetch` (action `fail`, code `comments.notFound`) is the antecedent of an
# `on: success` continuation whose `then` (`save`) therefore ends `skipped`; the outer
# `on: failure` continuation receives the outcome object {"state":"failed","error":{…}}
# and `fallback` turns it into a value with `${input.error.code}`. The job succeeds.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

job=$(submit 02-error-handling.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")) to $TS"

job=$(wait_job "$id")
say "job $id → $(jqr .state "$job")"
print_tasks "$id"
say "final result: $(jqc .result "$job")"

fetch=$(task_json "$id" fetch)
expect_eq "$(jqr .state "$job")" succeeded "job succeeded (the failure was recovered)"
expect_eq "$(jqr .state "$fetch")" failed "fetch failed"
expect_eq "$(jqr .error.code "$fetch")" comments.notFound "fetch error code is comments.notFound"
expect_eq "$(jqr .error.message "$fetch")" "post 123 has no comments" "fetch error message was templated"
expect_json "$(jqc .error.details "$fetch")" '{"post": 123}' "fetch error details keep the JSON type of \${input.post}"
expect_eq "$(jqr .state "$(task_json "$id" save)")" skipped "save (on: success) was skipped"
expect_eq "$(jqr .state "$(task_json "$id" fetchThenSave)")" failed "fetchThenSave ended with its antecedent's failure"
expect_eq "$(jqr .state "$(task_json "$id" fallback)")" succeeded "fallback (on: failure) ran"
expect_eq "$(jqr .state "$(task_json "$id" recover)")" succeeded "recover ended with the handler's success"
expect_json "$(jqc .result "$job")" \
  '{"recovered": true, "reason": "comments.notFound", "failedState": "failed", "comments": []}' \
  "recovered result built from \${input.error.code}"

events=$(all_events "$id")
expect_eq "$(jqr '[.[] | select(.type == "task.skipped" and .taskId == "save")] | length' "$events")" 1 \
  "one task.skipped event for save"
