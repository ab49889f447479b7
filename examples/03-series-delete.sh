#!/usr/bin/env bash
# 03 — Tasks in series over a list: delete comments one after another.
#
# Bolts ("Tasks in Series"): start from a completed task and, for each comment, chain
#   task = [task continueWithBlock:^(t){ return [self deleteAsync:comment]; }];
# so every delete starts only when the previous one has finished.
#
# TaskServer: a `map` in `mode: series` over `${input.comments}`. The map `template` is a
# single node — here a `series` (id `delete`) of a `delay` (the slow "delete", 50 ms) and
# a `value` returning {"deleted": "<comment id>"}. Instances are named `delete[0]`,
# `delete[1]`, … (their steps `remove[i]`, `ack[i]`). The result is the array of the
# instance results in item order.
#
# From GET /v1/jobs/{id}/events it prints the order in which the instances finished and
# checks, with the events' `seq`, that instance i started only after instance i-1 ended.
# shellcheck disable=SC2016  # $vars inside single quotes are jq variables
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

comments=$(jq -c .input.comments 03-series-delete.json)
n=$(jqr length "$comments")

job=$(submit 03-series-delete.json)
id=$(jqr .id "$job")
track_job "$id"
say "submitted job $id ($(jqr .name "$job")): delete $n comments one after another"

job=$(wait_job "$id")
say "job $id → $(jqr .state "$job")"
print_tasks "$id"
say "final result: $(jqc .result "$job")"

expect_eq "$(jqr .state "$job")" succeeded "job succeeded"
expect_json "$(jqc .result "$job")" "$(jqc 'map({deleted: .})' "$comments")" \
  "result is one {\"deleted\": id} per comment, in item order"
for (( i = 0; i < n; i++ )); do
  expect_eq "$(jqr .state "$(task_json "$id" "delete[$i]")")" succeeded "instance delete[$i] succeeded"
done

# Per instance i: the first task.started and the last terminal event among the nodes
# whose id ends in "[i]" (the instance delete[i] and its steps remove[i], ack[i]).
events=$(all_events "$id")
spans=$(jq -c --argjson n "$n" '
  . as $all
  | [range(0; $n) as $i
     | [$all[] | select((.taskId // "") | endswith("[\($i)]"))] as $ev
     | {id: "delete[\($i)]",
        start: ([$ev[] | select(.type == "task.started") | .seq] | min),
        end:   ([$ev[] | select(.type == "task.succeeded" or .type == "task.failed"
                                or .type == "task.cancelled") | .seq] | max)}]' <<<"$events")

say "task.succeeded events of the instances, in seq order:"
jq -r '.[] | select(.type == "task.succeeded" and ((.taskId // "") | test("\\[[0-9]+\\]$")))
       | "  seq \(.seq)  task.succeeded  \(.taskId)"' <<<"$events"
say "instances (first start → last finish, by seq):"
jq -r '.[] | "  \(.id): seq \(.start) → seq \(.end)"' <<<"$spans"

expect_eq "$(jqr '[.[] | select(.start == null or .end == null)] | length' "$spans")" 0 \
  "every instance has started and finished events"
expect_eq "$(jqr 'sort_by(.end) | map(.id) | join(" ")' "$spans")" \
  "$(jqr 'to_entries | map("delete[\(.key)]") | join(" ")' "$comments")" \
  "instances finished in item order"
expect_eq "$(jqr '[range(1; length) as $i | select(.[$i].start <= .[$i - 1].end) | .[$i].id] | join(" ")' "$spans")" "" \
  "no overlap: each instance started after the previous one finished"

duration=$(jq -r "$JQ_MS"'(.finishedAt | ms) - (.startedAt | ms)' <<<"$job")
say "job ran for ${duration} ms (${n} × 50 ms delays, one after another)"
expect_ge "$duration" $(( n * 50 - 5 )) "the delays did not run concurrently (≥ $(( n * 50 - 5 )) ms)"
