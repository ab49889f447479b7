#!/usr/bin/env python3
"""The PostgreSQL store against a real PostgreSQL 15 (scripts/postgres.sh), from outside.

    TEST_STORE_URL=postgres://… TEST_STORE_DIR=DIR python3 scripts/postgres-test.py PATH/TO/taskserver

1. Start-up: a malformed URL, a URL that is not postgres://, a wrong password, a closed port, an
   unreachable address, a missing database, a schema newer than the server knows and --database
   with --memory each end the process with exit status 64 within a bound, with a message that
   names the setting and never the password; a password from --database-password-file works; a
   second server on the host under a name a live one holds is refused (exit 64, --node-name),
   and one killed and started again under its name starts at once.
2. PostgreSQL restarted under load (`postgres.sh restart DIR`): 8 threads submit short jobs while
   the database stops and starts again. Every answer is a 201 or a 503 (`store.unavailable` /
   `store.busy`, with Retry-After) — no 500, no lost connection; /readyz answers 503 while the
   database is away and 200 after; a recently finished job is still read meanwhile; every job that got a 201 finishes (nothing accepted is lost);
   the server never exits.
Exit status 0 when every check passes.
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer  # noqa: E402

BIN = sys.argv[1]
URL = os.environ["TEST_STORE_URL"]
DIR = os.environ["TEST_STORE_DIR"]
HERE = os.path.dirname(os.path.abspath(__file__))
PORT = URL.split("@", 1)[1].split("/", 1)[0].split(":")[1]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)
    else:
        print("ok:", message, flush=True)


def psql(sql):
    return subprocess.run(["psql", URL, "-v", "ON_ERROR_STOP=1", "-tAqc", sql], check=True,
                          capture_output=True, text=True).stdout.strip()


def schema_url(name):
    psql(f"DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}")
    separator = "&" if "?" in URL else "?"
    return f"{URL}{separator}options=-csearch_path%3D{name}"


def start_up_refused(name, args, secret=None, bound=15.0):
    started = time.time()
    try:
        result = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=bound + 5)
    except subprocess.TimeoutExpired:
        check(False, f"{name}: still running after {bound + 5} s")
        return
    took = time.time() - started
    output = result.stdout + result.stderr
    check(result.returncode == 64, f"{name}: exit status 64 (got {result.returncode}) in {took:.2f} s: {output.strip()[-300:]}")
    check(took <= bound, f"{name}: refused within {bound} s")
    check("--database" in output, f"{name}: the message names --database")
    if secret:
        check(secret not in output, f"{name}: the password is not printed")


def start_up():
    secret = "s3cret-pw-9f2"
    start_up_refused("malformed URL", ["--database", f"postgres://taskserver:{secret}@127.0.0.1:notaport/taskserver"], secret)
    start_up_refused("not a postgres URL", ["--database", f"mysql://taskserver:{secret}@127.0.0.1/taskserver"], secret)
    start_up_refused("wrong password", ["--database", f"postgres://taskserver_password:{secret}@127.0.0.1:{PORT}/taskserver"],
                     secret)
    start_up_refused("closed port", ["--database", f"postgres://taskserver:{secret}@127.0.0.1:1/taskserver"], secret)
    start_up_refused("unreachable address",
                     ["--database", f"postgres://taskserver:{secret}@10.255.255.1:5432/taskserver?connect_timeout=3"], secret)
    start_up_refused("missing database", ["--database", f"postgres://taskserver:{secret}@127.0.0.1:{PORT}/no_such_db"], secret)
    start_up_refused("--database with --memory", ["--database", URL, "--memory"])
    newer = schema_url("startup_newer")
    # A schema a newer server migrated (version 99).
    first = TestServer(BIN, ["--database", newer], log="/tmp/postgres-test-newer.log", timeout=30)
    first.stop(timeout=30)
    psql("INSERT INTO startup_newer.taskserver_migrations (version, server_version) VALUES (99, '99.0.0')")
    result = subprocess.run([BIN, "serve", "--port", "0", "--database", newer], capture_output=True, text=True, timeout=30)
    check(result.returncode == 64 and "99" in result.stderr,
          f"a schema newer than the server: exit 64 with the versions ({result.returncode}: {result.stderr.strip()[-200:]})")
    # The right password, from a file.
    password_file = "/tmp/postgres-test-password"
    with open(password_file, "w") as f:
        f.write("right-password\n")
    schema_url("startup_file")  # owned by taskserver, whose rights taskserver_password has
    try:
        server = TestServer(BIN, ["--database", f"postgres://taskserver_password@127.0.0.1:{PORT}/taskserver?"
                                  f"options=-csearch_path%3D{'startup_file'}", "--database-password-file", password_file],
                            log="/tmp/postgres-test-file.log", timeout=30)
        status, _ = request(server.port, "GET", "/readyz")
        check(status == 200, f"the password from --database-password-file: ready ({status})")
        server.stop(timeout=30)
    except ServerStartError as error:
        check(False, f"the password from --database-password-file: the server did not start: {error}")
    node_names()


def node_names():
    """Two servers on one host under one name (both without --node-name take the host name): the
    second is refused — exit 64 naming --node-name — instead of fencing the first (#41); the first
    keeps answering. A server killed and started again under its name takes its row at once."""
    database = schema_url("startup_names")
    for explicit in ([], ["--node-name", "same-name"]):
        label = "an explicit --node-name" if explicit else "the default node name"
        first = TestServer(BIN, ["--database", database, *explicit], log="/tmp/postgres-test-names.log", timeout=30)
        result = subprocess.run([BIN, "serve", "--port", "0", "--database", database, *explicit],
                                capture_output=True, text=True, timeout=30)
        check(result.returncode == 64 and "--node-name" in result.stderr,
              f"a second server under {label}: exit 64 naming --node-name ({result.returncode}: "
              f"{result.stderr.strip()[-300:]})")
        status, _ = request(first.port, "POST", "/v1/jobs", {"graph": {"type": "task", "id": "t", "action": "value"}})
        check(status == 201, f"the first server under {label} still stores jobs ({status})")
        first.proc.kill()
        first.proc.wait()
        started = time.time()
        try:
            again = TestServer(BIN, ["--database", database, *explicit], log="/tmp/postgres-test-names.log", timeout=30)
            check(time.time() - started < 10, f"restarted under {label} after SIGKILL: started at once")
            again.stop(timeout=30)
        except ServerStartError as error:
            check(False, f"restarted under {label} after SIGKILL: did not start: {error}")


def request(port, method, path, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        body = json.loads(error.read() or b"null")
        if error.code == 503 and not error.headers.get("retry-after"):
            body = {"code": "503 without Retry-After"}
        return error.code, body


def restart_under_load():
    url = schema_url("restart_load")
    server = TestServer(BIN, ["--database", url, "--executor", "default=8"], log="/tmp/postgres-test-restart.log", timeout=30)
    port = server.port
    accepted, refused, wrong = [], [], []
    lock = threading.Lock()
    stop = threading.Event()
    readiness = []

    def submitter(n):
        i = 0
        while not stop.is_set():
            i += 1
            job = {"labels": {"t": str(n)}, "graph": {"type": "series", "id": "s", "steps": [
                {"type": "task", "id": "a", "action": "delay", "params": {"ms": 20}},
                {"type": "task", "id": "b", "action": "value", "params": {"value": i}}]}}
            try:
                status, body = request(port, "POST", "/v1/jobs", job, timeout=30)
            except Exception as error:  # a reset or a timeout: not allowed
                with lock:
                    wrong.append(f"submit: {error!r}")
                time.sleep(0.05)
                continue
            with lock:
                if status == 201:
                    accepted.append((body["id"], i))
                elif status == 503 and body.get("code") in ("store.unavailable", "store.busy"):
                    refused.append(body["code"])
                else:
                    wrong.append(f"submit: {status} {body}")
            if status == 503:
                time.sleep(0.05)

    def probe():
        while not stop.is_set():
            try:
                status, _ = request(port, "GET", "/readyz", timeout=5)
                readiness.append((time.time(), status))
            except Exception as error:
                readiness.append((time.time(), repr(error)))
            time.sleep(0.05)

    threads = [threading.Thread(target=submitter, args=(n,)) for n in range(8)] + [threading.Thread(target=probe)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    with lock:
        finished_id = accepted[0][0]
    status, job = request(port, "GET", f"/v1/jobs/{finished_id}?waitMs=5000")
    check(status == 200 and job["state"] == "succeeded", f"a job finished before the restart ({status})")
    down = time.time()
    subprocess.run(["bash", os.path.join(HERE, "postgres.sh"), "stop", DIR], check=True)
    time.sleep(1)
    status, job = request(port, "GET", f"/v1/jobs/{finished_id}")
    check(status == 200 and job.get("state") == "succeeded",
          f"a recently finished job is still read while the database is away ({status})")
    time.sleep(1)
    subprocess.run(["bash", os.path.join(HERE, "postgres.sh"), "start", DIR], check=True, capture_output=True)
    up = time.time()
    time.sleep(4)
    stop.set()
    for thread in threads:
        thread.join()
    check(server.proc.poll() is None, "the server is still running")
    check(not wrong, f"every answer is a 201 or a 503 store.* with Retry-After ({len(wrong)} others: {wrong[:3]})")
    print(f"  {len(accepted)} jobs accepted, {len(refused)} refused with 503 while the database was away", flush=True)
    # Not required to be > 0: a submit queued behind the commit that found the database gone waits
    # for the reconnection (docs/postgresql.md), so when all eight submitters' inserts were queued there, none
    # of them sees a 503 (one CI run: 0 of 3,340; another: 180 of 3,343). What must hold is above
    # and below: only 201s and 503s, readiness 503 while away, and nothing accepted lost.
    during = [status for at, status in readiness if down + 0.5 < at < up]
    check(503 in during, f"/readyz answered 503 while the database was away ({sorted(set(map(str, during)))})")
    check(readiness and readiness[-1][1] == 200, f"/readyz answers 200 after ({readiness[-1][1] if readiness else None})")
    # Nothing accepted is lost: every job finishes with its value.
    lost = []
    deadline = time.time() + 60
    for job_id, value in accepted:
        while True:
            status, job = request(port, "GET", f"/v1/jobs/{job_id}?waitMs=5000", timeout=30)
            if status == 200 and job["state"] in ("succeeded", "failed", "cancelled"):
                if job["state"] != "succeeded" or job.get("result") != value:
                    lost.append(f"{job_id}: {job['state']} {job.get('result')} (wanted {value})")
                break
            if time.time() > deadline:
                lost.append(f"{job_id}: {status} {job.get('state') if isinstance(job, dict) else job}")
                break
    check(not lost, f"every accepted job ({len(accepted)}) finished with its result ({len(lost)} did not: {lost[:3]})")
    server.stop(timeout=30)


start_up()
restart_under_load()
print(f"postgres test: {len(failures)} failures")
sys.exit(1 if failures else 0)
