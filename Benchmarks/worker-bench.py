"""External worker pools under load (SPEC §6, §10): prints figures, passes or fails nothing.

    python3 Benchmarks/worker-bench.py [--bin PATH] [--memory]        # starts its own server
    python3 Benchmarks/worker-bench.py --server URL [--pool images]  # or uses a running one
    python3 Benchmarks/worker-bench.py … --priorities                # every job a random priority 0..9

Without --server it starts BIN (default $TASKSERVER_BIN, then .build/release/taskserver) with
`serve --executor images=external` on a port of its choosing (scripts/testserver.py), on the memory
store with --memory, else on the default SQLite store (a file in a temporary directory). A given
server needs an external pool (--pool, default images) that nothing else uses during the run.

(a) Throughput. --tasks worker tasks are made ready with few POSTs: jobs that each hold one `map`
    over --per-job items whose template is a task on the pool. Once every task is queued, --workers
    processes (each with one keep-alive http.client connection) claim up to --batch tasks, and
    complete them with the batch form (`POST /v1/leases/complete`) asking for the next ones in the
    same request (`claimNext`). Printed: worker tasks claimed and completed per second, from the
    moment the workers are released to the last completion answer.
(b) Latency. One thread waits in a claim (waitMs 60000); another submits one-task jobs on the pool,
    one at a time, each once the claim is parked. Printed: percentiles of submit start → claim
    returned. That includes the POST, so it bounds ready → claimed from above.

Priorities: by default the jobs carry no `priority` (all 5: one FIFO lane per pool). With
--priorities every job submitted in (a) and (b) gets a `priority` drawn uniformly from 0..9 (a
generator seeded with 1, so two runs submit the same sequence): the ten lanes are in use. The
figures of a run with and a run without it are then compared.
"""
import argparse
import http.client
import json
import multiprocessing as mp
import os
import queue
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Client:
    """One keep-alive HTTP/1.1 connection; JSON in, (status, JSON) out; reconnects once if dropped."""

    def __init__(self, url, api_key=None, timeout=90):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout = parts.hostname, parts.port or 80, timeout
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self.conn = None

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                    self.conn.connect()
                    self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.conn.request(method, path, data, self.headers)
                response = self.conn.getresponse()
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
            except (ConnectionError, http.client.HTTPException):
                self.conn = None
                if attempt == 2:
                    raise

    def post(self, path, body):
        return self.request("POST", path, body)


def percentile(sorted_values, p):  # nearest rank
    return sorted_values[max(0, min(len(sorted_values) - 1, round(p / 100 * len(sorted_values) + 0.5) - 1))]


def summary(sorted_ms):
    figures = "  ".join(f"p{p} {percentile(sorted_ms, p):.3f}" for p in (50, 90, 99))
    return f"{figures}  (min {sorted_ms[0]:.3f}, max {sorted_ms[-1]:.3f}) ms"


def priority_field(args):
    """{} (the default priority, 5) or, with --priorities, {"priority": 0..9} drawn from args.rng."""
    return {"priority": args.rng.randint(0, 9)} if args.priorities else {}


def executor_status(client, pool):
    status, body = client.request("GET", "/v1/executors")
    return next((item for item in body.get("items", []) if item.get("name") == pool), {}) if status == 200 else {}


# ---------------------------------------------------------------- (a) throughput

def worker_process(url, key, pool, batch, total, index, ready, go, done, results):
    client = Client(url, key)
    client.request("GET", "/healthz")  # connect before the clock starts
    worker_id = f"bench-{index}:{os.getpid()}"
    completed = requests = refused = 0
    last = None
    ready.release()
    go.wait()
    cpu = sum(os.times()[:2])
    deadline = time.monotonic() + 600
    items = []
    while time.monotonic() < deadline:
        if not items:
            if done.value >= total:
                break
            claim = {"workerId": worker_id, "max": batch, "waitMs": 200}
            status, body = client.post(f"/v1/executors/{pool}/claim", claim)
            requests += 1
            items = body["items"] if status == 200 else []
            continue
        status, body = client.post("/v1/leases/complete", {
            "items": [{"leaseId": item["leaseId"], "result": item.get("params")} for item in items],
            "claimNext": {"max": batch, "waitMs": 0}})
        requests += 1
        last = time.monotonic()
        if status != 200:
            refused += len(items)
            items = []
            continue
        ok = sum(1 for item in body["items"] if item["status"] == 200)
        refused += len(items) - ok
        completed += ok
        with done.get_lock():
            done.value += ok
        items = body.get("claimed", [])
    results.put({"completed": completed, "requests": requests, "refused": refused, "last": last,
                 "cpu": sum(os.times()[:2]) - cpu})


