"""Bulk submission on the durable store (SPEC §8 `POST /v1/jobs/batch`): prints figures, passes or fails nothing.

    python3 Benchmarks/batch-bench.py BIN [--seconds 10] [--batch 500]

Starts BIN (a taskserver binary, e.g. .build/release/taskserver) with `serve --data DIR/taskserver.sqlite
--sync full` (fsync on every commit) in a temporary directory, on a port of its choosing
(scripts/testserver.py), and stops it at the end. One client: one thread, one keep-alive HTTP/1.1
connection (http.client, TCP_NODELAY), each request answered before the next is sent. Every job is
the one-task job {"graph": {"type": "task", "action": "value", "params": {"value": 1}}} (it runs on
the `default` pool as it is accepted, as in the other POST benchmarks).

  phase A  one job per `POST /v1/jobs` for --seconds; every answer must be 201;
  phase B  --batch jobs per `POST /v1/jobs/batch` for --seconds; every item must be 201 (each 201
           item is committed when the answer comes). The body is encoded once, before the clock
           starts: the loop measures the request and its answer (read and parsed with json.loads,
           as the client must to check each item's status).
  phase B' the same with `?answer=ids` (each item `{"status", "id"}`: no job representations to
           encode and parse).

Printed, one figure a line (`name value unit`): jobs per second in each phase and their ratio, the
request time percentiles of each phase, the CPU the client and the server used per wall second in
each phase (client and server share this machine's cores), and, from the server's /metrics, its store
transactions per phase (`taskserver_store_commit_duration_seconds_count`: submissions and the jobs'
own progress and completion writes, grouped), jobs per transaction, and the share of the phase's wall
time spent inside transactions (`…_sum`, fsync included: near 100 % means the writer is the limit).
Target (issue): batch_jobs_per_s ≥ 20,000 durable jobs/s in batches of 500 (PgQueuer's batch
enqueue does ~5,900/s on this machine; one job per request ~1,900/s).

  phase C  (--pgqueuer) PgQueuer's batch enqueue in the same sitting: `Queries.enqueue` of --batch
           jobs (entrypoint "bench", the same job JSON as payload) per call for --seconds, one
           asyncpg connection, on a PostgreSQL started here with fsync and synchronous_commit on
           (scripts/postgres.sh --durable), so each returned batch is as durable as a 201 item on
           `--sync full`. Needs PgQueuer and asyncpg (`pip install pgqueuer==1.6.0 asyncpg`).
           Prints pgqueuer_jobs_per_s, its request percentiles, the PostgreSQL server's CPU, and
           `ratio … batch/pgqueuer` (issue #44's target: ≥ 1.5).
"""
import argparse
import http.client
import asyncio
import json
import os
import shutil
import subprocess
import socket
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from testserver import TestServer

JOB = {"graph": {"type": "task", "action": "value", "params": {"value": 1}}}
HEADERS = {"content-type": "application/json"}


def percentile(sorted_values, p):  # nearest rank
    return sorted_values[max(0, min(len(sorted_values) - 1, round(p / 100 * len(sorted_values) + 0.5) - 1))]


def process_cpu(pid):
    """User + system CPU seconds of process `pid` (Linux /proc), None when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu():
    times = os.times()
    return times.user + times.system


def connect(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def call(conn, method, path, body=None):
    conn.request(method, path, body, HEADERS)
    response = conn.getresponse()
    return response.status, response.read()


def metric(conn, name):
    """The value of an unlabelled sample of the server's /metrics, None when absent."""
    status, raw = call(conn, "GET", "/metrics")
    if status != 200:
        return None
    for line in raw.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    return None


def timed_loop(conn, path, body, status, count, seconds):
    """POSTs `body` to `path` until `seconds` have passed; every answer must have `status`, and
    `count(parsed answer)` says how many jobs it accepted (it exits on a wrong one). Returns
    (jobs, elapsed, request times)."""
    times = []
    jobs = 0
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        conn.request("POST", path, body, HEADERS)
        response = conn.getresponse()
        raw = response.read()
        if response.status != status:
            sys.exit(f"POST {path}: {response.status} {raw[:500]!r}")
        jobs += count(json.loads(raw))
        end = time.perf_counter()
        times.append(end - now)
        now = end
    return jobs, now - start, times


