#!/usr/bin/env bash
# 14 — Definitions: name a workflow once, start it by name, change it while a run is in flight.
#
# PUT /v1/definitions/{name} stores 14-definitions.json as version 1 (a graph, an input schema and
# defaults). A job started by name takes the latest version; then the definition changes (version
# 2) while that job waits at its approval. The running job keeps version 1 — its document holds the
# graph it started with — and a new start runs version 2. An input that breaks the schema is a 422
# with a pointer per problem; the jobs of a definition are listed with ?definition=.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

name="report-$(now_ms)"
call PUT "/v1/definitions/$name" "$(cat 14-definitions.json)"
expect_eq "$STATUS" 201 "PUT stores version 1"
expect_eq "$(jqr .version "$BODY")" 1 "version 1"
call PUT "/v1/definitions/$name" "$(cat 14-definitions.json)"
expect_eq "$STATUS:$(jqr .version "$BODY")" 200:1 "the same body again makes no version"

job=$(post /v1/jobs "{\"definition\": \"$name\", \"input\": {\"day\": \"2026-12-02\"}}")
id=$(jqr .id "$job")
track_job "$id"
expect_json "$(jqc .definition "$job")" "{\"name\": \"$name\", \"version\": 1}" "the job runs version 1"
expect_eq "$(jqr .priority "$job"):$(jqr .labels.team "$job")" 6:reports "with the definition's defaults"
wait_task_state "$id" approve running >/dev/null

# Version 2 publishes something else; the job in flight is not touched.
call PUT "/v1/definitions/$name" "$(jq -c '.graph.steps[2].params.value.version = 2' 14-definitions.json)"
expect_eq "$STATUS:$(jqr .version "$BODY")" 201:2 "a change is version 2"
post "/v1/jobs/$id/tasks/approve/complete" '{"result": "ok"}' >/dev/null
job=$(wait_job "$id")
expect_json "$(jqc .result "$job")" '{"report": "report of 2026-12-02", "version": 1}' "the running job finished on version 1"

second=$(post /v1/jobs "{\"definition\": \"$name\", \"input\": {\"day\": \"2026-12-03\"}}")
track_job "$(jqr .id "$second")"
expect_eq "$(jqr .definition.version "$second")" 2 "a new start takes version 2"
post "/v1/jobs/$(jqr .id "$second")/cancel" >/dev/null

call POST /v1/jobs "{\"definition\": \"$name\", \"input\": {\"day\": 20261203, \"extra\": 1}}"
expect_eq "$STATUS:$(jqr .code "$BODY")" 422:input.invalid "an input that breaks the schema is refused"
expect_eq "$(jqr '[.errors[].pointer] | join(" ")' "$BODY")" "/input/day /input/extra" "one pointer per problem"

listed=$(get "/v1/jobs?definition=$name")
expect_eq "$(jqr '.items | length' "$listed")" 2 "?definition= lists its two jobs"
call DELETE "/v1/definitions/$name"
expect_eq "$STATUS" 204 "DELETE retires the name"
call POST /v1/jobs "{\"definition\": \"$name\", \"input\": {\"day\": \"2026-12-04\"}}"
expect_eq "$STATUS:$(jqr .code "$BODY")" 422:definition.unknown "a retired definition starts nothing"
expect_eq "$(jqr .result.version "$(get "/v1/jobs/$id")")" 1 "its runs stay readable"