def process_cpu(pid):
    """User + system CPU seconds of process `pid` (Linux /proc), None when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


def throughput(client, url, args, server_pid):
    jobs = []
    t_submit = time.monotonic()
    left = args.tasks
    priorities = []
    while left > 0:
        n = min(left, args.per_job)
        left -= n
        priority = priority_field(args)
        priorities.append(priority.get("priority", 5))
        status, body = client.post("/v1/jobs", {
            **priority, "name": "worker-bench", "labels": {"bench": "worker"}, "input": {"items": list(range(n))},
            "graph": {"type": "map", "id": "fan", "items": "${input.items}",
                      "template": {"type": "task", "id": "work", "executor": args.pool, "action": "bench",
                                   "params": {"i": "${input}"}}}})
        if status != 201:
            sys.exit(f"POST /v1/jobs: {status} {body}")
        jobs.append(body["id"])
    t_posted = time.monotonic()
    queued = 0
    while time.monotonic() - t_posted < 300:
        queued = executor_status(client, args.pool).get("queued", 0)
        if queued >= args.tasks:
            break
        time.sleep(0.05)
    t_ready = time.monotonic()
    print(f"  setup: {len(jobs)} POSTs in {t_posted - t_submit:.2f} s; {queued:,} tasks queued "
          f"{t_ready - t_submit:.2f} s after the first POST", flush=True)
    if args.priorities:
        spread = ", ".join(f"{p}: {priorities.count(p)}" for p in range(10) if p in priorities)
        lanes = executor_status(client, args.pool).get("queuedByPriority", {})
        print(f"  priorities of the {len(jobs)} jobs (priority: jobs): {spread}; the pool's queue: "
              f"{len(lanes)} lanes", flush=True)

    ready, go, done, results = mp.Semaphore(0), mp.Event(), mp.Value("q", 0), mp.Queue()
    processes = [mp.Process(target=worker_process, args=(url, args.api_key, args.pool, args.batch, args.tasks,
                                                         i, ready, go, done, results))
                 for i in range(args.workers)]
    for process in processes:
        process.start()
    for _ in processes:
        ready.acquire()
    server_cpu = process_cpu(server_pid)
    t0 = time.monotonic()
    go.set()
    stats = [results.get() for _ in processes]
    if server_cpu is not None:
        server_cpu = process_cpu(server_pid) - server_cpu
    for process in processes:
        process.join()
    completed = sum(s["completed"] for s in stats)
    requests = sum(s["requests"] for s in stats)
    refused = sum(s["refused"] for s in stats)
    elapsed = max((s["last"] for s in stats if s["last"]), default=t0) - t0
    rate = completed / elapsed if elapsed > 0 else 0
    print(f"  {completed:,} worker tasks claimed and completed in {elapsed:.3f} s by {args.workers} processes: "
          f"{rate:,.0f} tasks/s", flush=True)
    print(f"  {requests:,} requests (claims and completes), {completed / max(requests, 1):.1f} tasks per request; "
          f"{refused} completions refused", flush=True)
    print(f"  CPU in the window: workers {sum(s['cpu'] for s in stats):.2f} s"
          + (f", server {server_cpu:.2f} s" if server_cpu is not None else "")
          + f" (of {elapsed * (os.cpu_count() or 1):.2f} s on {os.cpu_count()} cores)", flush=True)
    succeeded = 0
    for job in jobs:
        status, body = client.request("GET", f"/v1/jobs/{job}?waitMs=30000")
        succeeded += status == 200 and body["state"] == "succeeded"
    print(f"  jobs succeeded: {succeeded}/{len(jobs)}", flush=True)
    return rate


# ---------------------------------------------------------------- (b) latency

def latency(url, args):
    parked, stop, claimed = threading.Event(), threading.Event(), queue.Queue()

    def claimer():
        client = Client(url, args.api_key)
        while True:
            parked.set()
            status, body = client.post(f"/v1/executors/{args.pool}/claim",
                                       {"workerId": "bench-latency", "max": 1, "waitMs": 60000})
            returned = time.perf_counter()
            items = body["items"] if status == 200 else []
            for item in items:
                claimed.put((item["jobId"], returned))
                client.post("/v1/leases/complete", {"items": [{"leaseId": item["leaseId"], "result": 0}]})
            if stop.is_set() and items:
                return

    thread = threading.Thread(target=claimer, daemon=True)
    thread.start()
    client = Client(url, args.api_key)
    job = {"labels": {"bench": "worker-latency"},
           "graph": {"type": "task", "id": "one", "executor": args.pool, "action": "bench"}}
    to_claim, to_answer = [], []
    for i in range(args.warmup + args.samples):
        parked.wait()
        parked.clear()
        time.sleep(0.005)  # the claim is on its way: let the server park it
        if i == args.warmup + args.samples - 1:
            stop.set()  # the claimer returns after this last job
        body = {**priority_field(args), **job}
        start = time.perf_counter()
        status, body = client.post("/v1/jobs", body)
        answered = time.perf_counter()
        if status != 201:
            sys.exit(f"POST /v1/jobs: {status} {body}")
        job_id, returned = claimed.get(timeout=70)
        if job_id != body["id"]:
            sys.exit(f"the claim returned job {job_id}, not {body['id']}: is another client using the pool?")
        if i >= args.warmup:
            to_claim.append((returned - start) * 1000)
            to_answer.append((answered - start) * 1000)
    thread.join(timeout=10)
    to_claim.sort()
    to_answer.sort()
    print(f"  submit start → claim returned: {summary(to_claim)}", flush=True)
    print(f"  submit start → POST answered:  {summary(to_answer)}  (for comparison)", flush=True)
    return percentile(to_claim, 50)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="a running server (else one is started from --bin)")
    parser.add_argument("--bin", help="the server binary (default $TASKSERVER_BIN, then .build/release/taskserver)",
                        default=os.environ.get("TASKSERVER_BIN", os.path.join(ROOT, ".build/release/taskserver")))
    parser.add_argument("--memory", action="store_true", help="the started server uses the memory store (else SQLite)")
    parser.add_argument("--pool", default="images", help="the external pool (default images)")
    parser.add_argument("--api-key", default=os.environ.get("TASKSERVER_API_KEY"))
    parser.add_argument("--tasks", type=int, default=50000, help="worker tasks in (a) (default 50000)")
    parser.add_argument("--per-job", type=int, default=1000, help="map items per job in (a) (default 1000)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes in (a) (default 4)")
    parser.add_argument("--batch", type=int, default=100, help="tasks per claim and per complete in (a) (default 100)")
    parser.add_argument("--samples", type=int, default=1000, help="jobs measured in (b) (default 1000)")
    parser.add_argument("--warmup", type=int, default=50, help="jobs not measured first in (b) (default 50)")
    parser.add_argument("--priorities", action="store_true",
                        help="give every job a random priority 0..9 (uniform, seeded; else all the default 5)")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    args.rng = random.Random(1)

    server = data = None
    if args.server:
        url, store = args.server.rstrip("/"), "a running server"
    else:
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        from testserver import TestServer  # noqa: E402
        data = tempfile.mkdtemp(prefix="worker-bench-")
        store_args = ["--memory"] if args.memory else ["--data", os.path.join(data, "taskserver.sqlite")]
        server = TestServer(args.bin, [*store_args, "--executor", f"{args.pool}=external", "--log-level", "notice"],
                            log=os.path.join(data, "server.log"))
        url = server.url
        store = "memory store" if args.memory else "SQLite store (default settings)"
    try:
        run(url, store, args, server.proc.pid if server else None)
    finally:
        if server is not None:
            status = server.stop()
            if status != 0:
                print(f"the server exited with status {status} on SIGTERM; its log:\n{server.log_text()}")
            shutil.rmtree(data, ignore_errors=True)


def run(url, store, args, server_pid):
    client = Client(url, args.api_key)
    status, body = client.post(f"/v1/executors/{args.pool}/claim", {"workerId": "bench-check", "waitMs": 0})
    if status != 200 or body["items"]:
        sys.exit(f"pool {args.pool}: claim answered {status} {body} (want an empty external pool)")

    print(f"worker-bench: external worker pool '{args.pool}' on {url}, {store}; "
          f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, client and server on this machine", flush=True)
    if args.priorities:
        print("priorities: random, every job a priority drawn uniformly from 0..9 (seed 1): up to ten lanes", flush=True)
    else:
        print("priorities: FIFO, every job the default priority 5: one lane", flush=True)
    if not args.skip_throughput:
        print(f"(a) throughput: {args.tasks:,} worker tasks (maps of {args.per_job} per job), {args.workers} worker "
              f"processes, claims of up to {args.batch}, batch completes with claimNext "
              f"[SPEC §10: ≥ 20,000/s memory, ≥ 8,000/s SQLite]", flush=True)
        throughput(client, url, args, server_pid)
    if not args.skip_latency:
        print(f"(b) latency: one claim waiting (waitMs 60000), one-task jobs submitted one at a time, {args.samples} "
              f"measured after {args.warmup}; submit start → claim returned includes the POST, so it bounds "
              f"ready → claimed from above [SPEC §10: ≤ 1 ms p50]", flush=True)
        latency(url, args)


if __name__ == "__main__":
    main()
