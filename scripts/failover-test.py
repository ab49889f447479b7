#!/usr/bin/env python3
"""PostgreSQL's own failover under load (issue #43 item 3): a synchronous standby promoted after the
primary is killed, with real PostgreSQL 15 processes and real servers.

    python3 scripts/failover-test.py PATH/TO/taskserver [--servers 1|3|1,3] [--promote-after S]
                                     [--postmaster-only] [--async] [--keep]

Run as root (PostgreSQL runs as `postgres` through runuser). Both modes by default, ~25 s each.

For each mode (one server; the three-server cluster, `--node-name n1…n3`), in a temporary directory:
  1. Two PostgreSQL 15 clusters (Debian's binaries, run as the `postgres` user as in
     scripts/postgres.sh: loopback, trust authentication, role and database `taskserver`): a primary
     with `wal_level=replica`, `synchronous_standby_names=failover_standby`, `synchronous_commit=on`
     and fsync on; a standby made by `pg_basebackup -R` whose `primary_conninfo` carries
     `application_name=failover_standby`, streaming and `sync` in `pg_stat_replication` before any
     server starts. The synchronous settings are the primary's command line, not its files: the
     promoted standby must not wait for a standby of its own that nobody runs. The standby retries
     its primary every second (`wal_retrieve_retry_interval=1s`; at the default 5 s it acted on
     `pg_ctl promote` up to 5 s late).
  2. The servers on one multi-host URL,
     `postgres://taskserver@127.0.0.1:P1,127.0.0.1:P2/taskserver?target_session_attrs=read-write`:
     libpq connects to whichever host takes writes.
  3. Load: three threads per server POST jobs (50 ms apart after a 201, 100 ms after anything else):
     a value N, a delay (0.2-3 s, or for 30% of the jobs 4-9 s: still running when the servers stop
     acting on their jobs), an `http` task that POSTs `${job.id}` to a recorder in this script (which
     answers after 0.1-0.5 s), and a value `${tasks.a.result}`: the job's result is N. Each server's
     /readyz is sampled every 50 ms.
  4. After 3 s of load every process of the primary is killed with SIGKILL at once (the postmaster
     stopped first so that it forks nothing more, its children listed, then all killed: a machine's
     death, as near as processes get; `--postmaster-only` kills the postmaster alone, and its
     backends exit as they notice). `--promote-after` seconds later (default 5: past the servers'
     3.5 s stale stop, as a failover tool's detection would be) `pg_ctl promote` on the standby.
  5. Measured per server: when /readyz went 503 and came back 200, and the answer gap: from the kill
     to the first 201 to a POST sent after the kill. Load goes on 3 s after the last server is back.
Checked:
  - every answer to a POST is a 201 or a 503 `store.*` with Retry-After (no 500, no reset, none
    slower than 30 s); no POST sent after the kill is answered 201 before the promotion (there was
    no database that could have stored it);
  - /readyz is 503 on every server from 1 s after the kill until the promotion, 200 again within the
    bound (30 s after the promotion), and once it is 200 again (plus 1 s) no POST is refused;
  - every job answered 201 (before, during and after the failover) ends `succeeded` with its
    result N, read through the servers and, for the whole set, in `jobs` on the promoted
    standby (directly with psql);
  - nothing runs twice. Per job: its event seqs are 1…N with no gap; one `job.started` and one
    `job.succeeded`; each task has exactly one terminal event (`task.succeeded`), and its `attempts`
    equals its `task.started` events (no retry is configured, so any second start is a re-run).
    The `http` task's calls are counted by the recorder: never more than the task's recorded starts
    (an execution the journal does not show). A task started twice is allowed only when its
    first start came before its server answered again (an attempt in flight when the database went
    away, which a server resumes at-least-once after its stale stop, docs/cluster.md "When PostgreSQL
    restarts"); those re-runs, and the HTTP calls they repeated, are counted and printed.
Figures: per server the /readyz and answer gaps (from the kill and from the promotion); answers by
status and the slowest; jobs checked; re-runs; run time. Exit status 0 when every check passes; every
PostgreSQL and taskserver process this script started is stopped on exit, also on failure (logs and
data are kept then, and with --keep).

`--async` shows what asynchronous replication risks instead (not run by `make test`): no
synchronous_standby_names, and the primary's walsender stopped (SIGSTOP) for the last second before
the kill, as a standby that lags; the checks' findings are printed as ASYNC lines, not failed.
"""
import argparse
import atexit
import concurrent.futures
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer, wait_until  # noqa: E402

