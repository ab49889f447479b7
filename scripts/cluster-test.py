#!/usr/bin/env python3
"""Chaos test of a cluster (SPEC §9): three real servers on one real PostgreSQL, nodes killed.

    TEST_STORE_URL=postgres://… [TEST_STORE_DIR=DIR CLUSTER_TEST_DB_RESTART=1] python3 scripts/cluster-test.py PATH/TO/taskserver

Three servers (`--node-name n1…n3`) share a fresh schema of TEST_STORE_URL's database. Clients
talk to any of them, as behind a load balancer: every request goes to a node picked at random.
  1. ~300 mixed jobs: series with delays, parallel fans with a failing branch, awaits (completed,
     or cancelled, through a node other than the one that took the job), worker tasks of an
     external pool (two workers in the test claim through random nodes and complete through
     others: claims and leases are relayed to the node that runs the job), delayed starts; each
     delay, await and worker job has a webhook to a local receiver that records every delivery.
  2. A random node is killed with SIGKILL while they run; the time until no unfinished job is
     owned by it any more (`jobs.owner`, read from the database) is the takeover time. The node is
     started again under its name. Then the same once more with another wave of jobs.
  3. A node is frozen (SIGSTOP) past its lease — alive, its connections idle — while another
     wave runs: the others take its jobs over; thawed (SIGCONT), its late writes are refused
     (fencing) and it registers again.
  4. A stall shorter than the lease (#41): ~20 jobs of one worker task each (action `stall`, pool
     `ext`) are submitted through one node, which is frozen (SIGSTOP) for 3.6-3.9 s — short of its
     5 s lease; past its 3.5 s stale stop (counted from its last renewal, once a second), so it
     gives its runs up and registers again every time, nobody having taken them over — while two workers claim and
     complete only through the other nodes, sending again every item answered 503. No (job, task,
     attempt) is handed out under two lease ids; every completion answered 200 is applied once
     (the job ends with that worker's result, the task's `attempts` is that attempt's number, one
     `task.succeeded`); every completion ends answered 200 or 409.
  5. n3 reaches PostgreSQL through a TCP proxy in this script, which cuts it off (a partition:
     the process alive, its connections open, nothing through either way): it must stop acting
     on its jobs before they are taken over; the others take them over within 10 s; healed, what
     it sent meanwhile arrives late and is refused, and it registers again.
  6. With CLUSTER_TEST_DB_RESTART=1: PostgreSQL (TEST_STORE_DIR, `postgres.sh`) stops for 4 s —
     past the servers' 3.5 s self-fence — and starts again while clients submit through every
     node: every answer is a 201 or a 503 `store.*` (no 500, no reset), every node's /readyz is
     503 while it is away, and all three register again and go on with their jobs.
  7. A schedule firing each minute, created through one node and read through the others; the
     first kill is of the leader (the node that fires). Every minute that passed while the test
     ran (it waits for at least one after the leader's death) started exactly one job, within
     15 s of its fire time, whichever node was the leader then.
  8. Every accepted job must finish as expected, read through any node (long-polls woken across
     nodes); no finished node ran again (a task's `attempts` equals its `task.started` and
     `task.retrying` events and it has at most one terminal event, seqs have no gaps); every end
     was delivered to the webhook; a delivery repeated for one event id is counted (at least once:
     only one in flight at a kill may repeat); takeover ≤ 10 s; some worker tasks were claimed
     through a node other than the one that took the job; the server-wide feed (GET /v1/events)
     read through two nodes from a cursor taken at the start gives the same entries at the same
     cursors, with no gap, every accepted job's end, and no event twice (also across the
     database's restart, when a commit's answer is lost and the commit sent again).
  9. Queue rules for the whole cluster: jobs whose tasks hold concurrency keys (max 1 and 3), whose
     job holds one (max 2), tasks of a rate-limited pool (10/s over the three nodes) that also hold
     a key, and worker tasks holding a key whose first attempt's lease expires while the worker
     still runs. From the stored start and end times no key ever had more than `max` holders, no
     slot is left once every job ended, and the pool never started more than 1.5 times its rate
     (plus 3) within a second.
Exit status 0 when every check passes; figures on stdout.
"""
from datetime import datetime
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer, wait_until  # noqa: E402
from webhook_recorder import WebhookRecorder  # noqa: E402

BIN = sys.argv[1]
STORE_URL = os.environ.get("TEST_STORE_URL", "")
STORE_DIR = os.environ.get("TEST_STORE_DIR", "")
DB_RESTART = os.environ.get("CLUSTER_TEST_DB_RESTART") == "1"
if not STORE_URL or (DB_RESTART and not STORE_DIR):
    raise SystemExit("cluster-test.py needs TEST_STORE_URL (and TEST_STORE_DIR for CLUSTER_TEST_DB_RESTART=1): "
                     "a PostgreSQL of scripts/postgres.sh")
SCHEMA = f"cluster{os.getpid()}_{int(time.time())}"
SEPARATOR = "&" if "?" in STORE_URL else "?"
DATABASE = f"{STORE_URL}{SEPARATOR}options=-csearch_path%3D{SCHEMA}"
random.seed(int(os.environ.get("CLUSTER_TEST_SEED", "31")))
failures = []
figures = {}
workdir = tempfile.mkdtemp(prefix="taskserver-cluster-")


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def sql(query):
    output = subprocess.run(["psql", STORE_URL, "-tAc", f"SET search_path = {SCHEMA}; {query}"],
                            check=True, capture_output=True, text=True).stdout.split("\n")
    return [line for line in output if line and line != "SET"]