def single_loop(conn, body, seconds):
    """Phase A: one job per POST /v1/jobs (201)."""
    return timed_loop(conn, "/v1/jobs", body, 201, lambda job: 1, seconds)


def batch_loop(conn, body, size, seconds, path="/v1/jobs/batch"):
    """Phase B: `size` jobs per POST /v1/jobs/batch (200, every item 201); `path` with ?answer=ids:
    phase B', the same answered with ids only."""
    def count(answer):
        items = answer["items"]
        if len(items) != size:
            sys.exit(f"POST /v1/jobs/batch: {len(items)} items for {size} jobs")
        for item in items:
            if item["status"] != 201:
                sys.exit(f"POST /v1/jobs/batch: an item answered {item}")
        return size
    return timed_loop(conn, path, body, 200, count, seconds)


def phase(name, loop, conn, server_pid):
    """Runs `loop` (→ jobs, elapsed, request times); prints its figures; returns jobs per second."""
    commits0 = metric(conn, "taskserver_store_commit_duration_seconds_count")
    busy0 = metric(conn, "taskserver_store_commit_duration_seconds_sum")
    client0, server0 = own_cpu(), process_cpu(server_pid)
    jobs, elapsed, times = loop()
    client1, server1 = own_cpu(), process_cpu(server_pid)
    commits1 = metric(conn, "taskserver_store_commit_duration_seconds_count")
    busy1 = metric(conn, "taskserver_store_commit_duration_seconds_sum")
    rate = jobs / elapsed
    times = sorted(t * 1000 for t in times)
    print(f"{name}_jobs_per_s {rate:.0f} jobs/s", flush=True)
    print(f"{name}_jobs {jobs} jobs in {elapsed:.3f} s, {len(times)} requests", flush=True)
    print(f"{name}_request_ms_p50 {percentile(times, 50):.3f} ms", flush=True)
    print(f"{name}_request_ms_p99 {percentile(times, 99):.3f} ms", flush=True)
    print(f"{name}_client_cpu_per_s {(client1 - client0) / elapsed:.2f} cores", flush=True)
    if server0 is not None and server1 is not None:
        print(f"{name}_server_cpu_per_s {(server1 - server0) / elapsed:.2f} cores", flush=True)
    if commits0 is not None and commits1 is not None:
        commits = commits1 - commits0
        print(f"{name}_commits {commits:.0f} commits (store transactions during the phase)", flush=True)
        if commits > 0:
            print(f"{name}_jobs_per_commit {jobs / commits:.1f} jobs/commit", flush=True)
        if busy0 is not None and busy1 is not None:
            print(f"{name}_commit_busy_pct {(busy1 - busy0) / elapsed * 100:.0f} % (wall time inside store "
                  f"transactions, fsync included)", flush=True)
    return rate


