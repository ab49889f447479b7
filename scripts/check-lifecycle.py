#!/usr/bin/env python3
"""Checks the stopping server against SPEC §5 with the real binary.

usage: check-lifecycle.py PATH/TO/taskserver

1. A long-poll that outlasts --shutdown-grace: after SIGTERM, readiness answers 503 on an open
   keep-alive connection, a new job gets 503 server.draining, and the process exits 0 within the
   grace period even though the long-poll still hangs (its connection is closed).
2. A long-poll that ends within the grace: it gets its normal 200 answer, and the process exits 0
   as soon as it has, not at the end of the grace.
3. A second signal exits at once.
4. Invalid configuration fails at start-up with status 64 and a message naming the setting.
5. A full descriptor table (a hard limit of 64 descriptors, --max-connections 1000, 150 idle
   connections): the server warns at start, the listener backs off instead of spinning (its CPU
   over 2 s), says so once, and answers again once descriptors are free.

The servers listen on a port of their choosing (--port 0, read from the log: scripts/testserver.py)
and log at debug level, so the script can wait for the server to have received the long-poll
("request received") rather than sleep and hope.
"""
import http.client
import json
import os
import resource
import socket
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
JOB = json.dumps({"graph": {"type": "task", "action": "delay", "params": {"ms": 600000}}})


def start(*args):
    try:
        server = TestServer(BIN, ["--memory", "--log-level", "debug", *args], timeout=20)
    except ServerStartError as error:
        fail(f"server did not start: {error}")
    return server.proc, server.port, server


def fail(message, server=None):
    print("FAIL:", message)
    if server is not None:
        print(server.log_text())
    sys.exit(1)


def wait_received(server, path):
    """Waits until the server has received the request for `path` (its debug log says so)."""
    if server.wait_for_log(lambda line: "request received" in line and f"http.target={path}" in line, 10) is None:
        fail(f"the server never logged receiving GET {path}", server)


def wait_draining(conn, server, limit):
    """Asks /readyz on the keep-alive connection `conn` until the SIGTERM just sent has taken
    effect (503), within `limit` seconds; returns that response and its JSON body. Each 200 before
    it keeps the connection open, so the 503 is still an answer on a connection opened before the
    signal."""
    deadline = time.monotonic() + limit
    while True:
        conn.request("GET", "/readyz")
        r = conn.getresponse()
        body = json.loads(r.read())
        if r.status != 200 or time.monotonic() >= deadline:
            return r, body
        if (r.getheader("connection") or "").lower() == "close":
            # The drain began between this answer's routing and its writing: a ready answer that
            # closes its connection, as a draining server's answers must. The listener is closed by
            # now, so there is no new connection to ask again on; the caller accepts it.
            return r, body
        time.sleep(0.01)  # a bounded poll of /readyz: the signal is handled asynchronously


