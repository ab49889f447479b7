#!/usr/bin/env bash
# 06 — Cancellation with a cleanup hook.
#
# Bolts: a `BFCancellationTokenSource` is passed to long work; `[cts cancel]` makes the
# task end cancelled (`task.isCancelled`), and a `continueWithBlock:` chained on it still
# runs — the place to release resources, like `finally`.
#
# TaskServer: a 60 s `delay` (`longWork`) is the antecedent of an `on: always`
# continuation whose `then` (`cleanup`) is the cleanup hook. POST /v1/jobs/{id}/cancel
# (202) stops the delay at once, `cleanup` still runs (its input is the outcome object
# {"state":"cancelled"}), and the job ends `cancelled`. Cancelling again answers 200.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

job=$(submit 06-cancellation.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")): a 60 s delay with a cleanup hook"

node=$(wait_task_state "$id" longWork running)
say "task longWork → $(jqr .state "$node")"

t0=$(now_ms)
say "POST /v1/jobs/$id/cancel"
call POST "/v1/jobs/$id/cancel"
say "→ $STATUS (job state $(jqr .state "$BODY" 2>/dev/null || echo '?'))"
expect_eq "$STATUS" 202 "cancel answers 202"

job=$(wait_job "$id")
took=$(( $(now_ms) - t0 ))
say "job $id → $(jqr .state "$job") ${took} ms after the cancel request"
print_tasks "$id"

expect_eq "$(jqr .state "$job")" cancelled "job cancelled"
expect_eq "$(jqr .state "$(task_json "$id" longWork)")" cancelled "the delay task was cancelled"
cleanup=$(task_json "$id" cleanup)
expect_eq "$(jqr .state "$cleanup")" succeeded "the cleanup hook (on: always) still ran"
expect_json "$(jqc .result "$cleanup")" '{"cleanedUp": "big-file.bin", "antecedent": "cancelled"}' \
  "cleanup saw the outcome object {\"state\":\"cancelled\"}"
expect_lt "$took" 5000 "cancellation took well under the 60 s delay (< 5 s)"

call POST "/v1/jobs/$id/cancel"
say "cancel again → $STATUS"
expect_eq "$STATUS" 200 "a second cancel answers 200"
expect_eq "$(jqr .state "$BODY")" cancelled "and returns the cancelled job"
