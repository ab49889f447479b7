"""A TaskServer worker written against the raw protocol (SPEC §6), with only `requests`.

    python3 examples/worker.py --executor images [--server URL] [--worker-id ID]
                               [--concurrency N] [--api-key KEY]
    python3 examples/worker.py --stdin < task.json   # one task, for `taskserver worker -- …`

The server must declare the pool: `taskserver serve --executor images=external`. The worker
long-polls `POST /v1/executors/{name}/claim` for as many tasks as it has free slots, runs each on
a thread, heartbeats every lease it holds in one `POST /v1/leases/heartbeat` at a third of the
task's heartbeatTimeoutMs, and completes with `POST /v1/leases/complete` (the body form: lease
ids stay out of URLs and logs), asking for the next task in the same request (`claimNext`).
A task whose lease is gone (409) or whose job was cancelled (`cancelRequested`) is abandoned.
SIGTERM/SIGINT: stop claiming, finish the running tasks, exit 0 (a second signal quits at once).
Lease ids are credentials for one attempt: this script never prints them.
"""
import argparse
import os
import signal
import socket
import sys
import threading
import time

import requests


class TaskError(Exception):
    """Fails the attempt with this error; `retryable=False` stops the task's retries."""

    def __init__(self, code, message, retryable=True):
        super().__init__(message)
        self.code, self.message, self.retryable = code, message, retryable


class Cancelled(Exception):
    """The lease is gone or the task was cancelled: stop, complete nothing."""


# ---------------------------------------------------------------- the actions this worker runs
# Each handler gets the claim item (action, params, input, attempt, …) and a context with
# `progress(value)` (sent with the next heartbeat) and `check()` (raises Cancelled when it should stop).

def upper(task, ctx):
    return str((task.get("params") or {}).get("text", "")).upper()


def add(task, ctx):
    numbers = task.get("input")
    if not isinstance(numbers, list) or not all(isinstance(n, (int, float)) for n in numbers):
        raise TaskError("sum.input", "the input must be an array of numbers", retryable=False)
    return sum(numbers)


def nap(task, ctx):
    # params: {"seconds": S, "onAttempt": N?} — sleeps S seconds (only on attempt N when given),
    # reporting progress; heartbeats go on meanwhile (the heartbeat thread).
    params = task.get("params") or {}
    seconds = float(params.get("seconds", 1))
    if "onAttempt" in params and task.get("attempt") != params["onAttempt"]:
        seconds = 0
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ctx.progress({"remainingSeconds": round(left, 1)})
        ctx.check()
        time.sleep(min(left, 0.2))
    return {"slept": seconds, "attempt": task.get("attempt")}


def error(task, ctx):
    # (Not named `fail`: that is a built-in action, which an external pool cannot run.)
    params = task.get("params") or {}
    raise TaskError(params.get("code", "worker.failed"), params.get("message", "failed on purpose"),
                    retryable=False)


HANDLERS = {"upper": upper, "sum": add, "sleep": nap, "error": error}


# ---------------------------------------------------------------- plumbing

def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def describe(item):  # never the lease id
    return f"{item['jobId']}/{item['taskId']} ({item['action']}, attempt {item['attempt']})"


class Lease:
    def __init__(self, item):
        self.item, self.id = item, item["leaseId"]
        self.interval = item["heartbeatTimeoutMs"] / 3000  # seconds between heartbeats
        self.next_beat = time.monotonic() + self.interval
        self.pending_progress, self.has_progress = None, False
        self.stop = threading.Event()  # set on cancelRequested or lease.gone

    def progress(self, value):
        self.pending_progress, self.has_progress = value, True

    def check(self):
        if self.stop.is_set():
            raise Cancelled()


