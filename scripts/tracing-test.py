#!/usr/bin/env python3
"""Traces from outside (issue #46): a real taskserver exports OTLP/HTTP to a receiver that decodes
it with the official protobuf definitions (Tests/tracing/otlp_receiver.py), and this script checks
the span tree of one job that does everything — a caller's traceparent, a concurrency-key wait, a
worker lease (`taskserver worker`, its command reading TRACEPARENT), an `http` call retried once,
a webhook delivery — then a redrive, and that no secret reached a span.

    [TEST_STORE_URL=postgres://…] tracing-test.py BINARY [--store memory|sqlite] [--screenshot PNG]

With --screenshot, the job's trace is drawn from the received spans and photographed with headless
Chromium (Tests/tracing/trace_picture.py; docs/traces.md shows it, docs/screenshots/trace.png).

Exit status 0 when every check passes; the failing check and the spans otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "tracing"))
from testserver import TestServer, wait_until  # noqa: E402
import otlp_receiver  # noqa: E402

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
API_KEY = "test-api-key-SECRET-1"
WEBHOOK_SECRET = "whsec_c2VjcmV0LXdlYmhvb2sta2V5LTEyMzQ1Ng=="
INPUT_MARKER = "INPUT-MARKER-9f2c"
RESULT_MARKER = "RESULT-MARKER-41d7"
QUERY_SECRET = "QUERYSECRET77"

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)
    return condition


class Downstream:
    """The `http` task's target (500 on its first call, then 200 with the result marker) and the
    webhook's receiver; records each request's traceparent."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []
        self.hooks = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.lock:
                    if self.path.startswith("/hook"):
                        outer.hooks.append((dict(self.headers), body))
                        status, answer = 200, b"{}"
                    else:
                        outer.calls.append(dict(self.headers))
                        first = len(outer.calls) == 1
                        status, answer = (500, b"{}") if first else (200, json.dumps({"r": RESULT_MARKER}).encode())
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def request(server, method, path, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method=method)
    req.add_header("authorization", "Bearer " + API_KEY)
    if data is not None:
        req.add_header("content-type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def load_spans(path):
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--store", default="sqlite", choices=["memory", "sqlite"])
    parser.add_argument("--screenshot", default=None, help="draw the job's trace into this PNG")
    args = parser.parse_args()
    args.database = os.environ.get("TEST_STORE_URL") or None

    work = tempfile.mkdtemp(prefix="tracing-test-")
    spans_path = os.path.join(work, "spans.jsonl")
    receiver, _ = otlp_receiver.serve(0, spans_path)
    collector = f"http://127.0.0.1:{receiver.server_address[1]}"
    downstream = Downstream()

    store = ["--database", args.database] if args.database else (
        ["--memory"] if args.store == "memory" else ["--data", os.path.join(work, "ts.sqlite")])
    env = dict(os.environ, OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="tracing-test",
               OTEL_RESOURCE_ATTRIBUTES="deployment.environment=ci")
    server = TestServer(args.binary, [*store, "--otlp-endpoint", collector, "--executor", "work=external",
                                      "--api-key", API_KEY, "--log-format", "json", "--log-level", "debug"],
                        env=env, log=os.path.join(work, "server.log"))
    worker_env = dict(os.environ, TASKSERVER_API_KEY=API_KEY)
    worker = subprocess.Popen(
        [args.binary, "worker", "--executor", "work", "--server", server.url, "--",
         "sh", "-c", 'cat > /dev/null; printf \'{"traceparent": "%s"}\' "$TRACEPARENT"'],
        env=worker_env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "worker.log"), "wb"))
    try:
        # A first job holds the key, so the traced job's first task waits for it.
        holder = {"graph": {"type": "task", "id": "hold", "action": "delay", "params": {"ms": 400},
                            "concurrency": {"key": "k", "max": 1}}}
        status, _ = request(server, "POST", "/v1/jobs", holder)
        check(status == 201, f"the key holder was not created: {status}")
        job = {
            "name": "traced",
            "input": {"marker": INPUT_MARKER},
            "webhook": {"url": downstream.url + "/hook", "secret": WEBHOOK_SECRET, "events": ["job.succeeded"]},
            "graph": {"type": "series", "id": "main", "steps": [
                {"type": "task", "id": "keyed", "action": "delay", "params": {"ms": 10},
                 "concurrency": {"key": "k", "max": 1}},
                {"type": "task", "id": "worked", "action": "thumbnail", "executor": "work"},
                {"type": "task", "id": "called", "action": "http",
                 "params": {"method": "POST", "url": downstream.url + "/call?token=" + QUERY_SECRET,
                            "body": {"secret": "${job.input.marker}"}},
                 "retry": {"maxAttempts": 2, "delayMs": 10, "on": ["http.status"]}},
            ]},
        }
        traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
        status, created = request(server, "POST", f"/v1/jobs?waitMs=20000&apiKey={QUERY_SECRET}", job,
                                  {"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE"})
        check(status == 201, f"submit: {status} {created}")
        check(created.get("state") == "succeeded", f"the job did not succeed: {created}")
        check(created.get("traceId") == CALLER_TRACE, f"traceId {created.get('traceId')}")
        job_id = created.get("id")

        # A job that fails, redriven: the redriven run is a span under the job's.
        status, failing = request(server, "POST", "/v1/jobs?waitMs=10000",
                                  {"name": "redriven", "graph": {"type": "task", "id": "f", "action": "fail"}},
                                  {"traceparent": traceparent})
        check(failing.get("state") == "failed", f"the failing job: {failing}")
        status, _ = request(server, "POST", f"/v1/jobs/{failing['id']}/redrive")
        check(status == 202, f"redrive: {status}")
        request(server, "GET", f"/v1/jobs/{failing['id']}?waitMs=10000")

        def tree_complete():
            names = [s["name"] for s in load_spans(spans_path)]
            return "webhook job.succeeded" in names and "redrive" in names and "job traced" in names
        check(wait_until(tree_complete, 20), "the spans did not all arrive: "
              + ", ".join(sorted({s["name"] for s in load_spans(spans_path)})))
        spans = load_spans(spans_path)
        mine = [s for s in spans if s["traceId"] == CALLER_TRACE]
        by_id = {s["spanId"]: s for s in mine}

        def one(name, **where):
            found = [s for s in mine if s["name"] == name and all(s["attributes"].get(k) == v for k, v in where.items())]
            check(len(found) >= 1, f"no span {name} {where}")
            return found[0] if found else {"spanId": None, "parentSpanId": None, "attributes": {}, "events": [],
                                           "kind": None, "status": {}}

        post = [s for s in mine if s["name"] == "POST /v1/jobs" and s["parentSpanId"] == CALLER_SPAN]
        check(len(post) == 2, f"{len(post)} request spans under the caller's span")
        job_span = one("job traced")
        check(job_span["parentSpanId"] in {s["spanId"] for s in post}, "the job's span is not under its request")
        check(job_span["kind"] == "internal", f"job span kind {job_span['kind']}")
        check(job_span["attributes"].get("taskserver.job.id") == job_id, "taskserver.job.id")
        check(any(e["name"] == "job.started" for e in job_span["events"]), "no job.started event")
        check(job_span["traceState"] == "congo=t61rcWkgMzE", f"tracestate {job_span['traceState']}")
        check(job_span["resource"].get("service.name") == "tracing-test", f"resource {job_span['resource']}")
        check(job_span["resource"].get("deployment.environment") == "ci", "resource attributes")
        request_span = by_id.get(job_span["parentSpanId"], {"attributes": {}})
        check(request_span["attributes"].get("http.response.status_code") == 201, "request span status")
        check(request_span["kind"] == "server", "request span kind")

        keyed = one("task keyed")
        check(keyed["parentSpanId"] == job_span["spanId"], "task keyed is not under the job")
        waits = [e for e in keyed["events"] if e["name"] == "taskserver.wait"]
        check(waits and waits[0]["attributes"].get("taskserver.wait.reason") == "concurrency",
              f"no concurrency wait on task keyed: {keyed['events']}")
        check(waits and waits[0]["attributes"].get("taskserver.wait.ms", 0) >= 100,
              f"the key wait is too short: {waits}")
        check(keyed["attributes"].get("taskserver.concurrency.key") == "k", "taskserver.concurrency.key")

        worked = one("task worked")
        check(worked["parentSpanId"] == job_span["spanId"], "task worked is not under the job")
        lease = one("lease work")
        check(lease["parentSpanId"] == worked["spanId"], "the lease is not under its attempt")
        check(lease["kind"] == "consumer", f"lease kind {lease['kind']}")
        check(bool(lease["attributes"].get("taskserver.worker.id")), "taskserver.worker.id")
        tasks = request(server, "GET", f"/v1/jobs/{job_id}/tasks/worked")[1]
        seen = ((tasks or {}).get("result") or {}).get("traceparent", "")
        check(seen == f"00-{CALLER_TRACE}-{lease['spanId']}-01",
              f"the worker's command saw TRACEPARENT={seen!r}, the lease span is {lease['spanId']}")

        attempts = sorted([s for s in mine if s["name"] == "task called"],
                          key=lambda s: s["attributes"].get("taskserver.task.attempt"))
        check([s["attributes"].get("taskserver.task.attempt") for s in attempts] == [1, 2],
              f"attempts of task called: {[s['attributes'] for s in attempts]}")
        check(len(attempts) == 2 and attempts[0]["status"]["code"] == 2, "the failed attempt is not an error")
        clients = [s for s in mine if s["kind"] == "client" and s["name"] == "POST"]
        check(len(clients) == 2 and {c["parentSpanId"] for c in clients} == {a["spanId"] for a in attempts},
              "each attempt has its http call")
        statuses = sorted(c["attributes"].get("http.response.status_code") for c in clients)
        check(statuses == [200, 500], f"http statuses {statuses}")
        sent = [h.get("traceparent", h.get("Traceparent")) for h in downstream.calls]
        check(sorted(sent) == sorted(f"00-{CALLER_TRACE}-{c['spanId']}-01" for c in clients),
              f"the calls' traceparent {sent}")
        check(all(c["attributes"].get("server.address") == "127.0.0.1" for c in clients), "server.address")

        hook = one("webhook job.succeeded")
        check(hook["parentSpanId"] == job_span["spanId"], "the webhook span is not under the job")
        received = [h.get("traceparent", h.get("Traceparent")) for h, _ in downstream.hooks]
        check(f"00-{CALLER_TRACE}-{hook['spanId']}-01" in received, f"the webhook's traceparent {received}")

        redriven_job = one("job redriven")
        redrive = one("redrive")
        check(redrive["parentSpanId"] == redriven_job["spanId"], "the redrive span is not under its job")
        failed_attempts = [s for s in mine if s["name"] == "task f"]
        check(len(failed_attempts) == 2 and all(s["parentSpanId"] == redriven_job["spanId"] for s in failed_attempts),
              "the redriven job's attempts are under its span")
        check(redriven_job["status"]["code"] == 2 and redriven_job["attributes"].get("error.type") == "task.failed",
              f"the failed job's span: {redriven_job['status']} {redriven_job['attributes']}")

        # No secret in any span: API key, webhook secret, query values, input and results.
        text = json.dumps(spans)
        for secret in [API_KEY, WEBHOOK_SECRET, QUERY_SECRET, INPUT_MARKER, RESULT_MARKER, "lease_"]:
            check(secret not in text, f"{secret!r} is in a span")
        # The job's log lines carry its trace id.
        with open(server.log_path) as handle:
            lines = [json.loads(line) for line in handle if line.startswith("{")]
        traced = [l for l in lines if l.get("job.id") == job_id]
        check(traced and all(l.get("trace.id") == CALLER_TRACE for l in traced),
              f"{len(traced)} log lines of the job, trace ids {sorted({l.get('trace.id') for l in traced})}")
        if args.screenshot:
            from trace_picture import screenshot
            job_trace = [s for s in mine if s["name"] != "POST /v1/jobs" or s["spanId"] == job_span["parentSpanId"]]
            family = {job_span["parentSpanId"]}
            for span in sorted(job_trace, key=lambda s: s["start"]):
                if span["parentSpanId"] in family or span["spanId"] in family:
                    family.add(span["spanId"])
            screenshot([s for s in job_trace if s["spanId"] in family], CALLER_TRACE, args.screenshot)
            check(os.path.getsize(args.screenshot) > 10_000, f"the picture {args.screenshot} is empty")
        # Workers' claims and heartbeats start no traces of their own.
        roots = [s["name"] for s in spans if s["parentSpanId"] is None]
        check(all(name in ("POST /v1/jobs", "POST /v1/jobs/{id}/redrive") for name in roots), f"root spans {roots}")
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
        server.proc.terminate()
        server.proc.wait(timeout=30)

    # --trace-payloads: results on attempt spans, cut at 4 KiB (attributes long enough that their
    # protobuf lengths take two bytes, as the span records them).
    payload_server = TestServer(args.binary, ["--memory", "--otlp-endpoint", collector, "--trace-payloads"],
                                env=env, log=os.path.join(work, "payloads.log"))
    try:
        medium, big = "m" * 300, "b" * 6000
        status, created = request(payload_server, "POST", "/v1/jobs?waitMs=10000", {
            "name": "payloads", "graph": {"type": "parallel", "id": "both", "branches": [
                {"type": "task", "id": "medium", "action": "value", "params": {"value": medium}},
                {"type": "task", "id": "big", "action": "value", "params": {"value": big}}]}})
        check(created.get("state") == "succeeded", f"the payloads job: {status} {created}")

        def results():
            found = {s["name"]: s["attributes"].get("taskserver.task.result") for s in load_spans(spans_path)
                     if s["attributes"].get("taskserver.job.id") == created.get("id")}
            return found if {"task medium", "task big"} <= found.keys() else None
        check(wait_until(results, 20), "the payload job's attempt spans did not arrive")
        found = results() or {}
        check(found.get("task medium") == json.dumps(medium), "the medium result on its span")
        check(found.get("task big") == json.dumps(big)[:4096], "the big result, cut at 4 KiB")
    finally:
        payload_server.proc.terminate()
        payload_server.proc.wait(timeout=30)

    if failures:
        print(f"tracing test: {len(failures)} check(s) failed; spans in {spans_path}, log {server.log_path}")
        return 1
    print(f"tracing test: ok ({len(spans)} spans; the job's tree, a worker's TRACEPARENT, an http retry, "
          "a webhook, a redrive, no secrets; results with --trace-payloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
