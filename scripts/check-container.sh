#!/usr/bin/env bash
# Checks Docker/Dockerfile without a Docker engine (none runs on CI):
#   (a) hadolint finds nothing;
#   (b) the release binary, built the way the Dockerfile builds it, needs only shared libraries
#       that the runtime stage provides;
#   (c) that binary starts and serves with only the environment the image sets, as a non-root
#       user, stores its data under the image's /data, passes `taskserver healthcheck`, and exits 0
#       on SIGTERM;
#   (d) the same, in the image itself: the runtime stage built as a real root filesystem
#       (debootstrap --variant=minbase, then the stage's own RUN commands in a chroot; cached per
#       hash of FROM and RUN in ~/.cache/taskserver/container-rootfs — outside the clone, so CI's
#       fresh clones pay for it once per machine — or $TASKSERVER_ROOTFS_CACHE), the COPY
#       lines applied, and ENTRYPOINT + CMD run chrooted as USER in WORKDIR with exactly the image's
#       ENV, as PID 1 of its own PID and network namespaces. Needs root (skipped otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
dockerfile=Docker/Dockerfile

echo "== (a) hadolint $dockerfile"
command -v hadolint >/dev/null 2>&1 || { bash scripts/install-deps.sh --venv; PATH="$PWD/.build/venv/bin:$PATH"; }
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
port=0
# The ENV lines of the runtime stage, with three substitutions a host needs: /data becomes a temp
# directory, the port 0 (8080 may be taken here: the server picks one and logs it), and the
# backtracer's path this toolchain's copy. PATH is the base image's, with the binary where the
# image puts it. (d) below runs the image's ENV unchanged, in a network namespace of its own.
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
cleanup() {
    [ -z "$server" ] || kill -KILL "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=scripts/server.sh
. scripts/server.sh
port=""
for _ in $(seq 1 300); do
    port=$(server_port_from_log "$log")
    [ -n "$port" ] && break
    kill -0 "$server" 2>/dev/null || { echo "the server exited:"; cat "$log"; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "the server did not log its port within 30 s:"; cat "$log"; exit 1; }
base="http://127.0.0.1:$port"
# The healthcheck reads the port from the environment, as in the image: give it the bound one.
for i in "${!image_env[@]}"; do
    [[ ${image_env[$i]} == TASKSERVER_PORT=* ]] && image_env[i]="TASKSERVER_PORT=$port"
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
server=""  # reaped: its pid may be reused by the time the exit trap runs
elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$(date +%s.%N)")
[ "$status" -eq 0 ] || fail "exit status $status on SIGTERM"
echo "SIGTERM: exit 0 after ${elapsed}s"
if env -i "${image_env[@]}" "$work/bin/taskserver" healthcheck; then fail "healthcheck passed with the server stopped"; fi
echo "healthcheck with the server stopped: exit 1"

echo "== (d) the runtime stage as a root filesystem: debootstrap + its RUN, chroot, the image's ENV"
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: needs root (debootstrap, chroot, namespaces); (c) above ran instead"
    echo "container checks passed"
    exit 0
fi
# shellcheck source=scripts/rootfs.sh
source scripts/rootfs.sh
rootfs_parse "$dockerfile"
# Outside the clone (CI's fresh clones have no .build), so a machine builds it once; rootfs_build
# keeps everything in a subdirectory of its own there (TASKSERVER_ROOTFS_CACHE moves the parent).
rootfs_build "${TASKSERVER_ROOTFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/taskserver}"

# Every run gets a fresh copy: the server writes its store into /data, and a container starts
# from the image, not from the last run's leftovers.
run=$(mktemp -d)
root="$run/rootfs"
launcher="" container_pid=""
cleanup_d() {
    # SIGKILL to the namespace's PID 1 ends everything in it, and with it its mounts.
    # Only while its launcher runs: once unshare has exited, the pid is reaped and may be reused.
    if [ -n "$container_pid" ] && [ -n "$launcher" ] && kill -0 "$launcher" 2>/dev/null; then
        kill -KILL "$container_pid" 2>/dev/null || true
    fi
    [ -z "$launcher" ] || wait "$launcher" 2>/dev/null || true
    rm -rf --one-file-system "$run"
}
trap 'cleanup; cleanup_d' EXIT
start=$(date +%s.%N)
cp -a "$rootfs_dir" "$root"
copy_s=$(rootfs_since "$start")
# The COPY lines, with the files this script built in place of the build stage's /staging.
# The manual page is the repository's; the completions are what the build stage's binary writes.
mkdir -p "$run/share"
for shell in bash zsh fish; do "$bin" --generate-completion-script "$shell" >"$run/share/taskserver.$shell"; done
for copy in "${rf_copies[@]}"; do
    src=${copy% *} dest=${copy#* }
    mode=644
    case $(basename "$src") in
        taskserver) built=$bin mode=755 ;;
        swift-backtrace-static) built=$backtracer mode=755 ;;
        taskserver.1) built=docs/man/taskserver.1 ;;
        taskserver.bash) built=$run/share/taskserver.bash ;;
        _taskserver) built=$run/share/taskserver.zsh ;;
        taskserver.fish) built=$run/share/taskserver.fish ;;
        *) echo "COPY $src: not a file this script builds (extend step (d))"; exit 1 ;;
    esac
    case $dest in */) dest+=$(basename "$src") ;; esac
    install -D -m "$mode" "$built" "$root$dest"
