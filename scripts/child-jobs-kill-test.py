#!/usr/bin/env python3
"""Child jobs across SIGKILLs (issue #45): a 200-child fan-out whose server is killed mid-flight.

    [TEST_STORE_URL=postgres://…] python3 scripts/child-jobs-kill-test.py PATH/TO/taskserver [--servers 3]

A definition `piece` waits a random 0.3-2.5 s (a `delay` task) and returns its input's `n`; a parent
job maps a `job` node over 200 items, so it starts 200 child jobs. The server that holds the parent
is killed with SIGKILL twice: right after the submission (children being inserted) and once some
children have finished. One server: it is started again on the same store (SQLite, or a schema of
TEST_STORE_URL's database). `--servers 3` (TEST_STORE_URL required): three servers share the
database; the killed one's jobs are taken over by the others, and it is started again later.
Checked: the parent succeeds with [0, 1, …, 199] (each child's result in item order); it has exactly
200 children — none started twice for one item — each succeeded, each with a distinct
`parentTaskId`, and each child's `job.created` appears once. Exit status 0 when every check passes.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer  # noqa: E402

CHILDREN = 200
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def request(port, method, path, body=None, timeout=70):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return 0, str(error)


class Node:
    def __init__(self, binary, store, name, log):
        self.binary, self.store, self.name, self.log = binary, store, name, log
        self.server = None
        self.start()

    def start(self):
        args = self.store + ["--executor", "default=8"]
        if self.name:
            args += ["--node-name", self.name]
        try:
            self.server = TestServer(self.binary, args, log=self.log, timeout=60)
        except ServerStartError as error:
            raise SystemExit(f"server {self.name or ''} did not start: {error}")

    @property
    def port(self):
        return self.server.port

    def kill(self):
        self.server.kill()

    def stop(self):
        check(self.server.stop(timeout=30) == 0, f"server {self.name or ''} did not stop cleanly on SIGTERM")


def children(port, parent):
    """Every child of `parent` (paged)."""
    items, cursor = [], None
    while True:
        path = f"/v1/jobs?parent={parent}&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        status, page = request(port, "GET", path)
        if status != 200:
            return None
        items += page["items"]
        cursor = page.get("nextCursor")
        if not cursor:
            return items


def wait_parent(nodes, parent, timeout):
    """The parent once it ended, read through any live node (None after `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            status, job = request(node.port, "GET", f"/v1/jobs/{parent}?waitMs=5000", timeout=20)
            if status == 200 and job["state"] in ("succeeded", "failed", "cancelled"):
                return job
        time.sleep(0.2)
    return None


def run_round(nodes, restart, name, kill_when):
    items = [{"n": i, "ms": 300 + (i * 37) % 2200} for i in range(CHILDREN)]
    graph = {"type": "map", "id": "each", "items": "${input}",
             "template": {"type": "job", "id": "piece", "definition": "piece"}}
    status, parent = request(nodes[0].port, "POST", "/v1/jobs", {"input": items, "graph": graph})
    if status != 201:
        raise SystemExit(f"{name}: the parent was not accepted: {status} {parent}")
    parent_id = parent["id"]
    killed_with = kill_when(nodes[0].port, parent_id)
    nodes[0].kill()
    killed = time.monotonic()
    rejoin = restart(nodes)
    job = wait_parent(nodes, parent_id, 180)
    took = time.monotonic() - killed
    rejoin()
    check(job is not None, f"{name}: the parent did not end within 180 s of the kill")
    if job is None:
        return
    check(job["state"] == "succeeded", f"{name}: the parent ended {job['state']}: {json.dumps(job.get('error'))[:300]}")
    check(job.get("result") == list(range(CHILDREN)), f"{name}: the parent's result is not the items' n in order")
    kids = children(nodes[-1].port, parent_id) or []
    check(len(kids) == CHILDREN, f"{name}: {len(kids)} children, not {CHILDREN}")
    tasks = {kid.get("parentTaskId") for kid in kids}
    check(len(tasks) == len(kids), f"{name}: {len(kids) - len(tasks)} items started more than one child")
    check(all(kid["state"] == "succeeded" for kid in kids),
          f"{name}: children not succeeded: {sorted({kid['state'] for kid in kids})}")
    created_twice = 0
    for kid in kids[:50]:
        _, events = request(nodes[-1].port, "GET", f"/v1/jobs/{kid['id']}/events?limit=1000")
        created = [e for e in events.get("items", []) if e["type"] == "job.created"]
        created_twice += len(created) != 1
    check(created_twice == 0, f"{name}: {created_twice} of 50 children have job.created more than once")
    print(f"round '{name}': killed with {killed_with}; the parent ended {took:.1f} s after the kill "
          f"with {len(kids)} children", flush=True)


def after_submission(port, parent):
    """As soon as the first children are listed: most are still being inserted."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        listed = len(children(port, parent) or [])
        if listed:
            return f"{listed} children listed"
        time.sleep(0.002)
    return "no child listed after 10 s"


def after_some_finished(port, parent):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kids = children(port, parent) or []
        done = sum(kid["state"] == "succeeded" for kid in kids)
        if done >= 40:
            return f"{len(kids)} children, {done} finished"
        time.sleep(0.05)
    return "children still running after 30 s"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--servers", type=int, default=1)
    args = parser.parse_args()
    store_url = os.environ.get("TEST_STORE_URL", "")
    if args.servers > 1 and not store_url:
        raise SystemExit("--servers needs TEST_STORE_URL (a cluster shares a PostgreSQL database)")
    work = tempfile.mkdtemp(prefix="taskserver-children-")
    log = os.path.join(work, "server.log")
    if store_url:
        schema = f"children{os.getpid()}_{int(time.time())}"
        subprocess.run(["psql", store_url, "-qc", f"CREATE SCHEMA {schema}"], check=True)
        separator = "&" if "?" in store_url else "?"
        store = ["--database", f"{store_url}{separator}options=-csearch_path%3D{schema}"]
    else:
        store = ["--data", os.path.join(work, "taskserver.sqlite")]
    names = [f"n{i + 1}" for i in range(args.servers)] if args.servers > 1 else [None]
    nodes = [Node(args.binary, store, name, log) for name in names]
    piece = {"graph": {"type": "series", "steps": [
        {"type": "task", "id": "wait", "action": "delay", "params": {"ms": "${input.ms}"}},
        {"type": "task", "id": "n", "action": "value", "params": {"value": "${input.n}"}}]}}
    status, body = request(nodes[0].port, "PUT", "/v1/definitions/piece", piece)
    if status not in (200, 201):
        raise SystemExit(f"PUT /v1/definitions/piece answered {status}: {body}")

    def restart(nodes):
        """Starts the killed server again (one server), or leaves its jobs to the others' takeover
        (a cluster); answers what brings it back once the parent ended: then it rejoins, as the
        last of the list (a later round kills the first)."""
        if len(nodes) == 1:
            nodes[0].start()
            return lambda: None
        killed = nodes.pop(0)

        def rejoin():
            killed.start()
            nodes.append(killed)
        return rejoin

    started = time.monotonic()
    run_round(nodes, restart, "killed after the submission", after_submission)
    run_round(nodes, restart, "killed once 40 children finished", after_some_finished)
    for node in nodes:
        node.stop()
    print(f"child jobs kill test ({args.servers} server(s), {'PostgreSQL' if store_url else 'SQLite'}): "
          f"{len(failures)} failures, {time.monotonic() - started:.1f} s")
    if failures:
        print("server log:", log)
        sys.exit(1)
    shutil.rmtree(work)


main()
