#!/usr/bin/env bash
# 09 — Redrive: run a failed job again from where it stopped.
#
# `prepare` succeeds, the `approve` step (an await) is answered with an error and the job fails.
# POST /v1/jobs/{id}/redrive (202) runs it again: `prepare` keeps its result and does not run
# again, `approve` runs again (attempt 2), and this time the job succeeds. Redriving a succeeded
# job answers 409 job.notRedrivable.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

job=$(submit 09-redrive.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job"))"
wait_task_state "$id" approve running >/dev/null
post "/v1/jobs/$id/tasks/approve/complete" '{"error": {"code": "approval.denied", "message": "not yet"}}' >/dev/null
job=$(wait_job "$id")
expect_eq "$(jqr .state "$job")" failed "the job failed at its approval"

call POST "/v1/jobs/$id/redrive"
expect_eq "$STATUS" 202 "redrive answers 202"
expect_eq "$(jqr .state "$BODY")" running "the job runs again"
node=$(wait_task_state "$id" approve running)
expect_eq "$(jqr .attempts "$node")" 2 "approve runs again: attempt 2"
post "/v1/jobs/$id/tasks/approve/complete" '{"result": "yes"}' >/dev/null
job=$(wait_job "$id")
print_tasks "$id"
expect_eq "$(jqr .state "$job")" succeeded "and succeeds"
expect_json "$(jqc .result "$job")" '{"prepared": 42, "approval": "yes"}' "with prepare's stored result"
starts=$(jqr '[.items[] | select(.type == "task.started" and .taskId == "prepare")] | length' "$(get "/v1/jobs/$id/events")")
expect_eq "$starts" 1 "prepare ran once"
call POST "/v1/jobs/$id/redrive"
expect_eq "$STATUS" 409 "a succeeded job is not redrivable"