done
# In the image: the manual page reads (mandoc-compatible groff is not in the slim image: the page
# is checked for its name and every subcommand's section) and bash loads the completion.
grep -q '^\.Nm taskserver' "$root/usr/local/share/man/man1/taskserver.1" || { echo "no manual page in the image"; exit 1; }
rootfs_exec --net new "$root" "PATH=$rootfs_default_path" bash -c \
    'source /usr/share/bash-completion/completions/taskserver && complete -p taskserver' >/dev/null \
    || { echo "the image's bash completion does not load"; exit 1; }
echo "manual page and bash, zsh, fish completions in the image"
# What Docker adds to every container (the image has neither), and creates for WORKDIR.
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
echo taskserver >"$root/etc/hostname"
mkdir -p "$root$rf_workdir"

# The dynamic loader of the image itself, rather than (b)'s package closure, resolves each file.
for copy in "${rf_copies[@]}"; do
    dest=${copy#* }
    case $dest in */) dest+=$(basename "${copy% *}") ;; esac
    [ -x "$root$dest" ] || continue  # the manual page and the completions
    libs=$(rootfs_exec --net new "$root" "PATH=$rootfs_default_path" ldd "$dest" 2>&1) \
        || grep -q "not a dynamic executable" <<<"$libs" \
        || { echo "$libs"; echo "ldd $dest failed in the root filesystem"; exit 1; }
    if grep -q "not found" <<<"$libs"; then echo "$libs"; echo "$dest: libraries missing in the image"; exit 1; fi
    echo "ldd in the image: $dest resolves $(grep -c '=>' <<<"$libs") libraries"
done
swift_backtrace=$(printf '%s\n' "${rf_env[@]}" | sed -n 's/^SWIFT_BACKTRACE=.*swift-backtrace=\([^,]*\).*/\1/p')
if [ -n "$swift_backtrace" ] && [ ! -x "$root$swift_backtrace" ]; then
    echo "SWIFT_BACKTRACE names $swift_backtrace, which no COPY puts in the image"; exit 1
fi

# The container's environment: Docker's PATH and HOME (from the image's passwd for USER), then
# the image's ENV, unchanged: with its own network namespace the server can have port 8080.
uid=${rf_user%%:*}
home=$(chroot "$root" getent passwd "$uid" | cut -d: -f6 || true)
container_env=("PATH=$rootfs_default_path" "HOME=${home:-/}" "${rf_env[@]}")
port=$(printf '%s\n' "${container_env[@]}" | sed -n 's/^TASKSERVER_PORT=//p' | tail -1)
port=${port:-8080}
store=$(printf '%s\n' "${container_env[@]}" | sed -n 's/^TASKSERVER_DATA=//p' | tail -1)
store=${store:-$rf_workdir/data/taskserver.sqlite}
echo "runs: ${rf_argv[*]} as $rf_user in $rf_workdir (HOME=${home:-/}), the image's ENV with port $port"
log="$run/server.log"
start=$(date +%s.%N)
rootfs_exec --net new --user "$rf_user" --cwd "$rf_workdir" "$root" "${container_env[@]}" "${rf_argv[@]}" \
    </dev/null >"$log" 2>&1 &
launcher=$!
# The server is the first descendant in another PID namespace (its PID 1): unshare's child,
# which becomes chroot, env, then taskserver by exec.
ours=$(readlink /proc/self/ns/pid)
for _ in $(seq 1 100); do
    pid=$launcher
    while [ -z "$container_pid" ] && [ -n "$pid" ]; do
        ns=$(readlink "/proc/$pid/ns/pid" 2>/dev/null || true)
        if [ -n "$ns" ] && [ "$ns" != "$ours" ]; then container_pid=$pid; break; fi
        pid=$(cut -d' ' -f1 "/proc/$pid/task/$pid/children" 2>/dev/null || true)
    done
    [ -z "$container_pid" ] || break
    sleep 0.05
