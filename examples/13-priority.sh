#!/usr/bin/env bash
# 13 — Priorities: an urgent job overtakes a backlog.
#
# A job's "priority" (0…9, default 5; SPEC §8) orders the ready tasks of a pool: higher first,
# FIFO within a priority. On the external pool `images` (SPEC §6; skipped, exit 0, on a server
# without one), a backlog of 20 thumbnails at priority 2 is submitted in one request
# (POST /v1/jobs/batch: one status per job, all 201), then one urgent thumbnail at priority 9.
# GET /v1/executors counts the queue by priority; a worker's claim gets the urgent task first,
# although it was queued last; the script completes it through its lease (POST
# /v1/leases/{leaseId}/complete) and cancels the backlog, so the pool ends with nothing queued.
# The lease id is never printed (it is a credential for one attempt).
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

worker="example-13"
n=20

pools=$(get /v1/executors)
if [[ $(jqr '[.items[] | select(.name == "images" and .kind == "external")] | length' "$pools") == 0 ]]; then
  say "skipped: this server has no external pool named images (start it with --executor images=external)"
  exit 0
fi
images=$(jqc '.items[] | select(.name == "images")' "$pools")
[[ $(jqr .queued "$images") == 0 ]] \
  || die "the images pool already has $(jqr .queued "$images") queued tasks: run this against a pool with none (a worker here would claim them)"

# images_queue — the images pool's queuedByPriority.
images_queue() { jqc '.items[] | select(.name == "images") | .queuedByPriority' "$(get /v1/executors)"; }

# wait_queue WANT — read GET /v1/executors until images' queuedByPriority is WANT (≤ 5 s); prints it.
wait_queue() {
  local want deadline q
  want=$(jq -cS . <<<"$1")
  deadline=$(( $(now_ms) + 5000 ))
  while :; do
    q=$(images_queue | jq -cS .)
    if [[ $q == "$want" ]] || (( $(now_ms) >= deadline )); then
      printf '%s\n' "$q"
      return 0
    fi
    sleep 0.05
  done
}

backlog=()
urgent=""
# On the way out (also after a failed check): cancel every job of this example still running, so
# no stray task stays queued on images for the next worker.
cleanup() {
  local id
  for id in "${backlog[@]+"${backlog[@]}"}" $urgent; do
    [[ $(jqr .state "$(_raw GET "/v1/jobs/$id")" 2>/dev/null) == running ]] || continue
    _raw POST "/v1/jobs/$id/cancel" >/dev/null
  done
}
trap cleanup EXIT

# ------------------------------------------------------------------ the backlog, in one request
batch=$(jq -c --argjson n "$n" '. as $job
  | {jobs: [range($n) as $i
      | $job | .name = "thumbnail-backlog" | .priority = 2 | .input.src = "s3://photos/archive/\($i).jpg"]}' \
  13-priority.json)
say "POST /v1/jobs/batch with $n thumbnail jobs at priority 2"
answer=$(post /v1/jobs/batch "$batch")
mapfile -t backlog < <(jqr '.items[].job.id // empty' "$answer")
say "→ statuses $(jqc '[.items[].status] | group_by(.) | map({(.[0] | tostring): length}) | add' "$answer")"
expect_eq "$(jqr '[.items[].status] | unique | tostring' "$answer")" "[201]" "every job of the batch was accepted: 201"
expect_eq "${#backlog[@]}" "$n" "$n jobs, in the order given"
expect_eq "$(jqr '[.items[].job.priority] | unique | tostring' "$answer")" "[2]" "each shows priority 2"

# ------------------------------------------------------------------ the urgent job, last
job=$(submit 13-priority.json)
urgent=$(jqr .id "$job")
track_job "$urgent"
say "submitted the urgent job $urgent ($(jqr .name "$job")): priority $(jqr .priority "$job")"
expect_eq "$(jqr .priority "$job")" 9 "the job shows its priority 9"

queue=$(wait_queue "{\"9\": 1, \"2\": $n}")
say "GET /v1/executors → images queuedByPriority: $queue"
expect_json "$queue" "{\"9\": 1, \"2\": $n}" "images has 1 task queued at priority 9 and $n at priority 2"

# ------------------------------------------------------------------ a worker claims one task
say "POST /v1/executors/images/claim {workerId: $worker, max: 1, waitMs: 0}"
claim=$(post /v1/executors/images/claim "{\"workerId\": \"$worker\", \"max\": 1, \"waitMs\": 0}")
expect_eq "$(jqr '.items | length' "$claim")" 1 "the claim returned one task"
item=$(jqc '.items[0]' "$claim")
lease=$(jqr .leaseId "$item")
say "claimed: $(jqc '{jobId, taskId, action, params}' "$item") (+ a leaseId)"
expect_eq "$(jqr .jobId "$item")" "$urgent" "the urgent job's task came first, ahead of $n older ones"
node=$(task_json "$urgent" thumb)
expect_eq "$(jqr .state "$node")/$(jqr .workerId "$node")" "running/$worker" "its node is running on $worker"
expect_json "$(wait_queue "{\"2\": $n}")" "{\"2\": $n}" "the backlog is still queued at priority 2"

say "POST /v1/leases/{leaseId}/complete {\"result\": {\"url\": …, \"width\": 320}}"
node=$(post "/v1/leases/$lease/complete" '{"result": {"url": "s3://thumbs/launch-banner-320.jpg", "width": 320}}')
expect_eq "$(jqr .state "$node")" succeeded "the lease completion answers the node, succeeded"
job=$(wait_job "$urgent")
say "job $urgent → $(jqr .state "$job"): $(jqc .result "$job")"
expect_eq "$(jqr .state "$job")" succeeded "the urgent job succeeded"

# ------------------------------------------------------------------ clean up the backlog
cancelled=0
for id in "${backlog[@]}"; do
  call POST "/v1/jobs/$id/cancel"
  [[ $STATUS == 202 ]] && cancelled=$(( cancelled + 1 ))
done
expect_eq "$cancelled" "$n" "the $n backlog jobs were cancelled (202 each)"
expect_eq "$(jqr .state "$(get "/v1/jobs/${backlog[0]}")")" cancelled "the oldest ended cancelled, never claimed"
queue=$(wait_queue '{}')
say "GET /v1/executors → images queuedByPriority: $queue, queued $(jqr '.items[] | select(.name == "images") | .queued' "$(get /v1/executors)")"
expect_eq "$queue" "{}" "nothing is left queued on images"
