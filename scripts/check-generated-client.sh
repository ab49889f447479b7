#!/usr/bin/env bash
# The contract as a new user meets it: openapi.yaml must be valid OpenAPI 3.1, openapi-python-client
# must generate a client from it without a single warning, and that client must work against a live
# server (scripts/client-tour.py: submit and wait, an await task completed, a list read with its
# cursor, cancel, events, and typed 404 / 409 / 422 problems).
#
# usage: check-generated-client.sh PYTHON BASE_URL
#   PYTHON    the python of a virtual environment holding the pinned tools (openapi-python-client,
#             openapi-spec-validator); the generated package is installed into it.
#   BASE_URL  a running server, e.g. http://127.0.0.1:8080 (without API keys).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 2 ]; then
    echo "usage: $0 PYTHON BASE_URL" >&2
    exit 2
fi
python=$1
base_url=$2
bindir=$(dirname "$python")
generator_version=0.29.1

fail() { echo "FAIL: $*" >&2; exit 1; }

"$python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || fail "$python is not the python of a virtual environment"
installed=$("$python" -c 'from importlib.metadata import version; print(version("openapi-python-client"))' 2>/dev/null || true)
[ "$installed" = "$generator_version" ] || fail "openapi-python-client $generator_version is not installed in the virtual environment of $python (found: ${installed:-none})"
[ -x "$bindir/openapi-spec-validator" ] || fail "openapi-spec-validator is not installed in the virtual environment of $python"

echo "== openapi-spec-validator openapi.yaml"
"$bindir/openapi-spec-validator" openapi.yaml

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Fixed names, whatever info.title says. The generator has no reader for application/yaml (the
# content type of GET /openapi.yaml), so it is told to read it as text; application/json
# (GET /openapi.json) needs nothing.
cat >"$work/config.yaml" <<'YAML'
project_name_override: taskserver-client
package_name_override: taskserver_client
content_type_overrides:
  application/yaml: text/plain
YAML

echo "== openapi-python-client $generator_version generate --path openapi.yaml"
status=0
# The venv's bin first on PATH: the generator formats its output with the ruff it depends on.
PATH="$bindir:$PATH" "$bindir/openapi-python-client" generate --path openapi.yaml --meta setup \
    --config "$work/config.yaml" --output-path "$work/client" --fail-on-warning >"$work/generate.log" 2>&1 || status=$?
cat "$work/generate.log"
[ "$status" -eq 0 ] || fail "openapi-python-client exited with status $status"
# Anything but the one "Generating …" line is a warning (a dropped response, model or operation).
if grep -v -e '^Generating ' -e '^[[:space:]]*$' "$work/generate.log" >/dev/null; then
    fail "openapi-python-client printed warnings (above)"
fi
echo "✔ generated without warnings"

echo "== installing the generated client into $(dirname "$bindir")"
# Its dependencies (httpx, attrs) are the generator's own: only pip's build backend may be fetched.
"$python" -m pip install -q --no-deps --force-reinstall "$work/client"
"$python" -c 'import taskserver_client' || fail "the generated package does not import"

echo "== client tour against $base_url"
"$python" scripts/client-tour.py "$base_url"
