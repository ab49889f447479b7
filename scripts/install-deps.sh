#!/usr/bin/env bash
# Installs what building and testing TaskServer needs, when it is missing. Idempotent and quiet
# when everything is present (CI runs it on a fresh machine, developers on every `make`).
set -euo pipefail

need_apt=()
# Always: the C libraries the package links (libcurl with OpenSSL, SQLite); plus any named.
for pkg in libcurl4-openssl-dev libssl-dev libsqlite3-dev pkg-config "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

command -v swift >/dev/null || { echo "swift is not on PATH (expected Swift 6.3)"; exit 1; }