def postgres_cpu():
    """User + system CPU seconds of every `postgres` process (the server and its backends)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() != "postgres":
                        continue
            except OSError:
                continue
            total += process_cpu(int(pid)) or 0.0
    return total


def pgqueuer_phase(url, payload, size, seconds):
    """Phase C: PgQueuer's batch enqueue (see the module's docstring). Returns jobs per second."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    async def run():
        connection = await asyncpg.connect(url)
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        names, payloads, priorities = ["bench"] * size, [payload] * size, [0] * size

        async def loop(duration):
            times, jobs = [], 0
            start = time.perf_counter()
            now = start
            while now < start + duration:
                ids = await queries.enqueue(names, payloads, priorities)
                if len(ids) != size:
                    sys.exit(f"pgqueuer: {len(ids)} ids for {size} jobs")
                jobs += size
                end = time.perf_counter()
                times.append(end - now)
                now = end
            return jobs, now - start, times

        await loop(0.5)  # warm-up: the connection's prepared statement, the table's first pages
        client0, server0 = own_cpu(), postgres_cpu()
        jobs, elapsed, times = await loop(seconds)
        client1, server1 = own_cpu(), postgres_cpu()
        await connection.close()
        rate = jobs / elapsed
        times = sorted(t * 1000 for t in times)
        print(f"pgqueuer_jobs_per_s {rate:.0f} jobs/s", flush=True)
        print(f"pgqueuer_jobs {jobs} jobs in {elapsed:.3f} s, {len(times)} calls", flush=True)
        print(f"pgqueuer_request_ms_p50 {percentile(times, 50):.3f} ms", flush=True)
        print(f"pgqueuer_request_ms_p99 {percentile(times, 99):.3f} ms", flush=True)
        print(f"pgqueuer_client_cpu_per_s {(client1 - client0) / elapsed:.2f} cores", flush=True)
        print(f"pgqueuer_postgres_cpu_per_s {(server1 - server0) / elapsed:.2f} cores", flush=True)
        return rate

    return asyncio.run(run())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bin", help="the taskserver binary (e.g. .build/release/taskserver)")
    parser.add_argument("--seconds", type=float, default=10, help="seconds per phase (default 10)")
    parser.add_argument("--batch", type=int, default=500, help="jobs per POST /v1/jobs/batch in phase B (default 500)")
    parser.add_argument("--asleep", action="store_true",
                        help="every job carries delayMs of one hour: intake only (nothing runs in the window), "
                             "as a queue's enqueue is")
    parser.add_argument("--pgqueuer", action="store_true",
                        help="phase C: PgQueuer's batch enqueue on a durable PostgreSQL started here")
    args = parser.parse_args()
    if not 1 <= args.batch <= 1000:
        sys.exit("--batch must be 1..1000")

    job = dict(JOB, delayMs=3_600_000) if args.asleep else JOB
    data = tempfile.mkdtemp(prefix="batch-bench-")
    server = TestServer(args.bin, ["--data", os.path.join(data, "taskserver.sqlite"), "--sync", "full",
                                   "--log-level", "notice"], log=os.path.join(data, "server.log"))
    try:
        conn = connect(server.port)
        single_body = json.dumps(job).encode()
        batch_body = json.dumps({"jobs": [job] * args.batch}).encode()
        print(f"# batch-bench: SQLite store, --sync full, one client (1 thread, 1 keep-alive connection), "
              f"{args.seconds:g} s per phase, batches of {args.batch} ({len(batch_body):,} bytes)"
              f"{', jobs asleep (delayMs 1 h: intake only)' if args.asleep else ', jobs run as they come'}; "
              f"{os.cpu_count()} cores shared by client and server", flush=True)
        # Warm-up, not measured: the connection, the file's first pages, both routes.
        single_loop(conn, single_body, 0.5)
        batch_loop(conn, batch_body, args.batch, 0.5)
        single = phase("single", lambda: single_loop(conn, single_body, args.seconds), conn, server.proc.pid)
        batch = phase("batch", lambda: batch_loop(conn, batch_body, args.batch, args.seconds), conn, server.proc.pid)
        print(f"ratio {batch / single:.2f} batch/single", flush=True)
        lean_path = "/v1/jobs/batch?answer=ids"
        lean = phase("batch ids", lambda: batch_loop(conn, batch_body, args.batch, args.seconds, lean_path),
                     conn, server.proc.pid)
        print(f"ratio {lean / batch:.2f} batch ids/batch", flush=True)
        conn.close()
        if args.pgqueuer:
            pg = os.path.join(data, "pg")
            os.chmod(data, 0o755)  # scripts/postgres.sh runs the server as the postgres user
            url = subprocess.run(["bash", os.path.join(ROOT, "scripts", "postgres.sh"), "start", pg, "--durable"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            try:
                theirs = pgqueuer_phase(url, json.dumps(job).encode(), args.batch, args.seconds)
                print(f"ratio {batch / theirs:.2f} batch/pgqueuer, {lean / theirs:.2f} batch ids/pgqueuer", flush=True)
            finally:
                subprocess.run(["bash", os.path.join(ROOT, "scripts", "postgres.sh"), "stop", pg],
                               capture_output=True)
    finally:
        status = server.stop()
        if status != 0:
            print(f"the server exited with status {status} on SIGTERM; its log:\n{server.log_text()}")
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
