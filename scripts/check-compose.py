#!/usr/bin/env python3
"""The compose files, as far as this machine allows (no Docker engine, no compose plugin here):

    python3 scripts/check-compose.py PATH/TO/taskserver

Each Docker/compose*.yaml parses; every TASKSERVER_* variable it sets is one `taskserver serve
--help` documents; no secret is written in it (passwords and keys come from the environment or a
secret file); the PostgreSQL variant has a `postgres` service with a volume and a health check,
TaskServer starts only once it is healthy, and its database URL carries no password; the cluster
variant runs several replicas behind HAProxy, whose configuration `haproxy -c` accepts.
"""
import glob
import re
import subprocess
import sys

import yaml

BIN = sys.argv[1]
help_text = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, check=True).stdout
known = set(re.findall(r"TASKSERVER_[A-Z_]+", help_text))
failures = []


def check(condition, message):
    print(("ok: " if condition else "FAIL: ") + message)
    if not condition:
        failures.append(message)


for path in sorted(glob.glob("Docker/compose*.yaml")):
    with open(path) as f:
        compose = yaml.safe_load(f)
    services = compose.get("services", {})
    server = services.get("taskserver")
    check(server is not None, f"{path}: a taskserver service")
    if server is None:
        continue
    environment = server.get("environment", {})
    unknown = sorted(name for name in environment if name.startswith("TASKSERVER_") and name not in known)
    check(not unknown, f"{path}: every TASKSERVER_ variable is documented by serve --help ({unknown})")
    for name, value in environment.items():
        if any(word in name for word in ("SECRET", "API_KEYS", "PASSWORD")) and not name.endswith("_FILE"):
            check(str(value).startswith("${"), f"{path}: {name} comes from the environment, not the file")
    if "postgres" in services:
        postgres = services["postgres"]
        check(bool(postgres.get("volumes")), f"{path}: postgres keeps its data on a volume")
        check("healthcheck" in postgres, f"{path}: postgres has a health check")
        check(server.get("depends_on", {}).get("postgres", {}).get("condition") == "service_healthy",
              f"{path}: taskserver waits until postgres is healthy")
        url = environment.get("TASKSERVER_DATABASE_URL", "")
        check(url.startswith("postgres://") and not re.match(r"postgres://[^/@]*:[^/@]*@", url),
              f"{path}: TASKSERVER_DATABASE_URL names the database without a password ({url})")
        check("TASKSERVER_DATABASE_PASSWORD_FILE" in environment, f"{path}: the password comes from a secret file")

    if "loadbalancer" in services:
        # The cluster: several identical servers behind a load balancer that checks readiness.
        replicas = server.get("deploy", {}).get("replicas", 1)
        check(replicas >= 2, f"{path}: several TaskServers ({replicas})")
        check("TASKSERVER_NODE_NAME" not in environment,
              f"{path}: no fixed node name for replicas (each takes its container's host name)")
        with open("Docker/haproxy.cfg") as f:
            haproxy = f.read()
        check("GET /readyz" in haproxy and "server-template" in haproxy and "taskserver:8080" in haproxy,
              f"{path}: HAProxy sends requests to the replicas whose /readyz is 200")
        check(re.search(r"timeout server\s+1h", haproxy) is not None,
              f"{path}: HAProxy lets long-polls and event streams stay open")
        # Debian's haproxy (2.6; the image runs 2.8) parses the file as the image will.
        parsed = subprocess.run(["haproxy", "-c", "-f", "Docker/haproxy.cfg"], capture_output=True, text=True)
        check(parsed.returncode == 0, f"Docker/haproxy.cfg is valid: {parsed.stdout.strip()}{parsed.stderr.strip()}")

sys.exit(1 if failures else 0)
