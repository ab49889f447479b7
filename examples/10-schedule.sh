#!/usr/bin/env bash
# 10 — A cron schedule: every night at 02:00, Paris time.
#
# POST /v1/schedules creates it (201) with its next five fire times in UTC — 01:00Z in winter
# (CET), 00:00Z in summer (CEST). A trigger starts a run now, labelled schedule=nightly-report, so
# GET /v1/jobs?label=schedule:nightly-report lists it. Paused, it has no next runs; resumed, it
# has them again; deleted, it is gone and its job stays. (Fires themselves — each at most once,
# overlap and catch-up — are tested with a clock moved by hand in ScheduleTests.)
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

call DELETE /v1/schedules/nightly-report  # from an earlier run of the example
schedule=$(post /v1/schedules "$(cat 10-schedule.json)")
say "created $(jqr .id "$schedule"): $(jqr .cron "$schedule") in $(jqr .timezone "$schedule"); next runs $(jqc .nextRuns "$schedule")"
expect_eq "$(jqr '.nextRuns | length' "$schedule")" 5 "five next runs"
expect_eq "$(jqr '[.nextRuns[] | test("T0[01]:00:00Z$")] | all' "$schedule")" true "02:00 Paris is 01:00Z or 00:00Z"

job=$(post /v1/schedules/nightly-report/trigger)
id=$(jqr .id "$job")
track_job "$id"
job=$(wait_job "$id")
expect_eq "$(jqr .state "$job")" succeeded "a triggered run succeeds"
expect_eq "$(jqr .labels.schedule "$job")" nightly-report "labelled with its schedule"
listed=$(get "/v1/jobs?label=schedule:nightly-report")
expect_eq "$(jqr '.items[0].id' "$listed")" "$id" "listed by its label"

call PATCH /v1/schedules/nightly-report '{"paused": true}'
expect_eq "$STATUS" 200 "pause answers 200"
expect_eq "$(jqr '.nextRuns | length' "$BODY")" 0 "paused: no next runs"
call PATCH /v1/schedules/nightly-report '{"paused": false}'
expect_eq "$(jqr '.nextRuns | length' "$BODY")" 5 "resumed: next runs again"

call POST /v1/schedules '{"cron": "0 0 30 2 *", "job": {"graph": {"type": "task", "action": "value"}}}'
expect_eq "$STATUS" 422 "a day no chosen month has is refused"
expect_eq "$(jqr '.errors[0].pointer' "$BODY")" /cron "at /cron"

call DELETE /v1/schedules/nightly-report
expect_eq "$STATUS" 204 "delete answers 204"
call GET /v1/schedules/nightly-report
expect_eq "$STATUS" 404 "and it is gone"
expect_eq "$(jqr .state "$(get "/v1/jobs/$id")")" succeeded "its job stays"