class Proxy:
    """A TCP proxy between one node and PostgreSQL that can cut the node off: a network partition
    with the process alive and its connections open, nothing getting through either way. What was
    sent meanwhile arrives once healed (late writes)."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.open = threading.Event()
        self.open.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            self.open.wait()
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(source, target), daemon=True).start()

    def pipe(self, source, target):
        try:
            while data := source.recv(65536):
                self.open.wait()
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.open.clear()

    def heal(self):
        self.open.set()


def proxied(url, proxy):
    """`url` with its host and port replaced by the proxy's."""
    parts = urllib.parse.urlsplit(url)
    netloc = (parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else "") + f"127.0.0.1:{proxy.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class Node:
    def __init__(self, name, proxy=None):
        self.name = name
        self.log = os.path.join(workdir, f"{name}.log")
        self.proxy = proxy
        self.start()

    def start(self):
        database = proxied(DATABASE, self.proxy) if self.proxy else DATABASE
        try:
            self.server = TestServer(BIN, ["--database", database, "--node-name", self.name, "--executor", "default=8",
                                           "--executor", f"paced=4,rate={PACED_RATE}/s", "--executor", "ext=external",
                                           "--log-level", "info"], log=self.log, timeout=60)
        except ServerStartError as error:
            raise SystemExit(f"{self.name} did not start: {error}")
        self.port = self.server.port
        self.alive = True

    def kill(self):
        self.alive = False
        self.server.kill()


nodes = []


def live_nodes():
    return [node for node in nodes if node.alive]


def request(method, path, body=None, timeout=40, avoid=None, node=None):
    """One request to a live node picked at random (not `avoid`); retried on another node when the
    picked one is gone (connection refused / reset), as a load balancer would."""
    for _ in range(20):
        candidates = [n for n in live_nodes() if n is not avoid] or live_nodes()
        target = node or random.choice(candidates)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{target.port}{path}", data=data, method=method)
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"null"), target
        except urllib.error.HTTPError as error:
            if error.code == 503 and node is None:
                time.sleep(0.2)
                continue
            return error.code, json.loads(error.read() or b"null"), target
        except OSError:
            if node is not None:
                raise
            time.sleep(0.1)
    raise SystemExit(f"no node answered {method} {path}")


receiver = WebhookRecorder()
WEBHOOK = {"url": receiver.url,
           "events": ["job.succeeded", "job.failed", "job.cancelled"],
           "retry": {"maxAttempts": 100, "delayMs": 100, "backoff": 1.5, "maxDelayMs": 500}}

accepted = {}   # id -> (kind, state, expected, node that took it)
completed = {}  # id -> result given to its await
cancelled = set()
kills = []      # monotonic times of kills and freezes
lock = threading.Lock()


# Queue rules for the whole cluster: concurrency keys (a task's, with max 1 and 3; a job's, max 2),
# and a rate-limited pool whose tasks also hold a key (two rules on one task).
KEYS = {"key1": ("chaos-one", 1), "key3": ("chaos-three", 3), "jobkey": ("chaos-job", 2), "paced": ("chaos-paced", 2),
        "keyworker": ("chaos-worker", 1)}
PACED_RATE = 10


def make_job(kind, n):
    if kind in KEYS:
        key, most = KEYS[kind]
        rule = {"concurrency": {"key": key, "max": most}}
        first = {"type": "task", "id": "k", "action": "delay", "params": {"ms": random.randint(50, 400)}}
        if kind == "paced":
            first = {"type": "task", "id": "k", "executor": "paced", "action": "value", "params": {"value": 0}}
        if kind == "keyworker":
            # A worker task holding a key whose first attempt's lease expires while its worker still
            # runs (`slow_work`): the key goes to the retry, never to two attempts at once.
            first = {"type": "task", "id": "k", "executor": "ext", "action": "slow", "params": {"n": n},
                     "heartbeatTimeoutMs": 1000, "retry": {"maxAttempts": 10, "delayMs": 100}}
        if kind != "jobkey":
            first.update(rule)
        job = {"labels": {"kind": kind}, "graph": {"type": "series", "id": "s", "steps": [
            first, {"type": "task", "id": "v", "action": "value", "params": {"value": n}}]}}
        if kind == "jobkey":
            job.update(rule)
        return job, "succeeded", n
    if kind == "delay":
        ms = random.randint(500, 4000)
        return {"labels": {"kind": kind}, "webhook": WEBHOOK, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": n}},
            {"type": "task", "id": "wait", "action": "delay", "params": {"ms": ms}},
            {"type": "task", "id": "b", "action": "value", "params": {"value": "${tasks.a.result}"}},
        ]}}, "succeeded", n
    if kind == "fan":
        return {"labels": {"kind": kind}, "graph": {"type": "parallel", "id": "p", "branches": [
            {"type": "task", "id": f"d{i}", "action": "delay", "params": {"ms": random.randint(200, 3000)}}
            for i in range(4)] + [{"type": "series", "id": "s", "steps": [
                {"type": "task", "id": "d", "action": "delay", "params": {"ms": random.randint(200, 3000)}},
                {"type": "task", "id": "boom", "action": "fail", "params": {"code": "demo.boom", "message": "no"}}]}]}}, \
            "failed", "demo.boom"
    if kind == "await":
        return {"labels": {"kind": kind}, "webhook": WEBHOOK, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": n}},
            {"type": "task", "id": "gate", "action": "await"},
        ]}}, "succeeded", {"approved": n}
    if kind == "worker":
        # A task of an external pool: queued on the node that runs the job, claimed and completed by
        # the test's workers through random nodes (`work`). A lease lost with a killed node expires
        # and the attempt is retried.
        return {"labels": {"kind": kind}, "webhook": WEBHOOK, "graph": {"type": "series", "id": "s", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": n}},
            {"type": "task", "id": "w", "executor": "ext", "action": "double", "params": {"n": "${tasks.a.result}"},
             "heartbeatTimeoutMs": 4000, "retry": {"maxAttempts": 10, "delayMs": 100}},
        ]}}, "succeeded", 2 * n
    if kind == "later":
        return {"labels": {"kind": kind}, "delayMs": random.randint(100, 15000),
                "graph": {"type": "task", "id": "t", "action": "value", "params": {"value": n}}}, "succeeded", n
    return {"labels": {"kind": "value"}, "graph": {"type": "task", "id": "t", "action": "value",
                                                   "params": {"value": n}}}, "succeeded", n


def submit(kind):
    n = random.randint(1, 10**6)
    job, state, expected = make_job(kind, n)
    status, body, node = request("POST", "/v1/jobs", job)
    check(status == 201, f"submitting a {kind} job gave {status} {body}")
    if status == 201:
        with lock:
            accepted[body["id"]] = (kind, state, expected, node)


