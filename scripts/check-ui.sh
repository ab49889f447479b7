#!/usr/bin/env bash
# The dashboard (/ui/, SPEC §7) in a real browser: starts two servers on ports of their choosing
# (--port 0, read from their logs: scripts/server.sh) — one open, one with --api-key — and drives
# headless Chromium against them with selenium (Tests/ui/dashboard_test.py): the jobs list, a
# graph turning live, cancel, the await form, a job named like an XSS payload, delete, executors
# (the open server has a rate-limited pool, paced), waits for a concurrency key,
# the API key form, console errors, first paint of 1,000-node jobs and a 10,000-node job.
# usage: scripts/check-ui.sh [PATH/TO/taskserver] [dashboard_test.py options, e.g. --screenshots]
# Needs Debian's chromium and chromium-driver, and selenium in .build/venv (both installed here
# when missing). With TASKSERVER_UI_DIR set, the servers serve the dashboard from that directory;
# with TEST_STORE_URL (a PostgreSQL database), the open server keeps its jobs there.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/server.sh
bin=${1:-$(swift build --show-bin-path)/taskserver}
[ $# -eq 0 ] || shift
[ -x "$bin" ] || { echo "no server binary at $bin"; exit 2; }

bash scripts/install-deps.sh --venv chromium chromium-driver
py=.build/venv/bin/python

work=$(mktemp -d)
key="ui-test-key-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
plain="" keyed=""
cleanup() {
    local pid
    for pid in $plain $keyed; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# The open server keeps jobs in memory, or in PostgreSQL when TEST_STORE_URL names a database.
store="--memory"
[ -z "${TEST_STORE_URL:-}" ] || store=$(store_args "$work")
# shellcheck disable=SC2086 # store_args prints options without spaces
start_server "$work/plain.log" "$bin" serve $store --executor default=8 --executor paced=16,rate=100/s
plain=$SERVER_PID
plain_url=$SERVER_URL
start_server "$work/keyed.log" "$bin" serve --memory --executor default=8 --api-key "$key"
keyed=$SERVER_PID
keyed_url=$SERVER_URL
echo "servers: $plain_url (open), $keyed_url (--api-key)"

status=0
TASKSERVER_UI_TEST_KEY="$key" "$py" Tests/ui/dashboard_test.py "$plain_url" "$keyed_url" "$@" || status=$?
if [ "$status" -ne 0 ]; then
    echo "-- last lines of the open server's log"
    tail -n 40 "$work/plain.log"
    echo "-- last lines of the keyed server's log"
    tail -n 20 "$work/keyed.log"
fi
exit "$status"