def submit(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("POST", "/v1/jobs", body=JOB, headers={"content-type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    assert r.status == 201, (r.status, body)
    return body["id"]


class LongPoll(threading.Thread):
    def __init__(self, port, job, wait_ms):
        super().__init__(daemon=True)
        self.port, self.job, self.wait_ms = port, job, wait_ms
        self.outcome = None

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            c.request("GET", f"/v1/jobs/{self.job}?waitMs={self.wait_ms}")
            r = c.getresponse()
            self.outcome = (r.status, json.loads(r.read()).get("state"))
        except (OSError, http.client.HTTPException) as error:
            self.outcome = ("closed", type(error).__name__)


def keep_alive(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/healthz")
    c.getresponse().read()
    return c


def wait_exit(proc, limit):
    start = time.monotonic()
    try:
        status = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None, time.monotonic() - start
    return status, time.monotonic() - start


def hanging_long_poll():
    grace = 2.0
    proc, port, server = start("--shutdown-grace", "2s")
    job = submit(port)
    poll = LongPoll(port, job, 60000)
    poll.start()
    ready_conn, submit_conn = keep_alive(port), keep_alive(port)
    wait_received(server, f"/v1/jobs/{job}?waitMs=…")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    r, body = wait_draining(ready_conn, server, grace / 2)
    closes = (r.getheader("connection") or "").lower() == "close"
    if (r.status, body.get("status")) not in ((503, "draining"), (200, "ready")) or (r.status == 200 and not closes):
        fail(f"/readyz while draining: {r.status} {body}", server)
    if not closes:
        fail(f"a draining server should close keep-alive connections after answering; /readyz answered {r.status} "
             f"{body} with headers {dict(r.getheaders())}", server)
    submit_conn.request("POST", "/v1/jobs", body=JOB, headers={"content-type": "application/json"})
    r = submit_conn.getresponse()
    body = json.loads(r.read())
    if r.status != 503 or body.get("code") != "server.draining":
        fail(f"new job while draining: {r.status} {body}", server)
    status, _ = wait_exit(proc, grace + 5)
    elapsed = time.monotonic() - sent
    if status != 0:
        fail(f"exit status {status} (expected 0)", server)
    if elapsed > grace + 0.5:
        fail(f"took {elapsed:.2f}s to exit, grace is {grace}s", server)
    poll.join(5)
    if poll.outcome is None or poll.outcome[0] != "closed":
        fail(f"the hanging long-poll should have been cut, got {poll.outcome}", server)
    print(f"✔ hanging long-poll: readyz 503, new job 503 server.draining, exit 0 after {elapsed:.2f}s (grace {grace}s)")


def finishing_long_poll():
    proc, port, server = start("--shutdown-grace", "20s")
    job = submit(port)
    poll = LongPoll(port, job, 1500)
    poll.start()
    wait_received(server, f"/v1/jobs/{job}?waitMs=…")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status, _ = wait_exit(proc, 25)
    elapsed = time.monotonic() - sent
    poll.join(5)
    if status != 0:
        fail(f"exit status {status} (expected 0)", server)
    if poll.outcome != (200, "running"):
        fail(f"the long-poll in flight should have had its answer, got {poll.outcome}", server)
    if not 1.0 <= elapsed < 5:
        fail(f"exited after {elapsed:.2f}s; expected right after the long-poll ended (~1.3s)", server)
    print(f"✔ long-poll in flight answered 200 during the drain; exit 0 after {elapsed:.2f}s (grace 20s)")


def second_signal():
    proc, port, server = start("--shutdown-grace", "60s")
    job = submit(port)
    poll = LongPoll(port, job, 60000)
    poll.start()
    wait_received(server, f"/v1/jobs/{job}?waitMs=…")
    proc.send_signal(signal.SIGTERM)
    # The first signal has been handled once the server says it drains; the second comes after.
    if server.wait_for_log(lambda line: "taskserver draining" in line, 10) is None:
        fail("no 'taskserver draining' line after SIGTERM", server)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    status, _ = wait_exit(proc, 5)
    elapsed = time.monotonic() - sent
    if status is None:
        fail("a second signal did not stop the server", server)
    if status == 0:
        fail("a second signal cuts the drain short and should exit non-zero", server)
    print(f"✔ second signal: exit {status} after {elapsed:.2f}s")


def invalid_configuration():
    cases = [
        (["--shutdown-grace", "soon"], {}, "--shutdown-grace"),
        ([], {"TASKSERVER_SHUTDOWN_GRACE": "5 minutes"}, "--shutdown-grace"),
        ([], {"TASKSERVER_PORT": "http"}, "TASKSERVER_PORT"),
        ([], {"TASKSERVER_MEMORY": "maybe"}, "TASKSERVER_MEMORY"),
        ([], {"TASKSERVER_LOG_FORMAT": "xml"}, "--log-format"),
        (["--executor", "io=many"], {}, "--executor"),
        (["--executor", "io=4,rate=1/s,rate=2/s"], {}, "--executor"),
        # A name among servers sharing a database, given without one: it would do nothing.
        (["--node-name", "n1"], {}, "--node-name"),
        # A key no Authorization: Bearer header can carry (a control character, a space) would lock
        # the API; the message names the setting, never the key.
        (["--api-key", "0123456789abcdef\x01secret"], {}, "--api-key"),
        ([], {"TASKSERVER_API_KEYS": "0123456789abcdef secret"}, "--api-key"),
    ]
    for args, extra, name in cases:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TASKSERVER_PORT": "0", **extra}
        with tempfile.TemporaryDirectory() as cwd:
            try:
                r = subprocess.run([BIN, "serve", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=20)
            except subprocess.TimeoutExpired:
                fail(f"{args} {extra}: the server started; expected a configuration error")
        if r.returncode != 64 or name not in r.stderr:
            fail(f"{args} {extra}: status {r.returncode}, stderr {r.stderr!r}; expected 64 naming {name}")
        if "secret" in r.stderr:
            fail(f"{args} {extra}: the message quotes the key: {r.stderr!r}")
    print(f"✔ {len(cases)} invalid configurations refused at start-up with status 64, naming the setting")


def process_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descriptor_exhaustion():
    limit = 64

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    try:
        server = TestServer(BIN, ["--memory", "--max-connections", "1000"], timeout=20, preexec_fn=low_limit)
    except ServerStartError as error:
        fail(f"server did not start: {error}")
    if "exceeds what the descriptor limit can hold" not in server.log_text():
        fail("no warning at start that --max-connections exceeds the descriptor limit", server)
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(150)]
    try:
        # The server accepts what its table holds; the rest wait in the backlog. Over the next two
        # seconds a listener that retries a failing accept spins a core; one that backs off idles.
        time.sleep(0.5)
        before = process_cpu_seconds(server.proc.pid)
        time.sleep(2)
        used = process_cpu_seconds(server.proc.pid) - before
        if used > 0.4:
            fail(f"the server used {used:.2f} s of CPU in 2 s with its descriptor table full", server)
        full = server.log_text().count("the descriptor table is full")
        if full != 1:
            fail(f"the full table was logged {full} times; expected once for the episode", server)
    finally:
        for connection in idle:
            connection.close()
    # Descriptors are free again: a new client is answered.
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            fail("the server did not accept again after descriptors were freed", server)
        time.sleep(0.1)
    server.proc.terminate()
    server.proc.wait(10)
    print(f"✔ descriptor table full: warned at start, {used:.2f} s CPU in 2 s, logged once, answering again after")


hanging_long_poll()
finishing_long_poll()
second_signal()
invalid_configuration()
descriptor_exhaustion()
print("lifecycle checks passed")