def work(stop, pinned):
    """A worker of pool `ext`: claims through a random node (or, while it is alive, through
    `pinned` only, so that the tasks of the others' jobs reach it relayed), completes through
    another node. It claims action `double` only: the stall phase's tasks (`stall`) are its own
    workers'."""
    while not stop.is_set():
        try:
            status, body, through = request("POST", "/v1/executors/ext/claim",
                                            {"workerId": f"chaos-{threading.get_ident()}", "actions": ["double"],
                                             "max": 5, "waitMs": 1000},
                                            node=pinned if pinned is not None and pinned.alive else None)
        except (SystemExit, OSError):
            time.sleep(0.1)
            continue
        if status != 200:
            time.sleep(0.2)
            continue
        items = body["items"]
        for item in items:
            with lock:
                taker = accepted.get(item["jobId"], (None, None, None, None))[3]
                figures["claims"] = figures.get("claims", 0) + 1
                if taker is not None and taker is not through:
                    figures["claimed elsewhere"] = figures.get("claimed elsewhere", 0) + 1
        if not items:
            continue
        completion = {"items": [{"leaseId": item["leaseId"], "result": 2 * item["params"]["n"]} for item in items]}
        try:
            status, body, _ = request("POST", "/v1/leases/complete", completion, avoid=through)
        except (SystemExit, OSError):
            continue
        answers = body.get("items", []) if status == 200 else []
        with lock:
            for answer in answers:
                key = f"completions {answer.get('status')}"
                figures[key] = figures.get(key, 0) + 1


def slow_work(stop):
    """The worker of action `slow` (the `keyworker` jobs): a first attempt runs past its lease's
    heartbeat timeout (1 s) without heartbeats and completes late (409: the lease expired, the
    attempt was retried); later attempts complete at once."""
    while not stop.is_set():
        try:
            status, body, through = request("POST", "/v1/executors/ext/claim",
                                            {"workerId": "chaos-slow", "actions": ["slow"], "max": 1,
                                             "waitMs": 1000})
        except (SystemExit, OSError):
            time.sleep(0.1)
            continue
        if status != 200 or not body["items"]:
            continue
        item = body["items"][0]
        if item["attempt"] == 1:
            time.sleep(1.6)
        completion = {"items": [{"leaseId": item["leaseId"], "result": item["params"]["n"]}]}
        try:
            status, body, _ = request("POST", "/v1/leases/complete", completion)
        except (SystemExit, OSError):
            continue
        with lock:
            for answer in body.get("items", []) if status == 200 else []:
                key = f"slow {answer.get('status')}"
                figures[key] = figures.get(key, 0) + 1


