#!/usr/bin/env bash
# Installs what building and testing TaskServer needs, when it is missing. Idempotent and quiet
# when everything is present (CI runs it on a fresh machine, developers on every `make`).
#
#   scripts/install-deps.sh [--venv] [DEBIAN_PACKAGE…]
#
# --venv also makes the Python virtual environment the tests use, .build/venv, with the pinned
# tools of scripts/requirements.txt (stock Debian's python3 refuses a system-wide `pip install`,
# PEP 668). It is remade only when the requirements file changes (a stamp in the venv records the
# file's hash). Use it as .build/venv/bin/python, or put .build/venv/bin first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=0
names=()
for arg in "$@"; do
    if [ "$arg" = --venv ]; then venv=1; else names+=("$arg"); fi
done

need_apt=()
# Always: the C libraries the package links (libcurl with OpenSSL, SQLite, libpq); plus any named.
for pkg in libcurl4-openssl-dev libssl-dev libsqlite3-dev libpq-dev pkg-config "${names[@]+"${names[@]}"}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "$venv" -eq 1 ]; then
    command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
    # Debian ships `venv` without ensurepip (so without pip) unless python3-venv is installed.
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        need_apt+=(python3-venv)
    fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

command -v swift >/dev/null || { echo "swift is not on PATH (expected Swift 6.3)"; exit 1; }

if [ "$venv" -eq 1 ]; then
    dir=.build/venv
    requirements=scripts/requirements.txt
    stamp=$dir/requirements.sha256
    want="$(sha256sum "$requirements" | cut -d' ' -f1) $(python3 -c 'import sys; print(sys.version.split()[0])')"
    if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$dir/bin/python" -c '' 2>/dev/null; then
        exit 0
    fi
    echo "making the Python environment $dir from $requirements"
    start=$SECONDS
    rm -rf "$dir"
    mkdir -p .build
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install -q --require-virtualenv -r "$requirements"
    echo "$want" >"$stamp"
    echo "  $("$dir/bin/python" --version), $("$dir/bin/python" -m pip list --format=freeze 2>/dev/null | wc -l) packages, $((SECONDS - start)) s"
fi
