#!/usr/bin/env bash
# 07 — Retries and timeouts (bonus).
#
# Bolts has no retry operator: you write it yourself by returning a new attempt from a
# `continueWithBlock:` when `task.error` is set, and you get a timeout by racing the
# work against `[BFTask taskWithDelay:]`. TaskServer makes both declarative task
# options.
#
# Three branches of a `parallel` in `mode: settled` (which always succeeds with one
# outcome object per branch, so one job shows all three):
#   flaky — `fail` with retry maxAttempts 3: every attempt fails → attempts 3, two
#           `task.retrying` events, error `upstream.unavailable`;
#   picky — the same, but retry.on ["upstream.*"] does not match its code
#           `input.invalid`: one attempt, no retry;
#   slow  — a 5 s `delay` with timeoutMs 100: fails with `task.timeout`.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

t0=$(now_ms)
job=$(submit 07-retry-and-timeout.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job"))"

job=$(wait_job "$id")
took=$(( $(now_ms) - t0 ))
say "job $id → $(jqr .state "$job") in ${took} ms"
print_tasks "$id"
say "settled outcomes: $(jqc '.result | map({state, code: .error.code})' "$job")"

events=$(all_events "$id")
say "task.retrying events:"
jq -r '.[] | select(.type == "task.retrying") | "  seq \(.seq)  \(.taskId)  \(.data // {} | tojson)"' <<<"$events"

expect_eq "$(jqr .state "$job")" succeeded "job succeeded (settled collects every outcome)"
expect_json "$(jqc '.result | map({state, code: .error.code})' "$job")" \
  '[{"state": "failed", "code": "upstream.unavailable"},
    {"state": "failed", "code": "input.invalid"},
    {"state": "failed", "code": "task.timeout"}]' \
  "settled result: one outcome object per branch, in branch order"

flaky=$(task_json "$id" flaky)
expect_eq "$(jqr .state "$flaky")" failed "flaky failed after its retries"
expect_eq "$(jqr .attempts "$flaky")" 3 "flaky made 3 attempts"
expect_eq "$(jqr .error.code "$flaky")" upstream.unavailable "flaky's error is the last attempt's"
expect_eq "$(jqr '[.[] | select(.type == "task.retrying" and .taskId == "flaky")] | length' "$events")" 2 \
  "2 task.retrying events for flaky"

picky=$(task_json "$id" picky)
expect_eq "$(jqr .attempts "$picky")" 1 "picky was not retried (retry.on does not list input.invalid)"
expect_eq "$(jqr '[.[] | select(.type == "task.retrying" and .taskId == "picky")] | length' "$events")" 0 \
  "no task.retrying events for picky"

slow=$(task_json "$id" slow)
expect_eq "$(jqr .state "$slow")" failed "slow failed"
expect_eq "$(jqr .error.code "$slow")" task.timeout "slow's error code is task.timeout"
expect_lt "$took" 4000 "the 5 s delay was cut short by timeoutMs 100 (job done in < 4 s)"
