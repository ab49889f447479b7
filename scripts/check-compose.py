#!/usr/bin/env python3
"""The compose files, as far as this machine allows (no Docker engine, no compose plugin here):

    python3 scripts/check-compose.py PATH/TO/taskserver

Each Docker/compose*.yaml parses; every TASKSERVER_* variable it sets is one `taskserver serve
--help` documents; no secret is written in it (passwords and keys come from the environment or a
secret file); the PostgreSQL variant has a `postgres` service with a volume and a health check,
TaskServer starts only once it is healthy, and its database URL carries no password; the cluster
variant runs several replicas behind HAProxy, whose configuration `haproxy -c` accepts; the tracing
variant exports to an OpenTelemetry Collector whose pipeline sends the spans on to Jaeger.
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

    if "otel-collector" in services:
        # Traces (issue #46): TaskServer → the collector (OTLP/HTTP) → Jaeger (OTLP/gRPC).
        endpoint = str(environment.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""))
        check(endpoint == "http://otel-collector:4318", f"{path}: TaskServer exports to the collector ({endpoint})")
        documented = set(re.findall(r"OTEL_[A-Z_]+", open("Sources/TaskServer/Tracing/TracingConfiguration.swift").read()))
        unknown = sorted(name for name in environment if name.startswith("OTEL_") and name not in documented)
        check(not unknown, f"{path}: every OTEL_ variable is one TaskServer reads ({unknown})")
        collector = services["otel-collector"]
        mounted = [v.split(":")[0] for v in collector.get("volumes", [])]
        check("./otel-collector.yaml" in mounted, f"{path}: the collector reads Docker/otel-collector.yaml")
        with open("Docker/otel-collector.yaml") as f:
            config = yaml.safe_load(f)
        http = config["receivers"]["otlp"]["protocols"].get("http", {})
        check(http.get("endpoint", "").endswith(":4318"), "Docker/otel-collector.yaml: OTLP/HTTP on 4318")
        pipeline = config["service"]["pipelines"]["traces"]
        check(all(name in config["exporters"] for name in pipeline["exporters"])
              and all(name.split("/")[0] in config["receivers"] for name in pipeline["receivers"])
              and all(name in config["processors"] for name in pipeline["processors"]),
              "Docker/otel-collector.yaml: the traces pipeline names components it defines")
        jaeger_endpoint = config["exporters"].get("otlp/jaeger", {}).get("endpoint", "")
        check(jaeger_endpoint == "jaeger:4317" and "jaeger" in services, f"{path}: spans go on to Jaeger")
        check(services["jaeger"].get("environment", {}).get("COLLECTOR_OTLP_ENABLED") == "true",
              f"{path}: Jaeger receives OTLP")

sys.exit(1 if failures else 0)
