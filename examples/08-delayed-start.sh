#!/usr/bin/env bash
# 08 — Delayed starts: a reminder later, and one cancelled before its time.
#
# A job with "delayMs" (or "runAt", RFC 3339) is stored `pending` with its `runAt` and starts
# then — durably, once. Here: a reminder 2 s out, which waits `pending` and then succeeds with
# `startedAt` at or after its `runAt`; and the same reminder seven days out, which sleeps in the
# store (no memory held for it) until it is cancelled: it ends `cancelled` at once, and nothing
# ran (no `job.started`).
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

job=$(submit 08-delayed-start.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")): state $(jqr .state "$job"), runAt $(jqr .runAt "$job")"
expect_eq "$(jqr .state "$job")" pending "a delayed job waits pending"
created=$(jqr "$JQ_MS .createdAt | ms" "$job")
run_at=$(jqr "$JQ_MS .runAt | ms" "$job")
expect_eq "$(( run_at - created ))" 2000 "runAt = createdAt + delayMs"
expect_eq "$(jqr .state "$(get "/v1/jobs/$id")")" pending "still pending a moment later"

job=$(wait_job "$id")
say "job $id → $(jqr .state "$job") at $(jqr .startedAt "$job") (runAt $(jqr .runAt "$job"))"
expect_eq "$(jqr .state "$job")" succeeded "it ran at its time"
expect_eq "$(jqr .result "$job")" "reminded ada@example.com" "with its input"
started=$(jqr "$JQ_MS .startedAt | ms" "$job")
expect_ge "$started" "$run_at" "not before its runAt"

week=$(jq -c '.delayMs = 604800000' 08-delayed-start.json)
later=$(post /v1/jobs "$week")
id=$(jqr .id "$later")
track_job "$id"
say "a reminder in seven days: job $id, runAt $(jqr .runAt "$later")"
listed=$(jqr '[.items[].id]' "$(get "/v1/jobs?state=pending&limit=1000")")
expect_eq "$(jq --arg id "$id" 'index($id) != null' <<<"$listed")" true "listed with state=pending"
call POST "/v1/jobs/$id/cancel"
expect_eq "$STATUS" 202 "cancelling it before its time answers 202"
job=$(wait_job "$id")
expect_eq "$(jqr .state "$job")" cancelled "it ends cancelled at once"
expect_eq "$(jqr '.startedAt // "never"' "$job")" never "it never started"
types=$(jqc '[.items[].type]' "$(get "/v1/jobs/$id/events")")
expect_json "$types" '["job.created", "task.cancelled", "job.cancelled"]' "nothing ran"
