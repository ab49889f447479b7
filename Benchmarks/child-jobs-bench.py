#!/usr/bin/env python3
"""What a child job costs (issue #45): a parent with one child against the same work inline, and a
1,000-child fan-out against a 1,000-instance map of tasks.

    python3 Benchmarks/child-jobs-bench.py PATH/TO/taskserver [--store memory|sqlite] [--rounds 300]

One server (`--store`: memory, or a SQLite file with --sync full). Sequential round trips, each a
`POST /v1/jobs?waitMs=…` answered once the job ended:
  inline   {"type": "task", "action": "value"}                            (one job)
  child    {"type": "job", "definition": "leaf"} where leaf is that task  (a parent and its child)
printed as p50 / p99 in ms, alternated round by round. Then, three times each, the time until a job
mapping over 1,000 items ends: inline (1,000 value tasks in one job) and children (1,000 child jobs
of `leaf`), with children per second, the server's resident memory after each run, and the store's
transactions per item (`taskserver_store_commit_duration_seconds_count` from /metrics; on SQLite
each is one fsync'd commit, which group commit shares among the items).
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from testserver import TestServer  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="taskserver-childbench-")
    store = ["--memory"] if args.store == "memory" else ["--data", os.path.join(work, "t.sqlite"), "--sync", "full"]
    server = TestServer(args.binary, store, log=os.path.join(work, "server.log"))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)

    def call(method, path, body=None):
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"content-type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        payload = json.loads(raw or b"null") if path != "/metrics" else raw.decode()
        return response.status, payload

    def commits():
        _, text = call("GET", "/metrics")
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "taskserver_store_commit_duration_seconds_count":
                return float(parts[1])
        return 0.0

    def rss_mib():
        with open(f"/proc/{server.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    leaf = {"type": "task", "id": "v", "action": "value", "params": {"value": "${input}"}}
    status, body = call("PUT", "/v1/definitions/leaf", {"graph": leaf})
    assert status in (200, 201), body
    jobs = {
        "inline": {"graph": leaf, "input": 1},
        "child": {"graph": {"type": "job", "id": "kid", "definition": "leaf"}, "input": 1},
    }
    times = {name: [] for name in jobs}
    for _ in range(20):  # warm-up
        for job in jobs.values():
            call("POST", "/v1/jobs?waitMs=10000", job)
    for _ in range(args.rounds):
        for name, job in jobs.items():
            started = time.perf_counter()
            status, body = call("POST", "/v1/jobs?waitMs=10000", job)
            times[name].append((time.perf_counter() - started) * 1000)
            assert status == 201 and body["state"] == "succeeded" and body["result"] == 1, body
    print(f"store: {args.store}; {args.rounds} sequential round trips each (POST ?waitMs answered at the end)")
    for name, values in times.items():
        values.sort()
        print(f"  {name:7} p50 {statistics.median(values):.2f} ms  p99 {values[int(len(values) * 0.99) - 1]:.2f} ms")
    extra = statistics.median(times["child"]) - statistics.median(times["inline"])
    print(f"  a child job adds {extra:.2f} ms at p50")

    items = list(range(1000))
    fans = {
        "inline": {"input": items, "graph": {"type": "map", "items": "${input}", "template": leaf}},
        "children": {"input": items, "graph": {"type": "map", "items": "${input}",
                                               "template": {"type": "job", "id": "kid", "definition": "leaf"}}},
    }
    print("1,000-item fan-out, time until the job ended (3 runs each, alternated):")
    results = {name: [] for name in fans}
    writes = {name: [] for name in fans}
    memory = {name: [] for name in fans}
    for _ in range(3):
        for name, job in fans.items():
            before = commits()
            started = time.perf_counter()
            status, body = call("POST", "/v1/jobs?waitMs=60000", job)
            took = time.perf_counter() - started
            assert status == 201 and body["state"] == "succeeded" and body["result"] == items, str(body)[:300]
            time.sleep(0.2)  # the last commits of the children's ends
            results[name].append(took)
            writes[name].append((commits() - before) / 1000)
            memory[name].append(rss_mib())
    for name, values in results.items():
        per = 1000 / statistics.median(values)
        print(f"  {name:8} {', '.join(f'{v * 1000:.0f}' for v in values)} ms  ({per:,.0f} items/s at the median); "
              f"store transactions per item {statistics.median(writes[name]):.3f}; "
              f"server RSS after {', '.join(f'{m:.0f}' for m in memory[name])} MiB")
    server.stop()


main()
