# shellcheck shell=bash
# Helpers for scripts/check-container.sh, step (d): the runtime stage of Docker/Dockerfile built as
# a real root filesystem (debootstrap + the stage's own RUN commands in a chroot), cached, and run.
# Sourced, not executed. Needs root (debootstrap, chroot, unshare).
#
#   rootfs_parse DOCKERFILE      sets rf_* from the runtime (last) stage: rf_from, rf_suite, rf_runs
#                                (the RUN commands, in order), rf_copies ("SRC DEST" pairs), rf_env
#                                (KEY=VALUE, in order), rf_user, rf_workdir, rf_argv (ENTRYPOINT +
#                                CMD), rf_healthcheck, rf_stopsignal, rf_expose, rf_key (cache key)
#   rootfs_build CACHE_ROOT      sets rootfs_dir to CACHE_ROOT/<rf_key>, building it when missing
#   rootfs_exec [--net new|host|NETNS] [--user UID:GID] [--cwd DIR] ROOT KEY=VALUE… CMD ARG…
#                                runs CMD chrooted in ROOT with exactly the given environment
#
# Mounts never show outside: every command in a root filesystem runs in its own mount namespace
# (unshare --mount, private propagation), so /proc, /sys and /dev/pts are mounted there and vanish
# with its last process, even on SIGKILL. Nothing is left mounted under a directory we delete, and
# no unmount trap can be forgotten.

# Bump when the way the root filesystem is made changes (not the Dockerfile: that is in the key).
rootfs_recipe=2
# Docker's PATH for a container whose image sets none (debian:*-slim sets none).
rootfs_default_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# Set by rootfs_parse (declared here so that their users can see where they come from).
# shellcheck disable=SC2034
rf_from="" rf_suite="" rf_key="" rf_user="" rf_workdir="" rf_stopsignal="" rf_runs=() rf_copies=() \
    rf_env=() rf_expose=() rf_argv=() rf_healthcheck=()

rootfs_parse() {
    local assignments
    assignments=$(python3 - "$1" "$rootfs_recipe" <<'PY'
import hashlib, json, re, shlex, sys
path, recipe = sys.argv[1:]

def fail(message):
    print(f"echo {shlex.quote(path + ': ' + message)} >&2; return 1")
    sys.exit(0)

# Docker drops comment lines, even inside a continued instruction, then joins continuations.
lines = [l for l in open(path).read().splitlines() if not l.lstrip().startswith("#")]
text = "\n".join(lines).replace("\\\n", " ")
instructions = []
for line in text.splitlines():
    if line.strip():
        keyword, _, rest = line.strip().partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
starts = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
if not starts:
    fail("no FROM")
stage = instructions[starts[-1]:]
image = stage[0][1].split()[0]
match = re.fullmatch(r"(?:docker\.io/)?(?:library/)?debian:([a-z]+)(?:-slim)?", image)
if not match:
    fail(f"the runtime stage is FROM {image}; step (d) only knows debian:<suite>[-slim]")

runs, copies, env, expose = [], [], [], []
user, workdir, argv_entry, argv_cmd, health, stopsignal = "0:0", "/", [], [], [], "SIGTERM"
copied = False
def exec_form(rest, what):
    try:
        value = json.loads(rest)
    except ValueError:
        fail(f"{what} {rest}: only the exec (JSON) form is supported here")
    return value
for keyword, rest in stage[1:]:
    if keyword == "RUN":
        # The cached root filesystem holds the RUN commands, so they must all come before the
        # first COPY (whose files change with every build); anything else needs this script extended.
        if copied or env or workdir != "/" or user != "0:0":
            fail(f"RUN after COPY, ENV, WORKDIR or USER is not supported by scripts/rootfs.sh: RUN {rest}")
        if rest.startswith("[") or rest.startswith("--") or "<<" in rest:
            fail(f"only plain shell-form RUN is supported by scripts/rootfs.sh: RUN {rest}")
        runs.append(rest)
    elif keyword == "COPY":
        copied = True
        words = rest.split()
        flags = [w for w in words if w.startswith("--")]
        if flags != ["--from=build"] or len(words) != 3:
            fail(f"only `COPY --from=build SRC DEST` is supported by scripts/rootfs.sh: COPY {rest}")
        copies.append(f"{words[1]} {words[2]}")
    elif keyword == "ENV":
        words = shlex.split(rest)
        if len(words) == 2 and "=" not in words[0]:
            words = [words[0] + "=" + words[1]]  # legacy `ENV KEY value`
        env += words
    elif keyword == "USER":
        if not re.fullmatch(r"\d+(:\d+)?", rest):
            fail(f"USER {rest}: only a numeric UID[:GID] is supported by scripts/rootfs.sh")
        user = rest if ":" in rest else rest + ":" + rest
    elif keyword == "WORKDIR":
        workdir = rest if rest.startswith("/") else workdir.rstrip("/") + "/" + rest
    elif keyword == "ENTRYPOINT":
        argv_entry, argv_cmd = exec_form(rest, "ENTRYPOINT"), []  # ENTRYPOINT resets CMD
    elif keyword == "CMD":
        argv_cmd = exec_form(rest, "CMD")
    elif keyword == "HEALTHCHECK":
        words = rest.split(" CMD ", 1)
        if len(words) != 2:
            fail(f"HEALTHCHECK {rest}: expected HEALTHCHECK [OPTIONS] CMD [...]")
        health = exec_form(words[1].strip(), "HEALTHCHECK CMD")
    elif keyword == "STOPSIGNAL":
        stopsignal = rest if rest.startswith("SIG") else "SIG" + rest
    elif keyword == "EXPOSE":
        expose += [w.split("/")[0] for w in rest.split()]
    elif keyword in ("VOLUME", "LABEL"):
        pass  # no effect on what runs (a fresh volume starts as a copy of the image's directory)
    else:
        fail(f"{keyword} in the runtime stage is not supported by scripts/rootfs.sh")
if not runs:
    fail("the runtime stage has no RUN command")
if not argv_entry + argv_cmd or not health:
    fail("step (d) runs the image's ENTRYPOINT/CMD and HEALTHCHECK CMD: one is missing")

key = hashlib.sha256(json.dumps([recipe, image, runs]).encode()).hexdigest()[:16]
q = shlex.quote
arr = lambda values: "(" + " ".join(q(v) for v in values) + ")"
print(f"rf_from={q(image)}; rf_suite={q(match.group(1))}; rf_key={q(key)}")
print(f"rf_runs={arr(runs)}; rf_copies={arr(copies)}; rf_env={arr(env)}; rf_expose={arr(expose)}")
print(f"rf_user={q(user)}; rf_workdir={q(workdir)}; rf_stopsignal={q(stopsignal)}")
print(f"rf_argv={arr(argv_entry + argv_cmd)}; rf_healthcheck={arr(health)}")
PY
) || return 1
    eval "$assignments"
}