done
[ -n "$container_pid" ] || fail "no process started in a new PID namespace"
in_container_net() { nsenter --target "$container_pid" --net "$@"; }
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
    in_container_net curl -fsS "$base/healthz" >/dev/null 2>&1 && break
    kill -0 "$launcher" 2>/dev/null || fail "the server exited"
    sleep 0.1
done
start_s=$(rootfs_since "$start")
[ "$(in_container_net curl -sS "$base/healthz")" = '{"status":"ok"}' ] || fail "/healthz"
[ "$(in_container_net curl -sS -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ] || fail "/readyz is not 200"
# A published port reaches the container's interface, not its loopback: the server must listen
# on the wildcard address, on the port the image EXPOSEs.
listen=$(python3 - "$container_pid" "$port" <<'PY'
import sys
pid, port = sys.argv[1], int(sys.argv[2])
for table in ("tcp", "tcp6"):
    for line in open(f"/proc/{pid}/net/{table}").readlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hexport = local.partition(":")
        if state == "0A" and int(hexport, 16) == port:
            print(("0.0.0.0" if table == "tcp" else "[::]") if set(address) == {"0"} else f"{table}:{address}")
PY
)
grep -Eqx '0\.0\.0\.0|\[::\]' <<<"$listen" || fail "not listening on the wildcard address at port $port: ${listen:-nothing}"
printf '%s\n' "${rf_expose[@]}" | grep -qx "$port" || fail "the server's port $port is not EXPOSEd (${rf_expose[*]})"
echo "listening on $(head -1 <<<"$listen"):$port (EXPOSE ${rf_expose[*]})"
job=$(in_container_net curl -sS "$base/v1/jobs?waitMs=5000" -H 'content-type: application/json' \
    -d '{"graph":{"type":"task","action":"value","params":{"value":42}}}')
[ "$(jq -r .state <<<"$job")" = succeeded ] || fail "job did not succeed: $job"
[ "$(jq -r .result <<<"$job")" = 42 ] || fail "unexpected result: $job"
[ -s "$root$store" ] || fail "no store at $store in the root filesystem"
[ "$(stat -c %u "$root$store")" = "$uid" ] || fail "$store is owned by uid $(stat -c %u "$root$store"), not $uid"
echo "served a job; store $store: uid $(stat -c '%u, %s bytes' "$root$store")"
# HEALTHCHECK's CMD as Docker runs it: in the container (its network), as USER, in WORKDIR, with
# the container's environment.
rootfs_exec --net "/proc/$container_pid/ns/net" --user "$rf_user" --cwd "$rf_workdir" "$root" "${container_env[@]}" \
    "${rf_healthcheck[@]}" || fail "HEALTHCHECK ${rf_healthcheck[*]} did not exit 0"
echo "HEALTHCHECK (${rf_healthcheck[*]}) in the container: exit 0"
start=$(date +%s.%N)
kill -s "${rf_stopsignal#SIG}" "$container_pid"
# Bounded: the image's shutdown grace is 25 s; a PID 1 that ignores the signal would hang here.
for _ in $(seq 1 400); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
kill -0 "$launcher" 2>/dev/null && fail "still running 40 s after $rf_stopsignal"
status=0
wait "$launcher" || status=$?
launcher="" container_pid=""
stop_s=$(rootfs_since "$start")
[ "$status" -eq 0 ] || fail "exit status $status on $rf_stopsignal"
echo "$rf_stopsignal to PID 1: exit 0 after ${stop_s}s"
if rootfs_exec --net new --user "$rf_user" --cwd "$rf_workdir" "$root" "${container_env[@]}" "${rf_healthcheck[@]}"; then
    fail "HEALTHCHECK passed with the server stopped"
fi
echo "HEALTHCHECK with the server stopped: exit non-zero"
echo "(d) timings: copy of the root filesystem ${copy_s}s, start to /healthz ${start_s}s, stop ${stop_s}s"
echo "== (e) the compose files (parsed; no compose plugin here to run them)"
command -v haproxy >/dev/null 2>&1 || bash scripts/install-deps.sh haproxy
python3 scripts/check-compose.py "$bin"
echo "container checks passed"
