#!/usr/bin/env bash
# Installs what building and testing TaskServer needs, when it is missing. Idempotent and quiet
# when everything is present (CI runs it on a fresh machine, developers on every `make`).
set -euo pipefail

need_apt=()
# Add Debian packages here as the project grows (libcurl4-openssl-dev, libsqlite3-dev, …).
for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

command -v swift >/dev/null || { echo "swift is not on PATH (expected Swift 6.3)"; exit 1; }
