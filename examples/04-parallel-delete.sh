#!/usr/bin/env bash
# 04 — Tasks in parallel over a list: delete comments concurrently, three at a time.
#
# Bolts ("Tasks in Parallel"): start every delete at once, collect the tasks in an array
# and wait for all of them with `[BFTask taskForCompletionOfAllTasks:tasks]`
# (Bolts-Swift `Task.whenAll`).
#
# TaskServer: the same `map` as example 03 but in `mode: parallel` with
# `maxConcurrency: 3` over 8 comments, each instance a 200 ms `delay` then a `value`.
# The instances run in waves of at most three (3 + 3 + 2 → ~600 ms, not 8 × 200 ms), and
# the result array is still in item order, whatever order the instances finished in.
# shellcheck disable=SC2016  # $vars inside single quotes are jq variables
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

comments=$(jq -c .input.comments 04-parallel-delete.json)
n=$(jqr length "$comments")

t0=$(now_ms)
job=$(submit 04-parallel-delete.json 'waitMs=30000')
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")): delete $n comments, at most 3 at once"

job=$(wait_job "$id")
wall=$(( $(now_ms) - t0 ))
say "job $id → $(jqr .state "$job")"
print_tasks "$id"
say "final result: $(jqc .result "$job")"

expect_eq "$(jqr .state "$job")" succeeded "job succeeded"
expect_json "$(jqc .result "$job")" "$(jqc 'map({deleted: .})' "$comments")" \
  "result array is in input order"

# Concurrency, from the events: each instance's delay runs from task.started to
# task.succeeded of remove[i]; count how many were running at each start.
events=$(all_events "$id")
spans=$(jq -c --argjson n "$n" '
  . as $all
  | [range(0; $n) as $i
     | {i: $i,
        start: ([$all[] | select(.taskId == "remove[\($i)]" and .type == "task.started") | .seq] | min),
        end:   ([$all[] | select(.taskId == "remove[\($i)]" and .type == "task.succeeded") | .seq] | max)}]' <<<"$events")
say "delays (task.started → task.succeeded, by seq):"
jq -r '.[] | "  remove[\(.i)]: seq \(.start) → seq \(.end)"' <<<"$spans"
expect_eq "$(jqr '[.[] | select(.start == null or .end == null)] | length' "$spans")" 0 \
  "every delay has started and succeeded events"
peak=$(jqr '. as $s | [$s[] | .start as $t | [$s[] | select(.start <= $t and .end > $t)] | length] | max' "$spans")
say "at most $peak delays ran at once"
expect_lt "$peak" 4 "maxConcurrency 3 was respected"

duration=$(jq -r "$JQ_MS"'(.finishedAt | ms) - (.startedAt | ms)' <<<"$job")
say "job ran for ${duration} ms (server timestamps); ${wall} ms seen by this client"
expect_lt "$duration" 1200 "much faster than $n × 200 ms in series (< 1200 ms)"
expect_ge "$duration" 550 "but at least three waves of 200 ms (≥ 550 ms)"