class Worker:
    def __init__(self, args):
        self.args, self.base = args, args.server.rstrip("/")
        self.headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        self.local = threading.local()  # one requests.Session (keep-alive connection) per thread
        self.lock = threading.Condition()
        self.free = args.concurrency  # slots not running a task nor reserved for a claim
        self.leases = {}  # lease id → Lease, for the heartbeat thread
        self.running = 0  # task threads alive
        self.stopping = threading.Event()
        self.new_lease = threading.Event()  # wakes the heartbeat thread

    def post(self, path, body, timeout=30):
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
            self.local.session.headers.update(self.headers)
        return self.local.session.post(self.base + path, json=body, timeout=timeout)

    # -- slots: a slot is reserved before a claim asks for a task, so we never hold more than N
    def take_slots(self, wait):
        with self.lock:
            while wait and self.free == 0 and not self.stopping.is_set():
                self.lock.wait(1)
            n, self.free = self.free, 0
            return n

    def give_slots(self, n):
        with self.lock:
            self.free += n
            self.lock.notify_all()

    def start(self, item):  # runs on a thread that owns one slot until it ends
        with self.lock:
            self.running += 1
        threading.Thread(target=self.run_chain, args=(item,)).start()

    def wait_idle(self):
        with self.lock:
            while self.running:
                self.lock.wait()

    # -- the claim loop (main thread): long-polls for as many tasks as there are free slots
    def claim_loop(self):
        body = {"workerId": self.args.worker_id, "actions": sorted(HANDLERS), "waitMs": 20000}
        delay = 0.5  # back-off after a failed claim
        while not self.stopping.is_set():
            n = self.take_slots(wait=True)
            if n == 0:
                continue
            try:
                response = self.post(f"/v1/executors/{self.args.executor}/claim", {**body, "max": n}, timeout=40)
                if response.status_code in (404, 409):  # executor.notFound / executor.notExternal
                    problem = response.json()
                    sys.exit(f"claim: {response.status_code} {problem.get('code')}: {problem.get('detail')}")
                if response.status_code == 429:  # executor.tooManyClaims: come back later
                    delay = float(response.headers.get("Retry-After", 1))
                response.raise_for_status()
                items, delay = response.json()["items"], 0.5
            except (requests.RequestException, IOError, ValueError) as error:
                log(f"claim failed ({type(error).__name__}: {error}); retrying in {delay:.1f} s")
                items = []
                self.stopping.wait(delay)
                delay = min(delay * 2, 10)
            self.give_slots(n - len(items))
            for item in items:
                self.start(item)

    # -- a task thread: run, complete (asking for the next task while slots are free), repeat
    def run_chain(self, item):
        while item is not None:
            outcome = self.execute(item)
            extra = 0 if self.stopping.is_set() else self.take_slots(wait=False)
            claimed = self.complete(item, outcome, None if self.stopping.is_set() else 1 + extra)
            for other in claimed[1:]:
                self.start(other)
            item = claimed[0] if claimed else None
            self.give_slots(extra + 1 - len(claimed) if claimed else extra)
        with self.lock:
            self.free += 1
            self.running -= 1
            self.lock.notify_all()

    def execute(self, item):
        lease = Lease(item)
        with self.lock:
            self.leases[lease.id] = lease
        self.new_lease.set()
        log("start", describe(item))
        try:
            handler = HANDLERS.get(item["action"])
            if handler is None:
                raise TaskError("worker.unknownAction", f"no handler for {item['action']}", retryable=False)
            return {"result": handler(item, lease)}
        except Cancelled:
            log("stop ", describe(item), "— cancelled or lease gone; nothing to complete")
            return None
        except TaskError as error:
            return {"error": {"code": error.code, "message": error.message}, "retryable": error.retryable}
        except Exception as error:  # a bug in a handler: report it, let the task's retry decide
            return {"error": {"code": "worker.exception", "message": f"{type(error).__name__}: {error}"}}
        finally:
            with self.lock:
                self.leases.pop(lease.id, None)

    def complete(self, item, outcome, claim_max):
        if outcome is None:
            return []
        body = {"items": [{"leaseId": item["leaseId"], **outcome}]}
        if claim_max:
            body["claimNext"] = {"max": claim_max, "waitMs": 0, "actions": sorted(HANDLERS)}
        for attempt in range(5):  # the lease stays valid until it expires: a retry is safe
            try:
                response = self.post("/v1/leases/complete", body)
                if 400 <= response.status_code < 500:  # a bad body: retrying would not help
                    log("complete refused:", response.status_code, response.text[:300])
                    return []
                response.raise_for_status()
                answer = response.json()
                break
            except (requests.RequestException, ValueError) as error:
                log(f"complete failed ({type(error).__name__}); retrying")
                time.sleep(0.2 * 2 ** attempt)
        else:
            log("gave up completing", describe(item))
            return []
        status = answer["items"][0]
        if status["status"] == 200:
            log("done " if "result" in outcome else "error", describe(item), outcome.get("error", {}).get("code", ""))
        else:  # 409 lease.gone: expired or cancelled meanwhile — the outcome was not recorded
            log("drop ", describe(item), f"— {status['status']} {status.get('code')}")
        return answer.get("claimed", [])

    # -- one batch heartbeat for every lease that is due, at a third of its heartbeatTimeoutMs
    def heartbeat_loop(self):
        while True:
            now = time.monotonic()
            with self.lock:
                due = [lease for lease in self.leases.values() if lease.next_beat <= now][:100]
                wake = min([lease.next_beat for lease in self.leases.values()], default=now + 0.5)
            if due:
                items = []
                for lease in due:
                    lease.next_beat = now + lease.interval
                    entry = {"leaseId": lease.id}
                    if lease.has_progress:
                        entry["progress"] = lease.pending_progress
                    items.append(entry)
                try:
                    response = self.post("/v1/leases/heartbeat", {"items": items}, timeout=10)
                    response.raise_for_status()
                    for lease, status in zip(due, response.json()["items"], strict=True):
                        if status["status"] != 200 or status.get("cancelRequested"):
                            lease.stop.set()
                except (requests.RequestException, ValueError) as error:
                    log(f"heartbeat failed ({type(error).__name__}); trying again soon")
                    for lease in due:
                        lease.next_beat = now + 0.5
                continue
            self.new_lease.wait(max(0.01, min(wake - time.monotonic(), 0.5)))
            self.new_lease.clear()