PG_BIN = "/usr/lib/postgresql/15/bin"
STANDBY_NAME = "failover_standby"
WARM_UP = 3.0          # seconds of load before the kill
AFTER = 3.0            # seconds of load once every server answers again
BACK_BOUND = 30.0      # seconds after the promotion by which every server must answer again
REQUEST_TIMEOUT = 30.0
TERMINAL = ("succeeded", "failed", "cancelled")


def as_postgres(*args, check=True, capture=True):
    """Runs a command as the `postgres` user (PostgreSQL refuses root)."""
    return subprocess.run(["runuser", "-u", "postgres", "--", *args], check=check, capture_output=capture,
                          text=True, timeout=60)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pids_with_parent(parent):
    """The processes whose parent is `parent` (from /proc)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            children.append(int(entry))
    return children


def started(pid):
    """The start time of process `pid` (clock ticks since boot; with the pid, it names one
    process: a pid may be reused), or None when there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


class PostgresPair:
    """A primary and a synchronous streaming standby in `workdir`, as the `postgres` user."""

    def __init__(self, workdir, synchronous=True):
        self.synchronous = synchronous
        self.dir = os.path.join(workdir, "pg")
        os.mkdir(self.dir)
        shutil.chown(workdir, "postgres")
        shutil.chown(self.dir, "postgres")
        if as_postgres("test", "-x", self.dir, check=False).returncode != 0:
            raise SystemExit(f"the postgres user cannot enter {self.dir} (a parent directory is closed to it)")
        self.primary = os.path.join(self.dir, "primary")
        self.standby = os.path.join(self.dir, "standby")
        self.primary_port, self.standby_port = free_port(), free_port()
        self.started = []       # data directories whose server this script started
        self.killed = None      # the primary's postmaster pid, once killed
        self.killed_pids = []

    def options(self, port, extra=""):
        return (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={self.dir} "
                f"-c max_connections=100 -c fsync=on -c full_page_writes=on -c synchronous_commit=on {extra}")

    def pg_ctl_start(self, data, port, extra=""):
        log = f"{data}.log"
        result = as_postgres(f"{PG_BIN}/pg_ctl", "-D", data, "-l", log, "-o", self.options(port, extra), "-w",
                             "-t", "30", "start", check=False)
        self.started.append(data)
        if result.returncode != 0:
            with open(log, errors="replace") as f:
                tail = f.read()[-2000:]
            raise SystemExit(f"PostgreSQL in {data} did not start:\n{result.stdout}{result.stderr}\n{tail}")

    def start(self):
        if not os.access(f"{PG_BIN}/initdb", os.X_OK):
            raise SystemExit(f"{PG_BIN}/initdb not found: apt-get install -y postgresql-15")
        result = as_postgres(f"{PG_BIN}/initdb", "-D", self.primary, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                             "--locale=C.UTF-8", check=False)
        if result.returncode != 0:
            raise SystemExit(f"initdb failed:\n{result.stdout}{result.stderr}")
        # Synchronous replication on the primary's command line only: the standby's copy of the
        # configuration must not make the promoted standby wait for a standby of its own.
        self.pg_ctl_start(self.primary, self.primary_port,
                          "-c wal_level=replica -c max_wal_senders=5"
                          + (f" -c synchronous_standby_names={STANDBY_NAME}" if self.synchronous else ""))
        # Committed locally: no standby exists yet to confirm them.
        self.psql(self.primary_port, "postgres", """
            CREATE ROLE taskserver LOGIN;
            CREATE DATABASE taskserver OWNER taskserver;""", local=True)
        result = as_postgres(f"{PG_BIN}/pg_basebackup", "-D", self.standby, "-R", "-X", "stream", "-c", "fast",
                             "-d", f"host=127.0.0.1 port={self.primary_port} user=postgres "
                                   f"application_name={STANDBY_NAME}", check=False)
        if result.returncode != 0:
            raise SystemExit(f"pg_basebackup failed:\n{result.stdout}{result.stderr}")
        with open(os.path.join(self.standby, "postgresql.auto.conf")) as f:
            conninfo = f.read()
        if f"application_name={STANDBY_NAME}" not in conninfo:
            raise SystemExit(f"the standby's primary_conninfo lacks application_name={STANDBY_NAME}")
        # A standby whose primary is gone retries every wal_retrieve_retry_interval (5 s by default)
        # and acted on `pg_ctl promote` only once that sleep ended (seen here: 0.2-5.1 s): 1 s keeps
        # the promotion's own duration out of the figures. What the servers take is measured from
        # the moment the promoted standby accepts writes (`pg_ctl promote -w` returned).
        self.pg_ctl_start(self.standby, self.standby_port, "-c wal_retrieve_retry_interval=1s")
        wanted = f"{STANDBY_NAME}|streaming|{'sync' if self.synchronous else 'async'}"
        sync = wait_until(lambda: self.psql(self.primary_port, "postgres",
                                            "SELECT application_name, state, sync_state FROM pg_stat_replication")
                          == wanted, 30, interval=0.1)
        if not sync:
            raise SystemExit(f"the standby is not streaming ({wanted}) within 30 s")
        settings = self.psql(self.primary_port, "postgres",
                             "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN "
                             "('synchronous_standby_names', 'synchronous_commit', 'fsync', 'wal_level')")
        return settings

    def psql(self, port, database, sql, local=False):
        env = dict(os.environ, PGOPTIONS="-c synchronous_commit=local") if local else None
        return subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", database,
                               "-v", "ON_ERROR_STOP=1", "-tAq"], input=sql, check=True, capture_output=True,
                              text=True, timeout=30, env=env).stdout.strip()

    @property
    def url(self):
        return (f"postgres://taskserver@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}/taskserver"
                "?target_session_attrs=read-write")

    def kill_primary(self, postmaster_only=False):
        """Every process of the primary, SIGKILL: the postmaster is stopped first (it forks nothing
        more), its children listed, then all are killed in one go. `postmaster_only`: the
        postmaster alone (its children notice its death and exit by themselves). Returns the time
        of the kill and the number of processes killed."""
        with open(os.path.join(self.primary, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        os.kill(postmaster, signal.SIGSTOP)
        children = pids_with_parent(postmaster)
        victims = [postmaster] if postmaster_only else children + [postmaster]
        self.killed = postmaster
        # All checked gone at the end, each by its pid and start time.
        self.killed_pids = [(pid, started(pid)) for pid in children + [postmaster]]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        return killed_at, len(victims)

    def walsender(self):
        """The primary's walsender process (None if it has none)."""
        with open(os.path.join(self.primary, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        for pid in pids_with_parent(postmaster):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"walsender" in f.read():
                        return pid
            except OSError:
                pass
        return None

    def promote(self):
        result = as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.standby, "-w", "-t", "30", "promote", check=False)
        if result.returncode != 0:
            raise SystemExit(f"pg_ctl promote failed:\n{result.stdout}{result.stderr}")

    def stop(self):
        """Stops what this script started: the standby (promoted or not) with pg_ctl; the killed
        primary's processes are reaped by init, checked gone, and its shared memory segment removed."""
        for data in self.started:
            if data == self.primary and self.killed is not None:
                continue
            if os.path.exists(os.path.join(data, "postmaster.pid")):
                as_postgres(f"{PG_BIN}/pg_ctl", "-D", data, "-m", "immediate", "-w", "-t", "30", "stop", check=False)
        if self.killed is not None:
            def left():
                return [pid for pid, start in self.killed_pids if start is not None and started(pid) == start]
            for pid in left():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_until(lambda: not left(), 10)
            try:  # line 7 of postmaster.pid: the System V segment's key and id (left behind by SIGKILL)
                with open(os.path.join(self.primary, "postmaster.pid")) as f:
                    shm_id = f.read().split("\n")[6].split()[1]
                subprocess.run(["ipcrm", "-m", shm_id], check=False, capture_output=True)
            except (OSError, IndexError):
                pass
        self.started = []


class Recorder:
    """The `http` tasks' target: counts each call per job as it arrives (the side effect happened),
    then answers after 0.1-0.5 s, so that some calls are in flight at the kill."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}  # job id -> [time.time() of each call]
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with recorder.lock:
                    recorder.calls.setdefault(body.get("job"), []).append(time.time())
                time.sleep(random.uniform(0.1, 0.5))
                payload = b'{"ok":true}'
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the server gave the call up (its run stopped): counted all the same

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 512
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/call"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def request(port, method, path, body=None, timeout=REQUEST_TIMEOUT):
    """(status, body, headers); raises OSError on a reset or a timeout."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null"), response.headers
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            parsed = json.loads(raw or b"null")
        except ValueError:
            parsed = raw.decode(errors="replace")
        return error.code, parsed, error.headers


def seconds(stamp):
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Mode:
    """One run: `count` servers on a fresh primary/standby pair."""

    def __init__(self, binary, count, promote_after, submitters, keep, synchronous=True, postmaster_only=False):
        self.binary = binary
        self.postmaster_only = postmaster_only
        self.synchronous = synchronous
        self.count = count
        self.promote_after = promote_after
        self.submitters = submitters
        self.keep = keep
        self.failures = []
        self.workdir = tempfile.mkdtemp(prefix=f"taskserver-failover-{count}-")
        os.chmod(self.workdir, 0o755)
        self.pair = PostgresPair(self.workdir, synchronous)
        self.servers = []   # (name, TestServer)
        self.recorder = None
        self.lock = threading.Lock()
        self.answers = []   # (server name, sent monotonic, answered monotonic, status, code, job id, n)
        self.readiness = {}  # server name -> [(monotonic, status)]
        self.stop_load = threading.Event()
        self.wall_offset = time.time() - time.monotonic()  # monotonic -> wall clock (event times)

    def check(self, condition, message):
        if condition:
            return
        if not self.synchronous:  # --async shows what is at risk: reported, not failed
            print(f"ASYNC [{self.count} server{'s' if self.count > 1 else ''}]: {message}", flush=True)
            return
        self.failures.append(message)
        print(f"FAIL [{self.count} server{'s' if self.count > 1 else ''}]: {message}", flush=True)

    def wall(self, monotonic):
        return monotonic + self.wall_offset

    # -- load ------------------------------------------------------------------------------------

    def job(self, n):
        # Most delays end during the outage; some (4-9 s) are still running when a server stops
        # acting on its jobs (3.5 s without renewing its lease) and are resumed once it is back.
        delay = random.randint(200, 3000) if random.random() < 0.7 else random.randint(4000, 9000)
        return {"labels": {"test": "failover"}, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": n}},
            {"type": "task", "id": "wait", "action": "delay", "params": {"ms": delay}},
            {"type": "task", "id": "call", "action": "http", "executor": "io",
             "params": {"method": "POST", "url": self.recorder.url, "body": {"job": "${job.id}", "n": n},
                        "timeoutMs": 20000}},
            {"type": "task", "id": "b", "action": "value", "params": {"value": "${tasks.a.result}"}},
        ]}}

    def submitter(self, name, port, seed):
        rng = random.Random(seed)
        while not self.stop_load.is_set():
            n = rng.randint(1, 10**9)
            sent = time.monotonic()
            try:
                status, body, headers = request(port, "POST", "/v1/jobs", self.job(n))
                code = body.get("code") if isinstance(body, dict) else None
                if status == 503 and not headers.get("retry-after"):
                    code = f"{code} without Retry-After"
                job_id = body.get("id") if status == 201 else None
            except OSError as error:
                status, code, job_id = None, repr(error), None
            answered = time.monotonic()
            with self.lock:
                self.answers.append((name, sent, answered, status, code, job_id, n))
            time.sleep(0.05 if status == 201 else 0.1)

    def probe(self, name, port):
        samples = self.readiness[name]
        while not self.stop_load.is_set():
            try:
                status, _, _ = request(port, "GET", "/readyz", timeout=5)
            except OSError as error:
                status = repr(error)
            samples.append((time.monotonic(), status))
            time.sleep(0.05)

    # -- the run ---------------------------------------------------------------------------------

    def run(self):
        started = time.monotonic()
        try:
            self.scenario()
        except SystemExit as error:
            self.check(False, str(error))
        finally:
            self.stop_load.set()
            self.stop_servers()
            self.pair.stop()
            if self.recorder:
                self.recorder.close()
        total = time.monotonic() - started
        label = f"{self.count} server{'s' if self.count > 1 else ''}"
        print(f"run time ({label}): {total:.1f} s", flush=True)
        if self.failures or self.keep:
            print(f"logs and data of the {label} run kept in {self.workdir}", flush=True)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return not self.failures

    def start_server(self, name, log_suffix=""):
        try:
            return TestServer(self.binary, ["--database", self.pair.url, "--node-name", name,
                                            "--executor", "default=16", "--executor", "io=64",
                                            "--log-level", "info"],
                              log=os.path.join(self.workdir, f"{name}{log_suffix}.log"), timeout=60)
        except ServerStartError as error:
            raise SystemExit(f"{name} did not start: {error}")

    def restart_stopped(self):
        """Asynchronous replication: a server that found the database behind what it saw committed
        stops (exit 70, a critical line) rather than write its jobs over others; started again here,
        as a supervisor would, it goes on from what the database holds."""
        for index, (name, server) in enumerate(self.servers):
            status = server.proc.poll()
            if status is None:
                continue
            lost = "lost commits" in server.log_text()
            self.check(False, f"{name} stopped with status {status}"
                              f"{' (its critical line: the database lost commits it saw acknowledged)' if lost else ''}"
                              "; started again")
            self.servers[index] = (name, self.start_server(name, "-restarted"))

    def stop_servers(self):
        for name, server in self.servers:
            status = server.stop(timeout=15)
            if status not in (0, None):
                print(f"{name} exited with status {status} on SIGTERM", flush=True)

    def scenario(self):
        label = f"{self.count} server{'s' if self.count > 1 else ''}"
        print(f"== failover with {label}{'' if self.synchronous else ', ASYNCHRONOUS replication'}", flush=True)
        settings = self.pair.start()
        print(f"primary on {self.pair.primary_port} ({settings}), {'' if self.synchronous else 'a'}synchronous standby "
              f"'{STANDBY_NAME}' on {self.pair.standby_port}", flush=True)
        print(f"--database {self.pair.url}", flush=True)
        self.recorder = Recorder()
        for i in range(self.count):
            name = f"n{i + 1}"
            self.servers.append((name, self.start_server(name)))
            self.readiness[name] = []
        for name, server in self.servers:
            ready = wait_until(lambda port=server.port: request(port, "GET", "/readyz", timeout=5)[0] == 200, 30,
                               interval=0.1)
            self.check(ready, f"{name}'s /readyz is 200 before the kill")
        threads = [threading.Thread(target=self.probe, args=(name, server.port), daemon=True)
                   for name, server in self.servers]
        threads += [threading.Thread(target=self.submitter, args=(name, server.port, 1000 * i + j), daemon=True)
                    for i, (name, server) in enumerate(self.servers) for j in range(self.submitters)]
        for thread in threads:
            thread.start()
        receiver = None
        if self.synchronous:
            time.sleep(WARM_UP)
        else:
            # A standby that lags (a slow link, a busy standby): the primary's walsender stopped for
            # the last second before the kill, so nothing more reaches the standby. Asynchronous
            # commits go on being acknowledged meanwhile.
            time.sleep(WARM_UP - 1.0)
            receiver = self.pair.walsender()
            if receiver:
                os.kill(receiver, signal.SIGSTOP)
            time.sleep(1.0)
        with self.recorder.lock:
            calls_before = sum(len(times) for times in self.recorder.calls.values())
        with self.lock:
            before = sum(1 for answer in self.answers if answer[3] == 201)
        self.check(before > 0 and calls_before > 0, f"jobs ran before the kill ({before} accepted, "
                                                    f"{calls_before} HTTP calls)")
        self.killed_at, victims = self.pair.kill_primary(self.postmaster_only)
        if receiver:
            print("the primary's walsender was stopped for the last 1 s before the kill (the standby lags)",
                  flush=True)
        print(f"killed the primary ({victims} processes, SIGKILL) after {WARM_UP:.0f} s of load, "
              f"{before} jobs accepted so far", flush=True)
        time.sleep(self.promote_after)
        promote_started = time.monotonic()
        self.pair.promote()
        self.promoted_at = time.monotonic()
        print(f"promoted the standby {promote_started - self.killed_at:.2f} s after the kill "
              f"(pg_ctl promote took {self.promoted_at - promote_started:.2f} s)", flush=True)
        back = wait_until(lambda: all(self.back(name) is not None and self.ready_again(name) is not None
                                      for name, _ in self.servers),
                          BACK_BOUND, interval=0.05)
        time.sleep(AFTER)
        self.stop_load.set()
        for thread in threads:
            thread.join(timeout=REQUEST_TIMEOUT + 5)
        self.check(back, f"every server answered a POST with 201 and /readyz with 200 within {BACK_BOUND:.0f} s "
                         "of the promotion")
        self.check_answers()
        self.check_readiness()
        if not self.synchronous:
            self.restart_stopped()
        self.check_jobs()
        for name, server in self.servers:
            self.check(server.proc.poll() is None, f"{name} is still running (exit {server.proc.poll()})")
        if self.failures:
            for name, server in self.servers:
                lines = [line for line in server.log_text().splitlines()
                         if any(word in line for word in ("error", "warning", "notice", "critical"))]
                print(f"--- {name}: its log's notices, warnings and errors (last 40)", flush=True)
                print("\n".join(lines[-40:]), flush=True)

    # -- measures --------------------------------------------------------------------------------

    def back(self, name):
        """When `name` first answered 201 to a POST sent after the kill (monotonic), or None."""
        with self.lock:
            times = [answered for server, sent, answered, status, _, _, _ in self.answers
                     if server == name and status == 201 and sent > self.killed_at]
        return min(times) if times else None

    def ready_again(self, name):
        """The first /readyz 200 of `name` after a 503 that followed the kill (monotonic), or None."""
        seen_down = False
        for at, status in list(self.readiness[name]):
            if at <= self.killed_at:
                continue
            if status != 200:
                seen_down = True
            elif seen_down:
                return at
        return None

    def went_down(self, name):
        return next((at for at, status in list(self.readiness[name]) if at > self.killed_at and status != 200), None)

    # -- checks ----------------------------------------------------------------------------------

    def check_answers(self):
        counts = {}
        wrong, premature = [], []
        slowest = 0.0
        for name, sent, answered, status, code, job_id, _ in self.answers:
            key = f"{status} {code}" if status != 201 else "201"
            counts[key] = counts.get(key, 0) + 1
            slowest = max(slowest, answered - sent)
            if status != 201 and not (status == 503 and code in ("store.unavailable", "store.busy")):
                wrong.append(f"{name}: {status} {code} (sent {sent - self.killed_at:+.2f} s from the kill)")
            if status == 201 and sent > self.killed_at and answered < self.promoted_at:
                premature.append(f"{name}: {job_id} answered {answered - self.killed_at:+.2f} s")
        print("POST /v1/jobs answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), flush=True)
        slow = sorted((answered - sent, sent - self.killed_at, status) for _, sent, answered, status, _, _, _
                      in self.answers if answered - sent > 1.0)
        print(f"slowest POST answer: {slowest:.2f} s; {len(slow)} took over 1 s"
              + (f" (sent {min(s[1] for s in slow):+.2f} to {max(s[1] for s in slow):+.2f} s from the kill, "
                 f"answered {sorted({str(s[2]) for s in slow})})" if slow else ""), flush=True)
        self.check(not wrong, f"every POST is answered 201 or 503 store.* with Retry-After ({len(wrong)} others: "
                              f"{wrong[:5]})")
        self.check(not premature, f"no POST sent after the kill is answered 201 before the promotion "
                                  f"({len(premature)}: {premature[:5]})")

    def check_readiness(self):
        for name, _ in self.servers:
            samples = list(self.readiness[name])
            down = self.went_down(name)
            ready = self.ready_again(name)
            back = self.back(name)
            between = {str(status) for at, status in samples if self.killed_at + 1.0 < at < self.promoted_at}
            self.check(between == {"503"}, f"{name}'s /readyz from 1 s after the kill to the promotion: "
                                           f"{sorted(between)} (wanted only 503)")
            self.check(ready is not None, f"{name}'s /readyz is 200 again after the failover")
            self.check(back is not None, f"{name} answers a POST with 201 again after the failover")
            if ready is None or back is None:
                continue
            # Ready means writable: no POST sent once /readyz said 200 again (plus 1 s) is refused.
            refused = [(sent - self.killed_at, status, code) for server, sent, _, status, code, _, _ in self.answers
                       if server == name and sent > ready + 1.0 and status != 201]
            self.check(not refused, f"{name}: POSTs refused after its /readyz was 200 again: {refused[:5]}")
            print(f"{name}: /readyz 503 from {down - self.killed_at:+.2f} s, 200 again at "
                  f"{ready - self.killed_at:+.2f} s ({ready - self.promoted_at:+.2f} s from the promotion); "
                  f"first 201 to a POST sent after the kill at {back - self.killed_at:+.2f} s "
                  f"({back - self.promoted_at:+.2f} s from the promotion)", flush=True)

    def read_job(self, job_id, deadline):
        """The job once terminal (long-polled through the servers in turn), its tasks and events."""
        port = random.choice(self.servers)[1].port
        job = None
        while True:  # at least one read, also once the deadline has passed
            wait = max(0, min(5000, int((deadline - time.monotonic()) * 1000)))
            try:
                status, job, _ = request(port, "GET", f"/v1/jobs/{job_id}?waitMs={wait}")
            except OSError:
                status = None
            if status == 200 and job.get("state") in TERMINAL or status == 404 or time.monotonic() >= deadline:
                break
            if status != 200:
                time.sleep(0.2)
        _, tasks, _ = request(port, "GET", f"/v1/jobs/{job_id}/tasks")
        _, events, _ = request(port, "GET", f"/v1/jobs/{job_id}/events?limit=10000")
        return job, tasks, events

    def check_jobs(self):
        accepted = {job_id: (name, sent, n) for name, sent, _, status, _, job_id, n in self.answers if status == 201}
        # Asynchronous replication leaves jobs that never end (their last commits were lost): a
        # shorter wait there.
        deadline = time.monotonic() + (90 if self.synchronous else 20)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            read = dict(zip(accepted, pool.map(lambda job_id: self.read_job(job_id, deadline), accepted)))
        back_wall = {name: self.wall(self.back(name) or time.monotonic()) for name, _ in self.servers}
        with self.recorder.lock:
            calls = {job_id: list(times) for job_id, times in self.recorder.calls.items()}
        unfinished, wrong, gaps, twice, unrecorded, unexplained = [], [], [], [], [], []
        reruns = {}  # task id -> count of tasks started again (an attempt in flight at the failover)
        repeated_calls = 0
        for job_id, (name, sent, n) in accepted.items():
            job, tasks, events = read[job_id]
            if not isinstance(job, dict) or job.get("state") not in TERMINAL:
                unfinished.append(f"{job_id} ({name}): {job.get('state') if isinstance(job, dict) else job}")
                continue
            if job["state"] != "succeeded" or job.get("result") != n:
                wrong.append(f"{job_id}: {job['state']} {job.get('result')!r} (wanted {n})")
            items = events.get("items", []) if isinstance(events, dict) else []
            seqs = [e["seq"] for e in items]
            if seqs != list(range(1, len(seqs) + 1)):
                gaps.append(f"{job_id}: {seqs}")
            for kind in ("job.started", "job.succeeded"):
                count = sum(1 for e in items if e["type"] == kind)
                if count != 1:
                    twice.append(f"{job_id}: {count} {kind}")
            nodes = {node["id"]: node for node in (tasks.get("items", []) if isinstance(tasks, dict) else [])}
            for task_id in ("a", "wait", "call", "b"):
                mine = [e for e in items if e.get("taskId") == task_id]
                starts = [seconds(e["time"]) for e in mine if e["type"] == "task.started"]
                ends = [e for e in mine if e["type"] in ("task.succeeded", "task.failed", "task.cancelled",
                                                         "task.skipped", "task.retrying")]
                attempts = nodes.get(task_id, {}).get("attempts")
                if len(ends) != 1 or ends[0]["type"] != "task.succeeded":
                    twice.append(f"{job_id}/{task_id}: terminal events {[e['type'] for e in ends]}")
                if attempts != len(starts):
                    twice.append(f"{job_id}/{task_id}: attempts {attempts}, {len(starts)} task.started")
                if len(starts) > 1:
                    # Allowed: the earlier attempt began before its server answered again (in flight
                    # while the database was away) — and it never ended (one terminal event, above).
                    if all(start <= back_wall[name] + 0.5 for start in starts[:-1]):
                        reruns[task_id] = reruns.get(task_id, 0) + 1
                    else:
                        unexplained.append(f"{job_id}/{task_id}: started at "
                                           f"{[round(s - self.wall(self.killed_at), 2) for s in starts]} s from "
                                           f"the kill")
                if task_id == "call":
                    made = len(calls.get(job_id, []))
                    if made > len(starts) or made == 0:
                        unrecorded.append(f"{job_id}: {made} HTTP calls, {len(starts)} task.started")
                    repeated_calls += max(0, made - 1)
        # Finished on the new primary: the same set, read from `jobs` on the promoted standby.
        rows = self.pair.psql(self.pair.standby_port, "taskserver",
                              "SELECT id, state FROM jobs WHERE id = ANY("
                              f"string_to_array('{','.join(accepted)}', ','))")
        stored = dict(line.split("|", 1) for line in rows.splitlines() if line)
        on_new_primary = sum(1 for state in stored.values() if state == "succeeded")
        lost = [job_id for job_id in accepted if job_id not in stored]
        recovery = self.pair.psql(self.pair.standby_port, "postgres", "SELECT pg_is_in_recovery()")
        running_at_kill = sum(1 for job_id, (name, sent, n) in accepted.items()
                              if sent < self.killed_at and read[job_id][0]
                              and isinstance(read[job_id][0], dict)
                              and read[job_id][0].get("finishedAt")
                              and seconds(read[job_id][0]["finishedAt"]) > self.wall(self.killed_at))
        self.check(not lost, f"no job answered 201 is missing on the promoted standby ({len(lost)} are: {lost[:5]}, "
                             f"sent {sorted(round(accepted[j][1] - self.killed_at, 2) for j in lost)[:5]} s from "
                             f"the kill)")
        self.check(not unfinished, f"every job answered 201 ends ({len(unfinished)} did not: "
                                   f"{unfinished[:5]})")
        self.check(not wrong, f"every job answered 201 succeeds with its result ({len(wrong)}: {wrong[:5]})")
        self.check(recovery == "f" and on_new_primary == len(accepted),
                   f"the promoted standby (in recovery: {recovery}) holds all {len(accepted)} accepted jobs as "
                   f"succeeded ({on_new_primary})")
        self.check(not gaps, f"event seqs are 1…N ({len(gaps)}: {gaps[:3]})")
        self.check(not twice, f"nothing ran twice: one start per job, one terminal event per task, attempts = "
                              f"task.started ({len(twice)}: {twice[:5]})")
        self.check(not unexplained, f"no task started again except an attempt in flight at the failover "
                                    f"({len(unexplained)}: {unexplained[:5]})")
        self.check(not unrecorded, f"every HTTP call is a recorded attempt ({len(unrecorded)}: {unrecorded[:5]})")
        before = sum(1 for _, (_, sent, _) in accepted.items() if sent < self.killed_at)
        print(f"jobs checked: {len(accepted)} answered 201 ({before} sent before the kill, "
              f"{running_at_kill} of them unfinished at the kill), {on_new_primary} succeeded in `jobs` on the "
              f"promoted standby, {len(lost)} missing there", flush=True)
        print("tasks started again (an attempt in flight at the failover, at-least-once): "
              + (", ".join(f"{task}: {count}" for task, count in sorted(reruns.items())) or "none")
              + f"; HTTP calls made twice: {repeated_calls}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--servers", default="1,3", help="1, 3 or 1,3 (default: both, one after the other)")
    parser.add_argument("--promote-after", type=float, default=5.0,
                        help="seconds from the kill to pg_ctl promote (default 5)")
    parser.add_argument("--submitters", type=int, default=3, help="submitting threads per server (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data directories")
    parser.add_argument("--postmaster-only", action="store_true",
                        help="SIGKILL the primary's postmaster alone (its backends exit when they notice)")
    parser.add_argument("--async", dest="asynchronous", action="store_true",
                        help="asynchronous replication instead (no synchronous_standby_names): shows what is at "
                             "risk; its findings are reported, not failed")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("failover-test.py runs PostgreSQL as the postgres user with runuser: run it as root")
    modes = [int(m) for m in args.servers.split(",")]
    if any(m not in (1, 3) for m in modes):
        raise SystemExit("--servers: 1, 3 or 1,3")

    def interrupted(number, frame):
        raise SystemExit(f"interrupted by signal {number}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    random.seed(int(os.environ.get("FAILOVER_TEST_SEED", "43")))
    results = []
    for count in modes:
        mode = Mode(args.binary, count, args.promote_after, args.submitters, args.keep, not args.asynchronous,
                    args.postmaster_only)
        atexit.register(mode.pair.stop)  # also on an exception escaping run()
        results.append(mode.run())
    if not all(results):
        print("failover test: FAILED", flush=True)
        sys.exit(1)
    if args.asynchronous:
        print("asynchronous replication: the ASYNC lines above are what it put at risk (reported, not failed)")
        return
    print("failover test passed", flush=True)


main()
