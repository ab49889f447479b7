#!/usr/bin/env bash
# Worker walk-through — the external worker protocol (SPEC §6) by hand, with curl and jq.
#
# Needs a server with an external pool named `images`:
#   taskserver serve --memory --executor images=external
#   examples/worker-walkthrough.sh [URL]      # URL defaults to $TASKSERVER_URL, then :8080
#
# The job is a series: `thumb`, a task on the external pool (action `resize`, run by "us", the
# worker), then `publish`, a built-in `value` step that reshapes thumb's result. The script plays
# the worker: it claims the task (long-poll), heartbeats with progress, shows the node's `progress`
# and `workerId`, completes it with a result, and waits for the job to succeed with the expected
# result. Then the error answers: a second complete (409 lease.gone), a made-up lease (404
# lease.notFound), a claim for 101 tasks (422), an unknown pool (404 executor.notFound) and an
# in-process pool (409 executor.notExternal). Not in run-all.sh: it needs the `images` pool, and
# a pool with no other queued `resize` task (a fresh server), since it claims the oldest one.
# The lease id is kept in a shell variable and never printed (it is a credential for one attempt).
# shellcheck disable=SC2016  # jq programs and ${…} job templates are single-quoted on purpose
set -euo pipefail
cd "$(dirname "$0")"
export TASKSERVER_URL=${1:-${TASKSERVER_URL:-http://127.0.0.1:8080}}
. ./lib.sh

worker="walkthrough-$$"

# ------------------------------------------------------------------ the job
job=$(post /v1/jobs '{
  "name": "thumbnail",
  "input": {"src": "s3://photos/cat.jpg", "w": 320},
  "labels": {"example": "worker-walkthrough"},
  "graph": {
    "type": "series",
    "id": "pipeline",
    "steps": [
      {"type": "task", "id": "thumb", "executor": "images", "action": "resize",
       "params": {"src": "${input.src}", "width": "${input.w}"},
       "heartbeatTimeoutMs": 30000, "timeoutMs": 60000},
      {"type": "task", "id": "publish", "action": "value",
       "params": {"value": {"published": "${input.url}", "width": "${input.width}", "by": "${tasks.thumb.result.by}"}}}
    ]
  }
}')
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id: thumb (images/resize, a worker task) → publish (value)"
node=$(task_json "$id" thumb)
expect_eq "$(jqr .state "$node")" pending "thumb is pending: queued in the images pool until a worker claims it"
pools=$(get /v1/executors)
say "GET /v1/executors → images: $(jqc '.items[] | select(.name == "images")' "$pools")"
expect_eq "$(jqr '.items[] | select(.name == "images") | .kind' "$pools")" external "images is an external pool"

# ------------------------------------------------------------------ claim
say "POST /v1/executors/images/claim (workerId $worker, actions [resize], max 1, waitMs 5000)"
claim=$(post /v1/executors/images/claim "{\"workerId\": \"$worker\", \"actions\": [\"resize\"], \"max\": 1, \"waitMs\": 5000}")
expect_eq "$(jqr '.items | length' "$claim")" 1 "the claim returned one task"
item=$(jqc '.items[0]' "$claim")
[[ $(jqr .jobId "$item") == "$id" ]] || die "the claim returned a task of another job ($(jqr .jobId "$item")): run this against a fresh server"
lease=$(jqr .leaseId "$item")
say "claimed: $(jqc 'del(.leaseId)' "$item") (+ a leaseId)"
expect_eq "$(jqr .taskId "$item")/$(jqr .action "$item")/$(jqr .attempt "$item")" thumb/resize/1 "task thumb, action resize, attempt 1"
expect_json "$(jqc .params "$item")" '{"src": "s3://photos/cat.jpg", "width": 320}' "params were templated from the job's input"
expect_eq "$(jqr .heartbeatTimeoutMs "$item")" 30000 "the claim item carries heartbeatTimeoutMs"
[[ $(jqr '.deadline // ""' "$item") != "" ]] || die "the claim item has no deadline (the task has timeoutMs)"
ok "the claim item carries a deadline ($(jqr .deadline "$item")): timeoutMs counts from the claim"
[[ $lease =~ ^lease_[0-9a-f]{32}$ ]] || die "the lease id does not look like lease_<32 hex>"
ok "the lease id looks like lease_<32 hex>"

# ------------------------------------------------------------------ heartbeat with progress
say "POST /v1/leases/heartbeat {items: [{leaseId, progress: {percent: 40, stage: decode}}]}"
beat=$(post /v1/leases/heartbeat "$(jq -nc --arg l "$lease" '{items: [{leaseId: $l, progress: {percent: 40, stage: "decode"}}]}')")
expect_json "$(jqc '.items | map(del(.leaseId))' "$beat")" '[{"status": 200, "cancelRequested": false}]' "heartbeat: 200, cancelRequested false"
node=$(task_json "$id" thumb)
say "GET /v1/jobs/$id/tasks/thumb → $(jqc '{state, attempts, workerId, progress}' "$node")"
expect_eq "$(jqr .state "$node")" running "thumb is running since the claim"
expect_eq "$(jqr .workerId "$node")" "$worker" "the node shows the workerId that claimed it"
expect_json "$(jqc .progress "$node")" '{"percent": 40, "stage": "decode"}' "the node shows the last heartbeat's progress"
[[ $node != *"$lease"* ]] || die "the node shows the lease id"
ok "the node never shows the lease id"

# ------------------------------------------------------------------ complete
say "POST /v1/leases/complete {items: [{leaseId, result: {url, width, by}}], claimNext: {max: 1, waitMs: 0}}"
done_=$(post /v1/leases/complete "$(jq -nc --arg l "$lease" --arg w "$worker" \
  '{items: [{leaseId: $l, result: {url: "https://cdn.example/cat-320.jpg", width: 320, by: $w}}],
    claimNext: {max: 1, waitMs: 0, actions: ["resize"]}}')")
expect_json "$(jqc '.items | map(del(.leaseId))' "$done_")" '[{"status": 200}]' "complete: item status 200"
expect_eq "$(jqr '.claimed | type' "$done_")" array "claimNext answered with the next work (claimed: $(jqr '.claimed | length' "$done_") tasks)"

job=$(wait_job "$id")   # GET /v1/jobs/{id}?waitMs=… until terminal
say "job $id → $(jqr .state "$job")"
print_tasks "$id"
expect_eq "$(jqr .state "$job")" succeeded "the job succeeded"
expect_json "$(jqc .result "$job")" "{\"published\": \"https://cdn.example/cat-320.jpg\", \"width\": 320, \"by\": \"$worker\"}" \
  "the job's result is publish's, made from the worker's result"
node=$(task_json "$id" thumb)
expect_eq "$(jqr .state "$node")/$(jqr .attempts "$node")/$(jqr .workerId "$node")" "succeeded/1/$worker" "thumb succeeded in 1 attempt by $worker"
events=$(all_events "$id")
expect_json "$(jqc '[.[] | select(.type == "task.started" and .taskId == "thumb") | .data.workerId]' "$events")" \
  "[\"$worker\"]" "one task.started event for thumb, at the claim, with the workerId"

# ------------------------------------------------------------------ the error answers
say "second complete of the same lease (batch form)"
again=$(post /v1/leases/complete "$(jq -nc --arg l "$lease" '{items: [{leaseId: $l, result: "late"}]}')")
expect_json "$(jqc '.items | map(del(.leaseId))' "$again")" '[{"status": 409, "code": "lease.gone"}]' \
  "a second complete: item status 409 lease.gone"
say "second complete of the same lease (URL form)"
call POST "/v1/leases/$lease/complete" '{"result": "late"}'
expect_eq "$STATUS $(jqr .code "$BODY")" "409 lease.gone" "POST /v1/leases/{id}/complete again: 409 lease.gone"
expect_json "$(jqc .result "$(get "/v1/jobs/$id")")" "$(jqc .result "$job")" "and nothing changed: the result is the first one"

made_up=lease_00000000000000000000000000000000
call POST "/v1/leases/$made_up/heartbeat" '{}'
expect_eq "$STATUS $(jqr .code "$BODY")" "404 lease.notFound" "heartbeat of a made-up lease: 404 lease.notFound"
call POST "/v1/leases/$made_up/complete" '{"result": 1}'
expect_eq "$STATUS $(jqr .code "$BODY")" "404 lease.notFound" "complete of a made-up lease: 404 lease.notFound"
beat=$(post /v1/leases/heartbeat "{\"items\": [{\"leaseId\": \"$made_up\"}]}")
expect_json "$(jqc '.items | map(del(.leaseId))' "$beat")" '[{"status": 404, "code": "lease.notFound"}]' \
  "batch heartbeat of a made-up lease: item status 404 lease.notFound"

call POST /v1/executors/images/claim "{\"workerId\": \"$worker\", \"max\": 101}"
expect_eq "$STATUS $(jqr .code "$BODY")" "422 request.invalid" "claim with max 101: 422 request.invalid"
expect_eq "$(jqr '[.errors[].pointer] | join(",")' "$BODY")" /max "… with the pointer /max"
call POST /v1/executors/no-such-pool/claim "{\"workerId\": \"$worker\"}"
expect_eq "$STATUS $(jqr .code "$BODY")" "404 executor.notFound" "claim on an unknown executor: 404 executor.notFound"
call POST /v1/executors/default/claim "{\"workerId\": \"$worker\"}"
expect_eq "$STATUS $(jqr .code "$BODY")" "409 executor.notExternal" "claim on the in-process pool default: 409 executor.notExternal"

workers=$(get /v1/executors/images/workers)
say "GET /v1/executors/images/workers → $(jqc '[.items[] | select(.workerId == $w)]' "$workers" --arg w "$worker")"
expect_eq "$(jqr '[.items[] | select(.workerId == $w)] | length' "$workers" --arg w "$worker")" 1 "the pool lists this worker"