def run_stdin():
    """One task from standard input (the reference worker's format), its result on standard output."""
    import json
    task = json.load(sys.stdin)
    ctx = Lease({"leaseId": "", "heartbeatTimeoutMs": 60000})
    try:
        print(json.dumps(HANDLERS[task["action"]](task, ctx)))
    except (TaskError, KeyError) as error:
        sys.exit(f"{getattr(error, 'code', 'worker.unknownAction')}: {error}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("TASKSERVER_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--executor", default="images", help="the external pool (default images)")
    parser.add_argument("--worker-id", default=f"{socket.gethostname()}:{os.getpid()}")
    parser.add_argument("--concurrency", type=int, default=4, help="tasks run at once (threads)")
    parser.add_argument("--api-key", default=os.environ.get("TASKSERVER_API_KEY"))
    parser.add_argument("--stdin", action="store_true", help="run one task read from stdin, then exit")
    args = parser.parse_args()
    if args.stdin:
        return run_stdin()
    worker = Worker(args)

    def on_signal(number, frame):
        if worker.stopping.is_set():
            os._exit(1)  # second signal: quit now (held leases expire and are retried)
        # A claim in flight is waited for (≤ 20 s): a task the server hands it must be run.
        log(f"{signal.Signals(number).name}: no more claims; finishing the running tasks and the claim in flight")
        worker.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log(f"worker {args.worker_id} on {args.server} pool {args.executor}, "
        f"{args.concurrency} slots, actions {', '.join(sorted(HANDLERS))}")
    heartbeats = threading.Thread(target=worker.heartbeat_loop, daemon=True)
    heartbeats.start()
    worker.claim_loop()  # returns once stopping (after the claim in flight came back)
    worker.wait_idle()
    log("stopped")


if __name__ == "__main__":
    main()
