#!/usr/bin/env python3
"""Crash test of the durable store: the real server binary, killed with SIGKILL, restarted.

    python3 scripts/crash-test.py PATH/TO/taskserver

Three rounds on one data directory (so later rounds also recover jobs recovered before):
  1. 224 jobs (delays, awaits, parallel failures, delayed starts up to 12 s out) submitted at
     once; some awaits completed; the server is killed mid-flight.
  2. the same, killed sooner (while most jobs are in their first steps).
  3. a burst of small submissions from 8 threads, killed in the middle of it.
After each restart the script completes the awaits still open and checks that every job that got
a 201 exists and reaches its expected terminal state with the expected result, that no finished
node ran twice (a leaf's `attempts` equals its `task.started` events and it has at most one
terminal event), that a delayed job started once and not before its `runAt`, and that awaits
completed before the kill stay completed with their result.
Jobs with delays and awaits also have a webhook to a local receiver that refuses every delivery
(503) until the first kill: the deliveries queued before it must arrive after the restart.
Each start of the server takes a port of its choosing (--port 0, read from its log by
scripts/testserver.py), so a restarted server may listen elsewhere: the script follows it.
With TEST_STORE_URL set (a PostgreSQL database, scripts/postgres.sh), the server keeps its jobs
there, in a schema of its own, instead of a SQLite file.
Exit status 0 when every check passes.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer  # noqa: E402
from webhook_recorder import WebhookRecorder  # noqa: E402

BIN = sys.argv[1]
STORE_URL = os.environ.get("TEST_STORE_URL", "")
random.seed(7)
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


class Server:
    def __init__(self, data):
        self.data = data
        log = os.path.join(os.path.dirname(os.path.dirname(data)), "server.log")
        try:
            # A restart on the same data may listen on another port: this object has the new one.
            self.server = TestServer(BIN, store_args(data) + ["--executor", "default=8"], log=log, timeout=60)
        except ServerStartError as error:
            raise SystemExit(f"server did not start: {error}")
        self.port = self.server.port
        self.proc = self.server.proc
        status, body = self.request("GET", "/healthz")
        if status != 200:
            raise SystemExit(f"server listens but /healthz answered {status} {body}; see {log}")

    def request(self, method, path, body=None, headers=None, timeout=70):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def kill(self):
        self.server.kill()

    def stop(self):
        status = self.server.stop(timeout=30)
        check(status == 0, f"server exited with {status} on SIGTERM")

    def wait_task_running(self, job_id, task_id, timeout=20):
        """Waits until the node is running (True), or it is past that or `timeout` passes (False).
        No polling interval: between two reads of the node it long-polls the job's events, and a
        node changes state only with an event."""
        deadline = time.monotonic() + timeout
        after = 0
        while True:
            status, node = self.request("GET", f"/v1/jobs/{job_id}/tasks/{task_id}")
            if status != 200 or node["state"] != "pending":
                return status == 200 and node["state"] == "running"
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # The first pass (after=0) returns at once; later ones wait for the job's next event.
            _, page = self.request("GET", f"/v1/jobs/{job_id}/events?after={after}&waitMs={int(min(left, 30) * 1000)}")
            after = max([after] + [e["seq"] for e in page.get("items", [])])


def make_job(kind, n):
    """A job and what it must end as: (job, state, result or error code)."""
    if kind == "delay":
        ms = random.randint(200, 1500)
        job = {"labels": {"kind": kind}, "input": n, "webhook": WEBHOOK, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": n}},
            {"type": "task", "id": "wait", "action": "delay", "params": {"ms": ms}},
            {"type": "task", "id": "b", "action": "value", "params": {"value": "${tasks.a.result}"}},
        ]}}
        return job, "succeeded", n
    if kind == "await":
        job = {"labels": {"kind": kind}, "webhook": WEBHOOK, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": n}},
            {"type": "task", "id": "gate", "action": "await"},
        ]}}
        return job, "succeeded", {"approved": n}
    if kind == "later":
        # A delayed start: most are held live (due within the 10 s horizon), some sleep in the
        # store. Either way it starts once, at or after its runAt, across the kill.
        job = {"labels": {"kind": kind}, "delayMs": random.randint(100, 12000),
               "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": n}}}
        return job, "succeeded", n
    if kind == "fail":
        job = {"labels": {"kind": kind}, "graph": {"type": "parallel", "id": "p", "branches": [
            {"type": "task", "id": "slow", "action": "delay", "params": {"ms": random.randint(100, 800)}},
            {"type": "series", "id": "s", "steps": [
                {"type": "task", "id": "d", "action": "delay", "params": {"ms": random.randint(100, 800)}},
                {"type": "task", "id": "boom", "action": "fail", "params": {"code": "demo.boom", "message": "no"}},
            ]},
        ]}}
        return job, "failed", "demo.boom"
    job = {"labels": {"kind": "value"}, "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": n}}}
    return job, "succeeded", n


# Refuses every delivery (503) until `accepting` is set.
receiver = WebhookRecorder(accepting=False)
WEBHOOK = {"url": receiver.url, "events": ["job.succeeded", "job.failed"],
           "retry": {"maxAttempts": 100, "delayMs": 100, "backoff": 1.5, "maxDelayMs": 500}}

accepted = {}      # id -> (kind, state, expected)
completed = {}     # id -> result given to its await (before a kill, or after a restart)
completed_before_kill = set()
lock = threading.Lock()


def submit(server, kind, n):
    job, state, expected = make_job(kind, n)
    try:
        status, body = server.request("POST", "/v1/jobs", job, timeout=10)
    except OSError:
        return False  # the server died mid-request: no 201, no promise
    if status == 201:
        with lock:
            accepted[body["id"]] = (kind, state, expected)
    return True


def round_in_flight(server, kill_after):
    kinds = ["delay"] * 80 + ["await"] * 60 + ["fail"] * 40 + ["value"] * 20 + ["later"] * 24
    random.shuffle(kinds)
    threads = [threading.Thread(target=lambda chunk: [submit(server, k, n) for k, n in chunk],
                                args=([(k, random.randint(1, 10**6)) for k in kinds[i::8]],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Complete about half of the open awaits before the kill, each once its await is waiting.
    for job_id, (kind, _, expected) in list(accepted.items()):
        if kind == "await" and job_id not in completed and random.random() < 0.5:
            check(server.wait_task_running(job_id, "gate"), f"{job_id}: its await never started before the kill")
            status, _ = server.request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": expected})
            if status == 200:
                completed[job_id] = expected
                completed_before_kill.add(job_id)
    time.sleep(kill_after)  # the test itself: the load runs this long, then SIGKILL
    server.kill()


def round_burst(server, duration):
    stop = threading.Event()

    def loop(seed):
        n = seed
        while not stop.is_set():
            if not submit(server, "value", n):
                return
            n += 8

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(duration)  # the test itself: submissions run this long, then SIGKILL
    server.kill()
    stop.set()
    for t in threads:
        t.join()


def verify(server):
    # Open awaits are completed now; every accepted job must then finish as expected.
    for job_id, (kind, _, expected) in accepted.items():
        if kind == "await" and job_id not in completed:
            status, body = server.request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": expected})
            if status == 409 and body.get("code") == "task.notRunning":
                # Resumed, but not waiting again yet: complete it once it is.
                server.wait_task_running(job_id, "gate")
                status, body = server.request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": expected})
            check(status == 200, f"{job_id}: completing its await after restart gave {status} {body}")
            if status == 200:
                completed[job_id] = expected
    for job_id, (kind, state, expected) in accepted.items():
        status, job = server.request("GET", f"/v1/jobs/{job_id}?waitMs=20000")
        check(status == 200, f"{job_id} ({kind}) got a 201 but is {status} after restart")
        if status != 200:
            continue
        check(job["state"] == state, f"{job_id} ({kind}) ended {job['state']}, expected {state}")
        if state == "succeeded":
            check(job.get("result") == expected, f"{job_id} ({kind}) result {job.get('result')!r}, expected {expected!r}")
        else:
            # A parallel node reports its branches' failures as one `aggregate` error.
            error = job.get("error", {})
            codes = [error.get("code")] + [e.get("code") for e in error.get("details", {}).get("errors", [])]
            check(expected in codes, f"{job_id} ({kind}) error {error}, expected {expected}")
        _, tasks = server.request("GET", f"/v1/jobs/{job_id}/tasks")
        _, events = server.request("GET", f"/v1/jobs/{job_id}/events?limit=10000")
        seqs = [e["seq"] for e in events["items"]]
        check(seqs == list(range(1, len(seqs) + 1)), f"{job_id}: event seqs have gaps: {seqs}")
        for node in tasks["items"]:
            if node["type"] != "task":
                continue
            started = sum(1 for e in events["items"] if e["type"] == "task.started" and e.get("taskId") == node["id"])
            ended = sum(1 for e in events["items"] if e["type"] in ("task.succeeded", "task.failed", "task.cancelled", "task.skipped")
                        and e.get("taskId") == node["id"])
            check(ended <= 1, f"{job_id}/{node['id']}: {ended} terminal events (ran twice)")
            check(node["attempts"] == started, f"{job_id}/{node['id']}: attempts {node['attempts']} but {started} task.started events")
        if kind == "later":
            starts = sum(1 for e in events["items"] if e["type"] == "job.started")
            check(starts == 1, f"{job_id} (delayed): {starts} job.started events")
            check(job.get("startedAt", "") >= job.get("runAt", "~"), f"{job_id} (delayed) started before its runAt: {job}")
        if kind in ("delay", "await"):
            # Its webhook: the job's end was delivered (queued before a kill or not).
            check(receiver.wait_for_end(job_id, f"job.{state}", 20), f"{job_id} ({kind}): no job.{state} webhook arrived")
        if job_id in completed:
            gate = next(n for n in tasks["items"] if n["id"] == "gate")
            check(gate["state"] == "succeeded" and gate.get("result") == completed[job_id],
                  f"{job_id}: await completed before the kill is now {gate}")
            status, _ = server.request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": "again"})
            check(status == 409, f"{job_id}: completing a completed await again gave {status}")


SCHEMA = f"crash{os.getpid()}_{int(time.time())}"


def store_args(data):
    """The server's store: the SQLite file `data`, or a schema of TEST_STORE_URL's database."""
    if not STORE_URL:
        return ["--data", data]
    separator = "&" if "?" in STORE_URL else "?"
    return ["--database", f"{STORE_URL}{separator}options=-csearch_path%3D{SCHEMA}"]


def pending_deliveries(data):
    """Deliveries the killed server left pending in its store (sqlite3 or psql)."""
    query = "SELECT count(*) FROM deliveries WHERE state = 'pending'"
    if STORE_URL:
        output = subprocess.run(["psql", STORE_URL, "-tAc", f"SET search_path = {SCHEMA}; {query}"],
                                check=True, capture_output=True, text=True).stdout.split()
        return int(output[-1])
    import sqlite3
    db = sqlite3.connect(data)
    try:
        return db.execute(query).fetchone()[0]
    finally:
        db.close()


def main():
    if STORE_URL:
        subprocess.run(["psql", STORE_URL, "-qc", f"CREATE SCHEMA {SCHEMA}"], check=True)
    workdir = tempfile.mkdtemp(prefix="taskserver-crash-")
    data = os.path.join(workdir, "data", "taskserver.sqlite")
    started = time.time()
    for name, action in [
        ("in flight, kill after 0.6 s", lambda s: round_in_flight(s, 0.6)),
        ("in flight, kill after 0.05 s", lambda s: round_in_flight(s, 0.05)),
        ("burst of submissions, kill after 1.0 s", lambda s: round_burst(s, 1.0)),
    ]:
        before = len(accepted)
        server = Server(data)
        action(server)
        print(f"round '{name}': {len(accepted) - before} jobs accepted before SIGKILL", flush=True)
        queued = pending_deliveries(data)
        receiver.accepting.set()
        restart = time.time()
        server = Server(data)
        print(f"  restarted and healthy in {time.time() - restart:.2f} s; {queued} webhook deliveries were pending at the kill", flush=True)
        verify(server)
        server.stop()
    print(f"crash test: {len(accepted)} accepted jobs checked, {len(completed_before_kill)} of {len(completed)} awaits completed before a kill, "
          f"{len(failures)} failures, {time.time() - started:.1f} s")
    if failures:
        print("server log:", os.path.join(workdir, "server.log"))
        sys.exit(1)
    shutil.rmtree(workdir)


main()
