#!/usr/bin/env bash
# Runs every example (NN-*.sh, in order) against $TASKSERVER_URL
# (default http://127.0.0.1:8080) and ends with the line "N passed, M failed".
# Exits non-zero if any example failed.
set -euo pipefail
cd "$(dirname "$0")"

command -v jq >/dev/null || { echo "jq is required (apt-get install jq)"; exit 2; }

url=${TASKSERVER_URL:-http://127.0.0.1:8080}
if ! curl -sS --max-time 5 -o /dev/null "${url%/}/healthz" 2>/dev/null; then
  echo "warning: no answer from ${url%/}/healthz — is the server running?" >&2
fi

passed=0
failed=0
failures=()
for script in [0-9][0-9]-*.sh; do
  [[ -f $script ]] || continue
  echo "== $script"
  rc=0
  if command -v timeout >/dev/null; then
    timeout 180 bash "$script" || rc=$?
  else
    bash "$script" || rc=$?
  fi
  if (( rc == 0 )); then
    passed=$(( passed + 1 ))
  else
    failed=$(( failed + 1 ))
    failures+=("$script (exit $rc)")
    echo "✘ $script failed (exit $rc)"
  fi
  echo
done

for f in "${failures[@]+"${failures[@]}"}"; do
  echo "failed: $f"
done
echo "$passed passed, $failed failed"
(( failed == 0 ))