# The Debian archive and security archive this machine's apt uses (so debootstrap goes to the same
# mirror as apt-get does here): the first `deb` URI ending in /debian and in /debian-security, from
# one-line .list files or deb822 .sources files.
rootfs_mirrors() {
    python3 - <<'PY'
import glob, re
files = glob.glob("/etc/apt/sources.list") + sorted(glob.glob("/etc/apt/sources.list.d/*"))
uris = []
for name in files:
    try:
        text = open(name).read()
    except OSError:
        continue
    if name.endswith(".sources"):
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"(?m)^([A-Za-z-]+):\s*(.*)$", stanza))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
                uris += fields.get("URIs", "").split()
    elif name.endswith(".list"):
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(words) >= 2 and words[0] == "deb":
                uris.append(words[1])
pick = lambda suffix: next((u.rstrip("/") for u in uris if u.rstrip("/").endswith(suffix)), "")
print(pick("/debian") or "http://deb.debian.org/debian", pick("/debian-security"))
PY
}

rootfs_exec() {
    local net=host user="" cwd=/
    while [ $# -gt 0 ]; do
        case $1 in
            --net) net=$2; shift 2 ;;
            --user) user=$2; shift 2 ;;
            --cwd) cwd=$2; shift 2 ;;
            *) break ;;
        esac
    done
    local root=$1
    shift
    local enter=() namespaces=(--mount --pid --fork) lo=0 as_user=()
    case $net in
        host) ;;
        # Docker gives a container its own network namespace, where 0.0.0.0 reaches nothing else.
        new) namespaces+=(--net); lo=1 ;;
        *) enter=(nsenter "--net=$net") ;;
    esac
    [ -z "$user" ] || as_user=("--userspec=$user" "--groups=${user#*:}")
    # A new PID namespace too, so the command is PID 1 as in a container: the kernel then delivers
    # a signal from outside only if the process handles it, as with `docker stop`.
    # shellcheck disable=SC2016
    "${enter[@]}" unshare "${namespaces[@]}" sh -c '
        set -e
        root=$1 lo=$2
        shift 2
        mount -t proc proc "$root/proc"
        mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
        mount --bind /dev/pts "$root/dev/pts"
        if [ "$lo" = 1 ]; then ip link set lo up; fi
        exec chroot "$@"' rootfs-exec "$root" "$lo" "${as_user[@]}" "$root" /usr/bin/env -i -C "$cwd" "$@"
}