def wave(count):
    kinds = (["delay"] * 25 + ["fan"] * 15 + ["await"] * 30 + ["worker"] * 10 + ["later"] * 5 + ["value"] * 15
             + ["key1"] * 8 + ["key3"] * 8 + ["jobkey"] * 6 + ["paced"] * 20 + ["keyworker"] * 2) * (count // 100)
    random.shuffle(kinds)
    threads = [threading.Thread(target=lambda chunk: [submit(k) for k in chunk], args=(kinds[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def waiting(job_id, node=None):
    status, task, _ = request("GET", f"/v1/jobs/{job_id}/tasks/gate", node=node)
    return status == 200 and task["state"] == "running"


def settle_awaits(fraction, cancel_fraction=0.0):
    """Completes (or cancels) open awaits through a node other than the one that took the job."""
    for job_id, (kind, _, expected, taker) in list(accepted.items()):
        if kind != "await" or job_id in completed or job_id in cancelled or random.random() >= fraction:
            continue
        if not wait_until(lambda: waiting(job_id), 20):
            check(False, f"{job_id}: its await never started")
            continue
        if random.random() < cancel_fraction:
            status, body, _ = request("POST", f"/v1/jobs/{job_id}/cancel", avoid=taker)
            check(status in (200, 202), f"{job_id}: cancel through another node gave {status} {body}")
            if status in (200, 202):
                cancelled.add(job_id)
                accepted[job_id] = (kind, "cancelled", None, taker)
            continue
        status, body, _ = request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": expected}, avoid=taker)
        if status == 409 and body.get("code") == "task.notRunning":
            wait_until(lambda: waiting(job_id), 20)
            status, body, _ = request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": expected})
        check(status == 200 and body.get("state") == "succeeded",
              f"{job_id}: completing its await through another node gave {status} {body}")
        if status == 200:
            completed[job_id] = expected


def leader():
    name = sql("SELECT id FROM servers WHERE lease_until >= taskserver_now_ms() ORDER BY token LIMIT 1")[0]
    return next(node for node in nodes if node.name == name)


def kill_and_measure(freeze=False, victim=None):
    victim = victim or random.choice(live_nodes())
    owned = int(sql(f"SELECT count(*) FROM jobs WHERE owner = '{victim.name}' AND state IN ('pending', 'running')")[0])
    killed_at = time.monotonic()
    kills.append(killed_at)
    if freeze:
        victim.server.signal(signal.SIGSTOP)
        victim.alive = False
    else:
        victim.kill()
    taken = wait_until(lambda: int(sql(f"SELECT count(*) FROM jobs WHERE owner = '{victim.name}' "
                                       "AND state IN ('pending', 'running')")[0]) == 0, 30, interval=0.05)
    takeover = time.monotonic() - killed_at
    what = "frozen" if freeze else "killed"
    print(f"{victim.name} {what} owning {owned} unfinished jobs: taken over in {takeover:.2f} s", flush=True)
    check(taken, f"{victim.name}'s jobs were not taken over within 30 s")
    check(takeover <= 10, f"takeover took {takeover:.2f} s (> 10 s)")
    figures.setdefault("takeover", []).append(takeover)
    if freeze:
        time.sleep(1)
        victim.server.signal(signal.SIGCONT)
        # Thawed: its next write is refused, it gives its runs up and registers again.
        ok = wait_until(lambda: "registered again" in open(victim.log, errors="replace").read(), 20, interval=0.1)
        check(ok, f"{victim.name} did not register again after it was thawed")
        victim.alive = True
    else:
        victim.start()
        print(f"{victim.name} started again on port {victim.port}", flush=True)


def partition_and_measure(victim):
    """Cuts `victim` off from PostgreSQL (its proxy), process alive: it must stop acting on its jobs
    before its lease ends (self-fence at 3.5 s), the others take them over, and once healed its
    late writes are refused and it registers again."""
    owned = int(sql(f"SELECT count(*) FROM jobs WHERE owner = '{victim.name}' AND state IN ('pending', 'running')")[0])
    log_before = len(open(victim.log, errors="replace").read())
    cut_at = time.monotonic()
    kills.append(cut_at)
    victim.alive = False
    victim.proxy.cut()
    fenced_at = []

    def taken_over():
        if not fenced_at and "stops acting on its jobs" in open(victim.log, errors="replace").read()[log_before:]:
            fenced_at.append(time.monotonic())
        return int(sql(f"SELECT count(*) FROM jobs WHERE owner = '{victim.name}' "
                       "AND state IN ('pending', 'running')")[0]) == 0
    taken = wait_until(taken_over, 30, interval=0.05)
    takeover = time.monotonic() - cut_at
    fence = (fenced_at[0] - cut_at) if fenced_at else None
    print(f"{victim.name} cut off from PostgreSQL owning {owned} unfinished jobs: stopped acting on them after "
          f"{fence if fence is None else f'{fence:.2f} s'}, taken over in {takeover:.2f} s", flush=True)
    check(taken, f"{victim.name}'s jobs were not taken over within 30 s of its partition")
    check(takeover <= 10, f"takeover after a partition took {takeover:.2f} s (> 10 s)")
    check(fence is not None and fence < takeover,
          f"{victim.name} stopped acting on its jobs ({fence}) before they were taken over ({takeover:.2f} s)")
    figures.setdefault("takeover", []).append(takeover)
    time.sleep(1)
    victim.proxy.heal()
    # Healed: what it sent meanwhile arrives late and is refused; it registers again.
    ok = wait_until(lambda: "registered again" in open(victim.log, errors="replace").read()[log_before:], 30,
                    interval=0.1)
    check(ok, f"{victim.name} did not register again after its partition healed")
    victim.alive = True


def stall_with_workers(count=20):
    """#41: the server of `count` worker jobs stalls (SIGSTOP for 3.6-3.9 s: short of its 5 s lease, so
    nobody takes its jobs over; past its 3.5 s stale stop, counted from its last renewal, so it
    gives its runs up and registers again) while two workers claim and complete through the other
    nodes only. Every completion answered 200 must be applied, once; no attempt may be handed out
    twice under one number."""
    victim = random.choice(live_nodes())
    others = [node for node in nodes if node is not victim]
    jobs = []
    for _ in range(count):
        n = random.randint(1, 10**6)
        job = {"labels": {"kind": "stall"}, "graph": {
            "type": "task", "id": "w", "executor": "ext", "action": "stall", "params": {"n": n},
            "heartbeatTimeoutMs": 20000, "retry": {"maxAttempts": 5, "delayMs": 100}}}
        status, body, _ = request("POST", "/v1/jobs", job, node=victim)
        check(status == 201, f"submitting a stall job through {victim.name} gave {status} {body}")
        if status == 201:
            jobs.append(body["id"])
    # The victim took them and runs them; no worker claims `stall` yet, so their tasks wait queued on it.
    queued = wait_until(lambda: all(request("GET", f"/v1/jobs/{job_id}", node=victim)[1].get("state") == "running"
                                    for job_id in jobs), 20, interval=0.1)
    check(queued, f"the stall jobs did not all start on {victim.name}")
    claims = []   # (jobId, taskId, attempt, leaseId), indexed by claim number (the result names it)
    answers = {}  # claim number -> [(status, code)] of every completion answer, in order
    unsent = []   # claim numbers given up with no answer but 503
    record = threading.Lock()
    stop = threading.Event()

    def worker(name):
        while not stop.is_set():
            through = random.choice(others)
            try:
                status, body, _ = request("POST", "/v1/executors/ext/claim", {
                    "workerId": name, "actions": ["stall"], "max": 5, "waitMs": 1000}, node=through)
            except OSError:
                time.sleep(0.1)
                continue
            if status != 200:
                time.sleep(0.2)
                continue
            pending = {}  # leaseId -> completion item, until answered other than 503
            with record:
                for item in body["items"]:
                    pending[item["leaseId"]] = {"leaseId": item["leaseId"],
                                                "result": {"n": 2 * item["params"]["n"], "claim": len(claims)}}
                    claims.append((item["jobId"], item["taskId"], item["attempt"], item["leaseId"]))
            # Completed through the other node (relayed to the job's). An item answered 503 (the lease's
            # holder did not answer in time, or its run was given up) may or may not have been applied: it
            # is sent again. A retry answered 200 applies it now; one answered 409 lease.gone says the
            # lease ended, either by this very completion (applied after all: the job then ends with
            # this claim's result and its attempt number) or otherwise (the attempt failed and another
            # attempt's result decides). Both are right; what is wrong, and checked below, is a job
            # ending with the result of a completion answered only 409 (an outcome applied though
            # answered "nothing changed"), or not with the result of one answered 200.
            deadline = time.monotonic() + 30
            while pending and time.monotonic() < deadline:
                sent = list(pending.values())
                try:
                    status, body, _ = request("POST", "/v1/leases/complete", {"items": sent},
                                              node=next(node for node in others if node is not through))
                except OSError:
                    status = None
                if status == 200:
                    with record:
                        for item, answer in zip(sent, body["items"]):
                            answers.setdefault(item["result"]["claim"], []).append((answer["status"],
                                                                                    answer.get("code")))
                            if answer["status"] != 503:
                                del pending[item["leaseId"]]
                if pending:
                    time.sleep(0.25)
            with record:
                unsent.extend(item["result"]["claim"] for item in pending.values())

    log_before = len(open(victim.log, errors="replace").read())
    kills.append(time.monotonic())
    victim.alive = False
    victim.server.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    workers = [threading.Thread(target=worker, args=(f"stall-{i}",)) for i in range(2)]
    for thread in workers:
        thread.start()
    # The stall itself (a length of time, no condition to wait on): 3.6-3.9 s, within the issue's
    # 2.5-4 s, and always past the 3.5 s stale stop (counted from the last renewal, at most 1 s
    # before the freeze) yet short of the 5 s lease: the server gives its runs up and registers
    # again every time, and nobody takes its jobs over.
    time.sleep(random.uniform(3.6, 3.9))
    victim.server.signal(signal.SIGCONT)
    stalled = time.monotonic() - stopped_at
    victim.alive = True
    deadline = time.monotonic() + 60
    ended = {}
    for job_id in jobs:
        while job_id not in ended and time.monotonic() < deadline:
            status, job, _ = request("GET", f"/v1/jobs/{job_id}?waitMs=5000")
            if status == 200 and job["state"] in ("succeeded", "failed", "cancelled"):
                ended[job_id] = job
    check(len(ended) == len(jobs), f"{len(jobs) - len(ended)} stall jobs did not finish within 60 s of the thaw")
    stop.set()
    for thread in workers:
        thread.join()
    gave_up = "gave up the jobs of a lost lease" in open(victim.log, errors="replace").read()[log_before:]
    print(f"{victim.name} stalled {stalled:.2f} s with {len(jobs)} worker jobs (gave its runs up: {gave_up}); "
          f"{len(claims)} claims through the others", flush=True)

    leases = {}
    for job_id, task_id, attempt, lease_id in claims:
        leases.setdefault((job_id, task_id, attempt), set()).add(lease_id)
    twice = [key for key, ids in leases.items() if len(ids) > 1]
    check(not twice, f"{len(twice)} attempts handed out twice under one number: {twice[:3]}")
    final = {number: (history[-1][0] if history else None) for number, history in answers.items()}
    unanswered = [number for number in range(len(claims)) if final.get(number) not in (200, 409)]
    check(not unanswered and not unsent,
          f"{len(unanswered)} stall completions ended with no 200 or 409: "
          f"{[(claims[k], answers.get(k)) for k in unanswered[:3]]}")
    for job_id in jobs:
        status, job, _ = request("GET", f"/v1/jobs/{job_id}")
        _, tasks, _ = request("GET", f"/v1/jobs/{job_id}/tasks")
        _, events, _ = request("GET", f"/v1/jobs/{job_id}/events?limit=10000")
        task = next((node for node in tasks.get("items", []) if node["id"] == "w"), {})
        succeeded = sum(1 for e in events.get("items", []) if e["type"] == "task.succeeded" and e.get("taskId") == "w")
        mine = [number for number, claim in enumerate(claims) if claim[0] == job_id]
        result = job.get("result") if status == 200 else None
        winner = result.get("claim") if isinstance(result, dict) else None
        check(status == 200 and job["state"] == "succeeded" and winner in mine,
              f"stall job {job_id} ended {job.get('state')} with {result!r}, not the result of one of its claims")
        check(succeeded == 1, f"stall job {job_id}: {succeeded} task.succeeded events")
        for number in mine:
            attempt, history = claims[number][2], [s for s, _ in answers.get(number, [])]
            check(attempt <= task.get("attempts", 0),
                  f"stall job {job_id}: attempt {attempt} handed out, the task shows {task.get('attempts')} attempts")
            if 200 in history:
                # Answered 200: applied, once — the job's result is this claim's and its attempt the last.
                check(winner == number and task.get("attempts") == attempt,
                      f"stall job {job_id}: the completion of attempt {attempt} answered 200 was not applied "
                      f"(result {result!r}, attempts {task.get('attempts')})")
            if number == winner:
                check(200 in history or 503 in history,
                      f"stall job {job_id}: applied a completion answered only {history}")
                check(task.get("attempts") == attempt, f"stall job {job_id}: attempts {task.get('attempts')}, "
                                                       f"its result is attempt {attempt}'s")
        if status == 200:
            with lock:
                accepted[job_id] = ("stall", "succeeded", result, victim)
    statuses = {}
    for history in answers.values():
        for status, _ in history:
            statuses[status] = statuses.get(status, 0) + 1
    figures["stall"] = (stalled, gave_up, len(claims), statuses, len(twice))


def verify():
    events_of = {}
    for job_id, (kind, _, expected, _) in accepted.items():
        if kind == "await" and job_id not in completed and job_id not in cancelled:
            wait_until(lambda: waiting(job_id), 30)
            status, body, _ = request("POST", f"/v1/jobs/{job_id}/tasks/gate/complete", {"result": expected})
            check(status == 200, f"{job_id}: completing its await at the end gave {status} {body}")
            if status == 200:
                completed[job_id] = expected
    for job_id, (kind, state, expected, _) in accepted.items():
        status, job, _ = request("GET", f"/v1/jobs/{job_id}?waitMs=30000")
        check(status == 200, f"{job_id} ({kind}) got a 201 but reads {status}")
        if status != 200:
            continue
        check(job["state"] == state, f"{job_id} ({kind}) ended {job['state']}, expected {state}")
        if state == "succeeded":
            check(job.get("result") == expected, f"{job_id} ({kind}) result {job.get('result')!r}, expected {expected!r}")
        elif state == "failed":
            error = job.get("error", {})
            codes = [error.get("code")] + [e.get("code") for e in error.get("details", {}).get("errors", [])]
            check(expected in codes, f"{job_id} ({kind}) error {error}, expected {expected}")
        _, tasks, _ = request("GET", f"/v1/jobs/{job_id}/tasks")
        _, events, _ = request("GET", f"/v1/jobs/{job_id}/events?limit=10000")
        events_of[job_id] = events["items"]
        seqs = [e["seq"] for e in events["items"]]
        check(seqs == list(range(1, len(seqs) + 1)), f"{job_id}: event seqs have gaps: {seqs}")
        for node in tasks["items"]:
            if node["type"] != "task":
                continue
            # Each attempt starts with a task.started (or, for a retry, its task.retrying); a retry of
            # a task holding a concurrency key that had to wait for its key starts with both.
            keyed = kind in KEYS and kind != "jobkey" and node["id"] == "k"
            plain = sum(1 for e in events["items"] if e["type"] == "task.started" and e.get("taskId") == node["id"])
            retried = sum(1 for e in events["items"] if e["type"] == "task.retrying" and e.get("taskId") == node["id"])
            started = node["attempts"] if keyed and plain <= node["attempts"] <= plain + retried else plain + retried
            ended = sum(1 for e in events["items"] if e.get("taskId") == node["id"] and e["type"] in (
                "task.succeeded", "task.failed", "task.cancelled", "task.skipped"))
            check(ended <= 1, f"{job_id}/{node['id']}: {ended} terminal events (ran again after it finished)")
            check(node["attempts"] == started,
                  f"{job_id}/{node['id']}: attempts {node['attempts']}, {started} task.started and task.retrying")
        if kind == "later":
            starts = sum(1 for e in events["items"] if e["type"] == "job.started")
            check(starts == 1, f"{job_id} (delayed): {starts} job.started events")
        if kind in ("delay", "await", "worker"):
            check(receiver.wait_for_end(job_id, f"job.{state}", 30), f"{job_id} ({kind}): no job.{state} webhook")
    with receiver.lock:
        repeated = {key: times for key, times in receiver.deliveries.items() if len(times) > 1}
    # At least once: a delivery whose first send was in flight at a kill (within 2 s before it)
    # may be sent again; any other repeat is a double send.
    unexplained = [key for key, times in repeated.items()
                   if not any(times[0] - 2 <= k <= times[1] for k in kills)]
    figures["webhooks"] = (len(receiver.deliveries), len(repeated))
    check(not unexplained, f"webhooks delivered twice with no kill in between: {unexplained[:5]}")
    verify_queue_rules(events_of)


def verify_queue_rules(events_of):
    """From the stored start and end times: never more than `max` holders of a key at any instant
    (a task's key is held from its attempt's task.started to that attempt's end; a job's from its
    first task.started to its end; an attempt given up with its server ends where the next one starts),
    no key left held once every job ended, and the rate-limited pool's starts in any 1 s window."""
    def seconds(stamp):
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    holds = {key: [] for key, _ in KEYS.values()}
    paced_starts = []
    for job_id, (kind, _, _, _) in accepted.items():
        if kind not in KEYS or job_id not in events_of:
            continue
        key, _ = KEYS[kind]
        events = [dict(e, time=seconds(e["time"])) for e in events_of[job_id]]
        if kind == "jobkey":
            # A job waiting for its key is started already (job.started): it holds the key from
            # its first task's start.
            starts = [e["time"] for e in events if e["type"] == "task.started"]
            ends = [e["time"] for e in events if e["type"] in ("job.succeeded", "job.failed", "job.cancelled")]
            if starts and ends:
                holds[key].append((starts[0], ends[-1], job_id))
            continue
        mine = [e for e in events if e.get("taskId") == "k"]
        start = None
        for event in mine:
            if event["type"] == "task.started":
                if start is not None:
                    holds[key].append((start, event["time"], job_id))  # given up with its server: the next begins
                start = event["time"]
                if kind == "paced":
                    paced_starts.append(event["time"])
            elif event["type"] in ("task.succeeded", "task.failed", "task.cancelled", "task.retrying") and start:
                holds[key].append((start, event["time"], job_id))
                start = None
    worst = {}
    for (key, most) in KEYS.values():
        # Ends before starts at one instant: a slot given back and taken in the same millisecond.
        points = sorted([(s, 1, h) for h in holds[key] for s in h[:1]] + [(h[1], -1, h) for h in holds[key]],
                        key=lambda p: (p[0], p[1]))
        # `holding` counts like `held`: a hold of zero length has its end sorted before its start.
        held, peak, holding, crowded = 0, 0, {}, None
        for _, delta, hold in points:
            held += delta
            holding[hold] = holding.get(hold, 0) + delta
            if held > peak:
                peak = held
                if held > most and crowded is None:
                    crowded = sorted(h for h, count in holding.items() if count > 0)
        worst[key] = (peak, most, len(holds[key]))
        if crowded:
            # What the holders at the first crowded instant recorded, for the failure's reader.
            print(f"key {key}: {len(crowded)} holders at once:", flush=True)
            for start, end, job_id in crowded:
                print(f"  {job_id} held {start:.3f}..{end:.3f}", flush=True)
                for e in events_of[job_id]:
                    print(f"    {e['seq']:3} {e['time']} {e['type']} {e.get('taskId', '')} "
                          f"{ {k: v for k, v in e.items() if k in ('attempt', 'data', 'error')} }", flush=True)
        check(peak <= most, f"key {key}: {peak} holders at once from the stored times, max {most}")
    left = wait_until(lambda: sql("SELECT count(*) FROM key_slots") == ["0"], 10)
    check(left, f"slots still held once every job ended: {sql('SELECT key, holder FROM key_slots')}")
    stamps = sorted(paced_starts)
    busiest = max((sum(1 for t in stamps[i:] if t < start + 1) for i, start in enumerate(stamps)), default=0)
    # One server's bucket per server would start up to three times the rate; divided, the rate
    # (plus the buckets' bursts, and 1/N more for a second after a node joins).
    check(busiest <= 1.5 * PACED_RATE + 3, f"the paced pool started {busiest} tasks within 1 s (rate {PACED_RATE}/s)")
    figures["keys"] = worst
    figures["paced"] = (len(stamps), busiest)


def restart_database_under_load():
    stop = threading.Event()
    wrong, refused = [], []
    readiness = {node.name: [] for node in nodes}

    def submitter():
        while not stop.is_set():
            kind = random.choice(["delay", "value"])
            job, state, expected = make_job(kind, random.randint(1, 10**6))
            node = random.choice(live_nodes())
            req = urllib.request.Request(f"http://127.0.0.1:{node.port}/v1/jobs", data=json.dumps(job).encode(),
                                         method="POST", headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as response:
                    body = json.loads(response.read())
                    with lock:
                        accepted[body["id"]] = (kind, state, expected, node)
            except urllib.error.HTTPError as error:
                body = json.loads(error.read() or b"null")
                if error.code == 503 and body.get("code") in ("store.unavailable", "store.busy") \
                        and error.headers.get("retry-after"):
                    refused.append(body["code"])
                    time.sleep(0.1)
                else:
                    wrong.append(f"{node.name}: {error.code} {body}")
            except OSError as error:
                wrong.append(f"{node.name}: {error!r}")

    def probe(node):
        while not stop.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node.port}/readyz", timeout=5) as response:
                    readiness[node.name].append((time.time(), response.status))
            except urllib.error.HTTPError as error:
                readiness[node.name].append((time.time(), error.code))
            except OSError as error:
                readiness[node.name].append((time.time(), repr(error)))
            time.sleep(0.1)

    threads = [threading.Thread(target=submitter) for _ in range(4)] + \
        [threading.Thread(target=probe, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    down = time.time()
    kills.append(time.monotonic())
    subprocess.run(["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "postgres.sh"), "stop", STORE_DIR],
                   check=True, capture_output=True)
    # A submission queued in the instant before a server's writer noticed the loss waits for the
    # reconnection and is then stored (201): the four submitters above may all be in such waits
    # (they were, now and then, in CI). Two more start once PostgreSQL is down, so that the
    # refusals during the outage are counted whatever those four are doing.
    late = [threading.Thread(target=submitter) for _ in range(2)]
    for thread in late:
        thread.start()
    threads += late
    time.sleep(4)
    subprocess.run(["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "postgres.sh"), "start", STORE_DIR],
                   check=True, capture_output=True)
    up = time.time()
    kills.append(time.monotonic())
    # Back: every node ready again, and renewing (a lease from before the stop may not have ended:
    # the outage is shorter than the lease).
    back = wait_until(lambda: all(samples and samples[-1][0] > up and samples[-1][1] == 200
                                  for samples in readiness.values())
                      and int(sql("SELECT count(*) FROM servers WHERE heartbeat_at >= "
                                  f"{int(up * 1000)} AND lease_until >= taskserver_now_ms()")[0]) == 3,
                      20, interval=0.2)
    time.sleep(2)
    stop.set()
    for thread in threads:
        thread.join()
    print(f"PostgreSQL away for {up - down:.1f} s: {len(refused)} submissions refused with 503, "
          f"all three registered again: {back}", flush=True)
    check(back, "the three servers registered again after PostgreSQL came back")
    check(not wrong, f"every answer while PostgreSQL restarted is a 201 or a 503 store.* ({len(wrong)}: {wrong[:3]})")
    check(len(refused) > 0, "submissions were refused with 503 while PostgreSQL was away")
    for name, samples in readiness.items():
        during = {status for at, status in samples if down + 0.5 < at < up}
        check(during == {503}, f"{name}'s /readyz while PostgreSQL was away: {sorted(map(str, during))}")
        check(samples and samples[-1][1] == 200, f"{name}'s /readyz after: {samples[-1][1] if samples else None}")
    for node in nodes:
        check(node.server.proc.poll() is None, f"{node.name} is still running")


def read_feed(node, cursor):
    """Every entry of the server-wide feed after `cursor`, read through `node`."""
    items = []
    while True:
        status, page, _ = request("GET", f"/v1/events?after={cursor}&limit=10000", node=node)
        check(status == 200 and not page.get("reset"), f"reading the feed through {node.name}: {status} {page}")
        if status != 200 or not page["items"]:
            return items
        items += page["items"]
        cursor = page["next"]


def verify_feed(start):
    """The server-wide feed (GET /v1/events) is one for every node: the same entries at the same
    cursors through any two, gap-free, with each accepted job's end."""
    first, second = live_nodes()[:2]
    # Each entry's job is as the node knows it when it reads (SPEC §7): compared without it.
    through_first, through_second = ([{k: v for k, v in item.items() if k != "job"} for item in read_feed(node, start)]
                                     for node in (first, second))
    common = min(len(through_first), len(through_second))
    check(common > 0 and through_first[:common] == through_second[:common],
          f"the feed read through {first.name} and {second.name} differs")
    positions = [int(item["cursor"].split(".", 1)[1]) for item in through_first]
    start_position = int(start.split(".", 1)[1])
    check(positions == list(range(start_position + 1, start_position + 1 + len(positions))),
          "the feed's positions follow each other with no gap")
    ends = {(item["jobId"], item["type"]) for item in through_first}
    missing = [job_id for job_id, (_, state, _, _) in accepted.items() if (job_id, f"job.{state}") not in ends]
    check(not missing, f"{len(missing)} accepted jobs have no job.<end> entry in the feed: {missing[:3]}")
    seen = [(item["jobId"], item["seq"]) for item in through_first]
    repeated = sorted({key for key in seen if seen.count(key) > 1}) if len(seen) != len(set(seen)) else []
    # Exactly once: a commit sent again after its answer was lost adds no second entry.
    check(not repeated, f"{len(seen) - len(set(seen))} feed entries repeat an event (job, seq): {repeated[:3]}")
    figures["feed"] = (len(through_first), len(seen) - len(set(seen)))


SCHEDULE = {"id": "chaos", "cron": "* * * * *",
            "job": {"graph": {"type": "task", "id": "t", "action": "value", "params": {"value": "tick"}}}}


def create_schedule():
    status, body, taker = request("POST", "/v1/schedules", SCHEDULE)
    check(status == 201, f"creating the schedule gave {status} {body}")
    for node in nodes:
        if node is not taker:
            seen = wait_until(lambda: request("GET", "/v1/schedules/chaos", node=node)[0] == 200, 10)
            check(seen, f"{node.name} does not show the schedule created through {taker.name}")
    return time.time()


def verify_schedule(created_at, leader_killed_at):
    """Each whole minute after the schedule's creation started one job, within 15 s."""
    minute = lambda t: (int(t) // 60 + 1) * 60  # noqa: E731 - the first whole minute after t
    last = max(minute(created_at), minute(leader_killed_at))
    if time.time() < last + 15:
        print(f"waiting {last + 15 - time.time():.0f} s for a fire after the leader's death", flush=True)
        time.sleep(last + 15 - time.time())
    _, body, _ = request("GET", "/v1/jobs?label=schedule:chaos&limit=1000")
    created = sorted(datetime.fromisoformat(job["createdAt"].replace("Z", "+00:00")).timestamp()
                     for job in body["items"])
    fires = range(minute(created_at), int(time.time()) - 15 + 1, 60)
    for fire in fires:
        count = sum(1 for t in created if fire <= t < fire + 15)
        check(count == 1, f"the fire at {time.strftime('%H:%M:%S', time.gmtime(fire))} UTC started {count} jobs")
    # A fire of the last 15 s (not checked yet) may have started its job already: not counted.
    counted = [t for t in created if t < (fires[-1] + 60 if fires else minute(created_at))]
    check(len(counted) == len(fires), f"the schedule started {len(counted)} jobs for {len(fires)} fires")
    for job in body["items"]:
        status, read, _ = request("GET", f"/v1/jobs/{job['id']}?waitMs=10000")
        check(read.get("state") == "succeeded", f"the schedule's job {job['id']} ended {read.get('state')}")
    figures["fires"] = len(fires)


def main():
    subprocess.run(["psql", STORE_URL, "-qc", f"CREATE SCHEMA {SCHEMA}"], check=True)
    upstream = urllib.parse.urlsplit(STORE_URL)
    nodes.extend([Node("n1"), Node("n2"), Node("n3", proxy=Proxy((upstream.hostname, upstream.port)))])
    started = time.monotonic()
    try:
        print(f"3 nodes on ports {[n.port for n in nodes]}", flush=True)
        status, page, _ = request("GET", "/v1/events")
        check(status == 200 and page["next"].startswith("pg."), f"the feed's cursor: {status} {page}")
        feed_start = page["next"]
        schedule_created_at = create_schedule()
        stop_workers = threading.Event()
        workers = [threading.Thread(target=work, args=(stop_workers, pinned), daemon=True)
                   for pinned in (nodes[0], None)]
        workers.append(threading.Thread(target=slow_work, args=(stop_workers,), daemon=True))
        for worker in workers:
            worker.start()
        for round_number in range(2):
            wave(200)
            settle_awaits(0.4, cancel_fraction=0.15)
            time.sleep(random.uniform(0.3, 1.5))
            if round_number == 0:
                leader_killed_at = time.time()
                kill_and_measure(victim=leader())
            else:
                kill_and_measure()
        wave(100)
        settle_awaits(0.3)
        time.sleep(0.5)
        kill_and_measure(freeze=True)
        stall_with_workers()
        wave(100)
        time.sleep(0.5)
        partition_and_measure(nodes[2])
        if DB_RESTART:
            restart_database_under_load()
        verify()
        verify_feed(feed_start)
        stop_workers.set()
        for worker in workers:
            worker.join()
        claims, elsewhere = figures.get("claims", 0), figures.get("claimed elsewhere", 0)
        check(elsewhere > 0, f"worker tasks were claimed through a node other than the one that took the job "
                             f"({elsewhere} of {claims})")
        check(figures.get("slow 409", 0) > 0,
              f"a keyed worker task's lease expired while its worker ran (late completions answered 409): {figures}")
        verify_schedule(schedule_created_at, leader_killed_at)
        fenced = sum(open(n.log, errors="replace").read().count("a commit was refused") for n in nodes)
        print(f"jobs accepted: {len(accepted)}, awaits completed: {len(completed)}, cancelled: {len(cancelled)}")
        takeovers = sorted(figures.get("takeover", []))
        print(f"takeover: {', '.join(f'{t:.2f} s' for t in takeovers)}")
        print(f"webhook deliveries: {figures['webhooks'][0]}, repeated after a kill: {figures['webhooks'][1]}")
        print(f"commits refused by the fence: {fenced}")
        print(f"schedule fires checked: {figures.get('fires', 0)}")
        print("concurrency keys (most holders at once from the stored times / max / holds): "
              + ", ".join(f"{key} {peak}/{most}/{count}" for key, (peak, most, count) in figures["keys"].items()))
        print(f"paced pool ({PACED_RATE}/s over 3 nodes): {figures['paced'][0]} starts, "
              f"at most {figures['paced'][1]} within any 1 s")
        print("keyed worker tasks whose lease expired while their worker ran: completions by status "
              + ", ".join(f"{key[5:]}: {value}" for key, value in sorted(figures.items()) if key.startswith("slow ")))
        print(f"server-wide feed: {figures['feed'][0]} entries, the same through two nodes, "
              f"none repeated ({figures['feed'][1]})")
        completions = ", ".join(f"{key[12:]}: {value}" for key, value in sorted(figures.items())
                                if key.startswith("completions"))
        print(f"worker tasks claimed: {claims}, through a node other than the one that took the job: {elsewhere}; "
              f"completion answers by status: {completions}")
        stalled, gave_up, stall_claims, statuses, twice = figures["stall"]
        print(f"stall of {stalled:.2f} s (runs given up: {gave_up}): {stall_claims} claims through the others, "
              f"completion answers by status: {', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))}; "
              f"attempts handed out twice: {twice}")
        print(f"run time: {time.monotonic() - started:.1f} s")
    finally:
        for node in nodes:
            try:
                node.server.signal(signal.SIGCONT)
            except Exception:
                pass
            node.server.stop(timeout=30) if node.alive else node.server.kill()
        if not failures:  # kept for a post-mortem otherwise
            subprocess.run(["psql", STORE_URL, "-qc", f"SET client_min_messages = warning; DROP SCHEMA {SCHEMA} CASCADE"],
                           check=False)
    if failures:
        print(f"{len(failures)} failures (logs in {workdir}, rows in schema {SCHEMA})")
        sys.exit(1)
    print("cluster test passed")


main()
