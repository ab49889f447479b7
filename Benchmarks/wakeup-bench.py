#!/usr/bin/env python3
"""Cross-server claim wake-up (issue #42): two servers on one PostgreSQL, a worker's claim waiting
on server b (`waitMs`), a one-task job of an external pool submitted through server a (which runs
it, so the attempt is queued on a). Measured: from a's 201 to the claim's answer on b, ROUNDS
times; printed p50, p99 and the worst, in ms. Each round's lease is completed, so every round
starts with nothing queued anywhere.

Usage: Benchmarks/wakeup-bench.py TASKSERVER_BINARY DATABASE_URL [rounds, default 200]
(the database: an empty one, e.g. `scripts/postgres.sh start DIR`'s URL; the servers migrate it).
"""
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from testserver import TestServer, wait_until  # noqa: E402

JOB = {"graph": {"type": "task", "id": "t", "executor": "images", "action": "resize"}}


def call(server, method, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def main():
    binary, url = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    args = ["--database", url, "--executor", "images=external"]
    a = TestServer(binary, [*args, "--node-name", "wake-a"])
    b = TestServer(binary, [*args, "--node-name", "wake-b"])
    # Both servers know of each other after a heartbeat each (1 s); then the rounds.
    time.sleep(2.5)
    waits = []
    for _ in range(rounds):
        answer = {}

        def claim():
            answer["items"] = call(b, "POST", "/v1/executors/images/claim",
                                   {"workerId": "bench", "max": 1, "waitMs": 10000})["items"]
            answer["at"] = time.monotonic()

        waiter = threading.Thread(target=claim)
        waiter.start()
        time.sleep(0.05)  # the claim waits on b by now
        job = call(a, "POST", "/v1/jobs", JOB)
        submitted = time.monotonic()
        waiter.join()
        items = answer["items"]
        if len(items) != 1 or items[0]["jobId"] != job["id"]:
            sys.exit(f"the waiting claim got {items}, not {job['id']}'s task")
        waits.append((answer["at"] - submitted) * 1000)
        done = call(b, "POST", "/v1/leases/complete", {"items": [{"leaseId": items[0]["leaseId"], "result": 1}]})
        if done["items"][0]["status"] != 200:
            sys.exit(f"completing the lease: {done}")
        wait_until(lambda: call(a, "GET", f"/v1/jobs/{job['id']}")["state"] == "succeeded", 10)
    a.stop()
    b.stop()
    waits.sort()
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
    print(f"cross-server claim wake-up over {rounds} rounds: p50 {statistics.median(waits):.1f} ms, "
          f"p99 {p99:.1f} ms, worst {waits[-1]:.1f} ms")


if __name__ == "__main__":
    main()