rootfs_build() {
    # A directory of its own under the one given: the clean-ups below delete what they find in it.
    local cache_root=$1/container-rootfs
    rootfs_dir="$cache_root/$rf_key"
    if [ -d "$rootfs_dir" ]; then
        echo "root filesystem: cached at $rootfs_dir (key $rf_key: FROM $rf_from and its RUN commands)"
        return 0
    fi
    command -v debootstrap >/dev/null 2>&1 || bash scripts/install-deps.sh debootstrap
    local mirror security
    read -r mirror security < <(rootfs_mirrors)
    echo "root filesystem: building $rf_suite from $mirror into $rootfs_dir"
    mkdir -p "$cache_root"
    # A build killed outright leaves its temporary directory behind; none takes two hours.
    find "$cache_root" -maxdepth 1 -name 'tmp.*' -mmin +120 -exec rm -rf --one-file-system {} +
    # In a subshell, so that its EXIT trap removes a half-built tree whatever stops it, and the
    # caller's traps stay as they were. The tree is complete only once renamed to its key.
    (
        tmp=$(mktemp -d "$cache_root/tmp.XXXXXX")
        trap 'rm -rf --one-file-system "$tmp"' EXIT
        trap 'exit 130' INT TERM
        chmod 755 "$tmp"  # mktemp's 0700 would be the image's / and lock uid 10001 out
        log="$cache_root/build.log"
        : >"$log"
        start=$(date +%s.%N)
        # debootstrap mounts /proc and /sys in the target itself: in its own mount namespace, so
        # that they cannot outlive it.
        if ! unshare --mount debootstrap --variant=minbase "$rf_suite" "$tmp" "$mirror" >>"$log" 2>&1; then
            tail -n 30 "$log"; echo "debootstrap failed (log: $log)"; exit 1
        fi
        debootstrap_s=$(rootfs_since "$start")
        # The apt sources of the debian:*-slim images (deb822, with updates and security), at
        # this machine's mirror, so that the stage's apt-get installs today's security fixes too.
        rm -f "$tmp/etc/apt/sources.list"
        {
            printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "$mirror" "$rf_suite" "$rf_suite"
            printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
            if [ -n "$security" ]; then
                printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "$security" "$rf_suite"
                printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
            fi
        } >"$tmp/etc/apt/sources.list.d/debian.sources"
        # debian:*-slim is rebuilt with the updates and security archives applied, debootstrap
        # installs the point release: bring the base to the image's state first (our step, so
        # without prompts).
        start=$(date +%s.%N)
        if ! rootfs_exec "$tmp" "PATH=$rootfs_default_path" HOME=/root DEBIAN_FRONTEND=noninteractive /bin/sh -c \
            'apt-get update && apt-get -y -o Dpkg::Options::=--force-confold upgrade && rm -rf /var/lib/apt/lists/*' \
            </dev/null >>"$log" 2>&1; then
            tail -n 30 "$log"; echo "apt-get upgrade of the base failed (log: $log)"; exit 1
        fi
        upgrade_s=$(rootfs_since "$start")
        # The stage's RUN commands as `docker build` runs them: /bin/sh -c, as root, no terminal,
        # Docker's default PATH, and the host's network (apt-get update needs it).
        start=$(date +%s.%N)
        for command in "${rf_runs[@]}"; do
            echo "RUN $command" >>"$log"
            if ! rootfs_exec "$tmp" "PATH=$rootfs_default_path" HOME=/root /bin/sh -c "$command" </dev/null >>"$log" 2>&1; then
                tail -n 30 "$log"; echo "the runtime stage's RUN failed in the root filesystem (log: $log)"; exit 1
            fi
        done
        run_s=$(rootfs_since "$start")
        # debian:*-slim's apt hook deletes downloaded packages after every install; so do we (it
        # also keeps the copy made for every run small).
        rm -f "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/cache/apt/*.bin
        # A concurrent build of the same key may have won the rename; its tree is as good.
        mv -T "$tmp" "$rootfs_dir" 2>/dev/null || [ -d "$rootfs_dir" ]
        echo "root filesystem: debootstrap ${debootstrap_s}s, base upgrade ${upgrade_s}s, the stage's RUN ${run_s}s," \
            "$(du -sh "$rootfs_dir" | cut -f1)"
    ) || return 1
    # Older keys' trees are dead weight (about 150 MB each).
    find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype egrep -regex '.*/[0-9a-f]{16}' \
        ! -name "$rf_key" -exec rm -rf --one-file-system {} +
}

# Seconds since a `date +%s.%N` stamp, to two decimals.
rootfs_since() {
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(date +%s.%N)"
}
