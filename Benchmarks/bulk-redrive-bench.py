"""Bulk redrive of many failed jobs (issue #45): prints figures, passes or fails nothing.

    python3 Benchmarks/bulk-redrive-bench.py BIN [--jobs 10000] [--seconds 5]

Starts BIN with `serve --data DIR/taskserver.sqlite --sync full` (scripts/testserver.py). Submits
--jobs one-task jobs that fail at once (the `fail` action; POST /v1/jobs/batch, 1,000 a request)
and waits until all have failed. Then a second client posts one-task jobs one at a time on a
keep-alive connection ("other traffic") for --seconds alone, and again while the first client
redrives every failed job with POST /v1/jobs/redrive?state=failed&limit=1000, following nextCursor.
Each redriven job fails again at once (its task is the same `fail`), so the redrive is the whole
store work of a failed job coming back: reopen, run, fail, commit.

Printed (`name value unit`): the redrive's wall time, calls and jobs/s, the jobs it left alone, and
the other traffic's request p50/p99 alone and during the redrive, with their ratio.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from testserver import TestServer

HEADERS = {"content-type": "application/json"}
FAILING = {"labels": {"bench": "outage"},
           "graph": {"type": "task", "action": "fail", "params": {"code": "ledger.down", "message": "503"}}}
OTHER = json.dumps({"graph": {"type": "task", "action": "value", "params": {"value": 1}}}).encode()


def connect(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def call(conn, method, path, body=None):
    conn.request(method, path, body, HEADERS)
    response = conn.getresponse()
    return response.status, response.read()


def percentile(values, p):
    values = sorted(values)
    return values[max(0, min(len(values) - 1, round(p / 100 * len(values) + 0.5) - 1))]


def other_traffic(port, stop, times):
    conn = connect(port)
    while not stop.is_set():
        start = time.perf_counter()
        status, raw = call(conn, "POST", "/v1/jobs", OTHER)
        if status != 201:
            sys.exit(f"other traffic: {status} {raw[:200]!r}")
        times.append(time.perf_counter() - start)
    conn.close()


def count_failed(conn):
    total, cursor = 0, None
    while True:
        status, raw = call(conn, "GET", "/v1/jobs?state=failed&label=bench:outage&limit=1000"
                           + (f"&cursor={cursor}" if cursor else ""))
        page = json.loads(raw)
        total += len(page["items"])
        cursor = page["nextCursor"]
        if not cursor:
            return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bin")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="bulk-redrive-bench-")
    server = TestServer(args.bin, ["--data", os.path.join(data, "taskserver.sqlite"), "--sync", "full",
                                   "--log-level", "notice"], log=os.path.join(data, "server.log"))
    try:
        conn = connect(server.port)
        for start in range(0, args.jobs, 1000):
            size = min(1000, args.jobs - start)
            status, raw = call(conn, "POST", "/v1/jobs/batch", json.dumps({"jobs": [FAILING] * size}).encode())
            if status != 200:
                sys.exit(f"batch: {status} {raw[:300]!r}")
        deadline = time.monotonic() + 120
        while count_failed(conn) < args.jobs:
            if time.monotonic() > deadline:
                sys.exit("the jobs did not all fail within 120 s")
            time.sleep(0.5)
        print(f"# bulk-redrive-bench: {args.jobs:,} failed jobs on SQLite --sync full; "
              f"{os.cpu_count()} cores shared by clients and server", flush=True)

        alone = []
        stop = threading.Event()
        worker = threading.Thread(target=other_traffic, args=(server.port, stop, alone))
        worker.start()
        time.sleep(args.seconds)
        stop.set()
        worker.join()

        during = []
        stop = threading.Event()
        worker = threading.Thread(target=other_traffic, args=(server.port, stop, during))
        worker.start()
        time.sleep(0.5)
        begin = time.perf_counter()
        redriven = left = calls = 0
        cursor = None
        while True:
            status, raw = call(conn, "POST", "/v1/jobs/redrive?state=failed&label=bench:outage&limit=1000"
                               + (f"&cursor={cursor}" if cursor else ""))
            if status != 200:
                sys.exit(f"redrive: {status} {raw[:300]!r}")
            calls += 1
            page = json.loads(raw)
            for item in page["items"]:
                if item["status"] == 202:
                    redriven += 1
                else:
                    left += 1
            cursor = page["nextCursor"]
            if not cursor:
                break
        elapsed = time.perf_counter() - begin
        time.sleep(0.5)
        stop.set()
        worker.join()
        print(f"redrive_seconds {elapsed:.2f} s", flush=True)
        print(f"redrive_calls {calls} calls of at most 1,000", flush=True)
        print(f"redrive_jobs_per_s {redriven / elapsed:.0f} jobs/s ({redriven:,} redriven, {left:,} left alone)",
              flush=True)
        a50, a99 = percentile(alone, 50) * 1000, percentile(alone, 99) * 1000
        d50, d99 = percentile(during, 50) * 1000, percentile(during, 99) * 1000
        print(f"other_p50_ms {a50:.2f} alone, {d50:.2f} during the redrive", flush=True)
        print(f"other_p99_ms {a99:.2f} alone, {d99:.2f} during the redrive ({d99 / a99:.1f}x)", flush=True)
        conn.close()
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
