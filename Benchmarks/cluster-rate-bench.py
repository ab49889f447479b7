#!/usr/bin/env python3
"""A pool's rate limit across a cluster (issue #42): 1, 2 and 3 servers on one PostgreSQL, each with
`--executor paced=16,rate=100/s`, each running a map of 3,000 `value` tasks on `paced` (work for the
whole window on every server). Once every server counts the others (2.5 s) and the buckets' bursts
are spent (1 s), the attempts the servers completed (`completed` of `paced` in GET /v1/executors,
summed) are read, again SECONDS later: the cluster's rate, which must be 100/s, not 100/s per server.

Usage: Benchmarks/cluster-rate-bench.py TASKSERVER_BINARY DATABASE_URL [seconds, default 10]
(each server count gets a schema of its own in the database; the role must be able to create one).
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from testserver import TestServer  # noqa: E402

RATE = 100


def call(server, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def completed(servers):
    """The paced pool's completed attempts summed over the servers, and the time in the middle."""
    before = time.monotonic()
    total = 0
    for server in servers:
        items = call(server, "GET", "/v1/executors")["items"]
        total += next(item for item in items if item["name"] == "paced")["completed"]
    return total, (before + time.monotonic()) / 2


def main():
    binary, url = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10
    separator = "&" if "?" in url else "?"
    job = {"name": "cluster-rate-bench", "input": list(range(3000)),
           "graph": {"type": "map", "id": "fan", "items": "${input}",
                     "template": {"type": "task", "id": "paced", "executor": "paced", "action": "value",
                                  "params": {"value": 1}}}}
    print(f"# cluster-rate-bench: --executor paced=16,rate={RATE}/s on every server, {seconds:.0f} s windows")
    for count in (1, 2, 3):
        schema = f"ratebench{os.getpid()}_{count}"
        subprocess.run(["psql", url, "-qc", f"CREATE SCHEMA {schema}"], check=True)
        database = f"{url}{separator}options=-csearch_path%3D{schema}"
        servers = [TestServer(binary, ["--database", database, "--node-name", f"r{i}",
                                       "--executor", f"paced=16,rate={RATE}/s"]) for i in range(count)]
        time.sleep(2.5)  # every server counts the others (a heartbeat each)
        shares = [next(i for i in call(s, "GET", "/v1/executors")["items"] if i["name"] == "paced")["rate"]["share"]
                  for s in servers]
        jobs = [call(server, "POST", "/v1/jobs", job)["id"] for server in servers]
        time.sleep(1)  # the bursts are spent
        c0, t0 = completed(servers)
        time.sleep(seconds)
        c1, t1 = completed(servers)
        rate = (c1 - c0) / (t1 - t0)
        print(f"{count} server(s): {rate:.2f} tasks/s in all ({(rate - RATE) / RATE * 100:+.2f} %), "
              f"{c1 - c0} attempts in {t1 - t0:.2f} s; shares {shares}")
        for server, job_id in zip(servers, jobs):
            call(server, "POST", f"/v1/jobs/{job_id}/cancel")
        for server in servers:
            server.stop()
        subprocess.run(["psql", url, "-qc", f"SET client_min_messages = warning; DROP SCHEMA {schema} CASCADE"],
                       check=True)


if __name__ == "__main__":
    main()
