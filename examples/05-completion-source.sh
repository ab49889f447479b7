#!/usr/bin/env bash
# 05 — A completion source completed over HTTP.
#
# Bolts: `BFTaskCompletionSource` (Bolts-Swift `TaskCompletionSource`) is a task whose
# outcome someone else sets later — `source.result = …` / `trySetResult:` — and code
# chained on `source.task` runs then. The first completion wins; a second `setResult`
# is an error (and `trySetResult` returns NO).
#
# TaskServer: an `await` task (`approval`) waits until a client calls
# POST /v1/jobs/{id}/tasks/approval/complete with {"result": …}; the next step of the
# series (`publish`) receives that result as its input (`${input.approvedBy}`).
# Completing it a second time answers 409 with code `task.terminal`.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

job=$(submit 05-completion-source.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")); it now waits for an approval"

node=$(wait_task_state "$id" approval running)
say "task approval → $(jqr .state "$node") (action $(jqr .action "$node"))"
expect_eq "$(jqr .state "$(get "/v1/jobs/$id")")" running "job is running while approval waits"
expect_eq "$(jqr .state "$(task_json "$id" publish)")" pending "publish is pending until the approval arrives"

say "POST /v1/jobs/$id/tasks/approval/complete {\"result\":{\"approvedBy\":\"ada\"}}"
call POST "/v1/jobs/$id/tasks/approval/complete" '{"result": {"approvedBy": "ada"}}'
say "→ $STATUS $(jqc . "$BODY" 2>/dev/null || printf '%s' "$BODY")"
expect_eq "$STATUS" 200 "complete answers 200"
expect_eq "$(jqr .state "$BODY")" succeeded "approval succeeded with the posted result"

job=$(wait_job "$id")
say "job $id → $(jqr .state "$job")"
print_tasks "$id"
say "final result: $(jqc .result "$job")"

expect_eq "$(jqr .state "$job")" succeeded "job succeeded"
expect_json "$(jqc .result "$(task_json "$id" approval)")" '{"approvedBy": "ada"}' \
  "approval's result is the completion body's result"
expect_json "$(jqc .result "$job")" \
  '{"published": "v1.4.0", "approvedBy": "ada", "note": "v1.4.0 approved by ada"}' \
  "publish used \${input.approvedBy}"

say "completing it again (first completion wins):"
call POST "/v1/jobs/$id/tasks/approval/complete" '{"result": {"approvedBy": "mallory"}}'
say "→ $STATUS $(jqc . "$BODY" 2>/dev/null || printf '%s' "$BODY")"
expect_eq "$STATUS" 409 "a second completion answers 409"
expect_eq "$(jqr .code "$BODY")" task.terminal "with code task.terminal"
expect_json "$(jqc .result "$(task_json "$id" approval)")" '{"approvedBy": "ada"}' \
  "the first result was kept"
