#!/usr/bin/env bash
# 12 — A rate-limited pool: 500 HTTP requests, paced at the pool's rate.
#
# A pool started with `--executor paced=16,rate=100/s` (SPEC §8) starts at most 100 attempts a
# second, smoothly (a token bucket holding up to `burst` tokens, default a tenth of the rate):
# attempts waiting for a token hold no slot, and their node shows "waitingFor": "rate". Here a
# `map` over 500 pages, each an `http` GET of this server's /healthz on the `paced` pool: 16 slots
# would do them in a blink; the rate makes it take (500 − burst) / 100 ≈ 4.9 s. The script reads
# the pool's rate from GET /v1/executors (and skips, exit 0, on a server without a rate-limited
# `paced` pool), watches a node wait for the rate, and checks every request succeeded and the job
# took at least (500 − burst) / rate — printing the rate it achieved.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh

n=500
pool=$(jqc '[.items[] | select(.name == "paced")][0] // {}' "$(get /v1/executors)")
if [[ $(jqr '.rate.limit // ""' "$pool") == "" ]]; then
  say "skipped: this server has no rate-limited pool named paced (start it with --executor paced=16,rate=100/s)"
  exit 0
fi
limit=$(jqr .rate.limit "$pool")
per=$(jqr .rate.per "$pool")
burst=$(jqr .rate.burst "$pool")
case $per in
  second) per_s=1 unit=s ;;
  minute) per_s=60 unit=m ;;
  *) die "GET /v1/executors: paced has an unknown rate period: $(jqc .rate "$pool")" ;;
esac
say "GET /v1/executors → paced: $(jqc '{name, size, rate}' "$pool")"
# The fastest the pool may go: the burst at once, then `limit` per period.
min_ms=$(( (n - burst) * per_s * 1000 / limit ))
if (( min_ms > 60000 )); then
  say "skipped: at $limit/$per, $n requests would take $(( min_ms / 1000 )) s — too long for an example"
  exit 0
fi

job=$(post /v1/jobs "$(jq -c --arg base "$TS" --argjson n "$n" '.input = {base: $base, pages: [range($n)]}' 12-rate-limit.json)")
id=$(jqr .id "$job")
track_job "$id"
# After a failed check, do not leave the rest of the fan-out running.
trap '[[ $(jqr .state "$(_raw GET "/v1/jobs/$id")" 2>/dev/null) == running ]] && _raw POST "/v1/jobs/$id/cancel" >/dev/null' EXIT
say "submitted job $id ($(jqr .name "$job")): $n GETs of $TS/healthz on paced, at most $limit/$unit (burst $burst)"

# While it runs: a node waiting for a token, and the pool's bucket (read every 100 ms, ≤ 10 s).
deadline=$(( $(now_ms) + 10000 ))
waiting=""
while [[ -z $waiting ]] && (( $(now_ms) < deadline )); do
  tasks=$(get "/v1/jobs/$id/tasks")
  waiting=$(jqc '[.items[] | select(.waitingFor == "rate")] | if length > 0 then {first: .[0], count: length} else empty end' "$tasks")
  if [[ -n $waiting ]]; then
    pool=$(jqc '.items[] | select(.name == "paced")' "$(get /v1/executors)")
    break
  fi
  is_terminal "$(jqr .state "$(get "/v1/jobs/$id")")" && break
  sleep 0.1
done
[[ -n $waiting ]] || die "no node of job $id was seen waiting for the rate"
say "meanwhile: $(jqr .count "$waiting") nodes wait for a token, e.g. $(jqc '.first | {id, state, waitingFor}' "$waiting")"
say "meanwhile: GET /v1/executors → paced: $(jqc '{running, queued, queuedByPriority, rate}' "$pool")"
ok "a node showed waitingFor: rate while the job ran"
expect_eq "$(jqr '.rate.tokens | type' "$pool")" number "the pool shows its bucket's tokens"

job=$(wait_job "$id")
say "job $id → $(jqr .state "$job"): $(jqc .progress "$job")"
expect_eq "$(jqr .state "$job")" succeeded "job succeeded"
expect_eq "$(jqr .progress.succeeded "$job")" "$n" "all $n requests succeeded"
expect_eq "$(jqr '[.result[] | .status] | unique | tostring' "$job")" "[200]" "each answered 200"

duration=$(jqr "$JQ_MS"'(.finishedAt | ms) - (.startedAt | ms)' "$job")
rate=$(jq -rn --argjson n "$n" --argjson b "$burst" --argjson d "$duration" --argjson p "$per_s" --arg unit "$unit" \
  '"\(($n * 1000 * $p / $d) * 10 | round / 10)/\($unit) overall, \((($n - $b) * 1000 * $p / $d) * 10 | round / 10) after the burst of \($b)"')
say "$n requests in $duration ms: $rate (limit $limit/$unit)"
expect_ge "$duration" $(( min_ms - 400 )) "paced: at least ($n − $burst) / ($limit/$unit) − 0.4 s ($(( min_ms - 400 )) ms)"
expect_lt "$duration" $(( min_ms * 3 + 10000 )) "but not starved: under 3 × that + 10 s"
