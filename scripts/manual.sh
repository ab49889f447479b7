#!/usr/bin/env bash
# The manual page docs/man/taskserver.1, generated from the commands' own help by
# swift-argument-parser's GenerateManual plugin (one page: every subcommand is a section of it).
#
#   scripts/manual.sh            regenerate docs/man/taskserver.1 (after changing a command's options
#                                or help text); keeps the page's date unless --date is given
#   scripts/manual.sh --check    exit 1 when the committed page is not what the plugin generates now
#                                (make test runs this, as it checks openapi.json)
#
# The plugin builds the package's products in debug mode (already built when make test runs this)
# and its own generate-manual tool, then runs `taskserver --experimental-dump-help`.
set -euo pipefail
cd "$(dirname "$0")/.."
page=docs/man/taskserver.1
mode=write
date=""
while [ $# -gt 0 ]; do
    case $1 in
        --check) mode=check ;;
        --date) date=$2; shift ;;
        *) echo "usage: scripts/manual.sh [--check] [--date YYYY-MM-DD]"; exit 64 ;;
    esac
    shift
done
# The page's own date (.Dd "Month D, YYYY" as mdoc writes it), so that regenerating it unchanged is a no-op.
if [ -z "$date" ] && [ -f "$page" ]; then
    date=$(sed -n 's/^\.Dd //p' "$page" | head -n1 | xargs -I{} date -d {} +%Y-%m-%d)
fi
[ -n "$date" ] || date=$(date +%Y-%m-%d)
log=$(mktemp)
since=$(mktemp)  # a timestamp: only a page written after it is this run's
trap 'rm -f "$log" "$since"' EXIT
# Defaults that come from the environment (TASKSERVER_URL, …) show in the page: generate it
# without them, so that it is the same on every machine.
for name in $(compgen -e | grep '^TASKSERVER_' || true); do unset "$name"; done
swift package plugin generate-manual --configuration debug --date "$date" >"$log" 2>&1 \
    || { cat "$log"; echo "the GenerateManual plugin failed"; exit 1; }
generated=$(find .build/plugins -path '*GenerateManual*' -name taskserver.1 -newer "$since" | head -n1)
[ -n "$generated" ] || { cat "$log"; echo "the plugin wrote no taskserver.1"; exit 1; }
if [ "$mode" = check ]; then
    if ! cmp -s "$generated" "$page"; then
        diff -u "$page" "$generated" | head -n 40 || true
        echo "$page is stale: run scripts/manual.sh and commit it"
        exit 1
    fi
    echo "$page is current ($(wc -l <"$page") lines, dated $date)"
else
    mkdir -p "$(dirname "$page")"
    cp "$generated" "$page"
    echo "wrote $page ($(wc -l <"$page") lines, dated $date)"
fi
