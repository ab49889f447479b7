#!/usr/bin/env bash
# Starting a job by definition against submitting the same job inline (issue #45: within 5 %), the
# two alternated run by run on fresh servers of BIN (Benchmarks/builds-bench.sh, wrk -t1 -c64). The
# definition "bench" holds the graph and timeoutMs of Benchmarks/wrk/post-job.lua; its starts
# (post-definition.lua) carry the rest — name, input, labels — so both make the same job.
# Usage: Benchmarks/definition-bench.sh ROUNDS SECONDS memory|sqlite BIN
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: $0 ROUNDS SECONDS memory|sqlite BIN" >&2; exit 64; }
export BENCH_SETUP='curl -sf -X PUT "$SERVER_URL/v1/definitions/bench" -H "content-type: application/json" -d '"'"'{"graph":{"type":"task","id":"fetch","action":"value","params":{"value":42}},"defaults":{"timeoutMs":600000}}'"'"' >/dev/null'
exec Benchmarks/builds-bench.sh "$1" "$2" "$3" "$4" "$4@post-definition.lua"
