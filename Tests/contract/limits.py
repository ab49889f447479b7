"""Checks openapi.yaml's defaults, limits and patterns against a live server.

Every number and pattern below is read from openapi.yaml, never written here: for each limit the
server must accept the bound and refuse one step past it (`422` with the field's pointer, `400` for a
query parameter); for each pattern, a set of probe values must be accepted by the server exactly
when the pattern matches; each default is observed in what the server does when the field is left
out. If the document and the server drift apart, this fails.

usage: python3 Tests/contract/limits.py [--spec openapi.yaml] BASE_URL
(PyYAML is the only dependency; the schemathesis virtual environment has it.)
"""

import argparse
import base64
import http.server
import json
import re
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import datetime

import yaml

parser = argparse.ArgumentParser()
parser.add_argument("--spec", default="openapi.yaml")
parser.add_argument("base_url")
args = parser.parse_args()
BASE = args.base_url.rstrip("/")
SPEC = yaml.safe_load(open(args.spec, encoding="utf-8"))
SCHEMAS = SPEC["components"]["schemas"]
RUN = uuid.uuid4().hex[:12]
checks = 0
failures: list[str] = []


def schema(*path: str) -> dict:
    """The schema at components/schemas/<path…> (through `properties`)."""
    node = SCHEMAS[path[0]]
    for name in path[1:]:
        node = node["properties"][name]
    return node


def check(condition: bool, what: str) -> None:
    global checks
    checks += 1
    if not condition:
        failures.append(what)
        print(f"  ✘ {what}", flush=True)


# ------------------------------------------------------------------------------------------ HTTP


def request(method: str, path: str, body=None, headers=None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=70) as response:
            status, raw, kind = response.status, response.read(), response.headers.get("content-type", "")
    except urllib.error.HTTPError as error:
        status, raw, kind = error.code, error.read(), error.headers.get("content-type", "")
    if "json" in kind:
        return status, json.loads(raw) if raw else None
    return status, raw.decode("utf-8", "replace")


TASK = {"type": "task", "action": "value"}


def validate(job: dict) -> tuple[int, object]:
    return request("POST", "/v1/graphs/validate", job)


def pointers(body) -> list[str]:
    return [error["pointer"] for error in body.get("errors", [])] if isinstance(body, dict) else []


def accepted(job: dict, what: str) -> None:
    status, body = validate(job)
    check(status == 200, f"{what}: accepted (got {status} {str(body)[:300]})")


def refused(job: dict, pointer: str, what: str) -> None:
    status, body = validate(job)
    check(status == 422 and body.get("code") == "graph.invalid" and pointer in pointers(body),
          f"{what}: refused with a problem at {pointer} (got {status} {str(body)[:300]})")


def submit(job: dict, wait_ms: int = 0) -> dict:
    status, body = request("POST", f"/v1/jobs?waitMs={wait_ms}", {"labels": {"limits": RUN}, **job})
    if status != 201:
        raise SystemExit(f"submitting {job} failed: {status} {body}")
    return body


def finished(job_id: str) -> dict:
    deadline = time.monotonic() + 60
    while True:
        status, job = request("GET", f"/v1/jobs/{job_id}?waitMs=10000")
        if job["state"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return job


def node(job_id: str, task_id: str) -> dict:
    return request("GET", f"/v1/jobs/{job_id}/tasks/{urllib.parse.quote(task_id, safe='')}")[1]


def events(job_id: str, query: str = "") -> list[dict]:
    return request("GET", f"/v1/jobs/{job_id}/events{query}")[1]["items"]


# ------------------------------------------------------------------------------- numeric limits

# Where each body field lives in a job: the schema holding it, and how to build a job with it.
def in_retry(field):
    return lambda v: {"graph": {**TASK, "retry": {field: v}}}, f"/graph/retry/{field}"


def in_webhook_retry(field):
    return lambda v: {"graph": TASK, "webhook": {"url": "http://127.0.0.1:9/", "retry": {field: v}}}, f"/webhook/retry/{field}"


WORKER_TASK = {"type": "task", "executor": "images", "action": "resize"}

NUMERIC = {
    ("JobSubmission", "timeoutMs"): (lambda v: {"graph": TASK, "timeoutMs": v}, "/timeoutMs"),
    # A delayed start: the accepted probes sleep in the live server's store (the longest ten years).
    ("JobSubmission", "delayMs"): (lambda v: {"graph": TASK, "delayMs": v}, "/delayMs"),
    ("JobSubmission", "priority"): (lambda v: {"graph": TASK, "priority": v}, "/priority"),
    # A concurrency key's `max`, on a task and on the job (one schema, Concurrency, for both).
    ("Concurrency", "max"): (lambda v: {"graph": {**TASK, "concurrency": {"key": "k", "max": v}}}, "/graph/concurrency/max"),
    ("TaskNode", "timeoutMs"): (lambda v: {"graph": {**TASK, "timeoutMs": v}}, "/graph/timeoutMs"),
    # Worker-task fields, on the live server's external pool (scripts/test.sh: --executor images=external).
    ("TaskNode", "heartbeatTimeoutMs"): (lambda v: {"graph": {**WORKER_TASK, "heartbeatTimeoutMs": v}},
                                         "/graph/heartbeatTimeoutMs"),
    ("TaskNode", "scheduleTimeoutMs"): (lambda v: {"graph": {**WORKER_TASK, "scheduleTimeoutMs": v}},
                                        "/graph/scheduleTimeoutMs"),
    ("ParallelNode", "maxConcurrency"): (lambda v: {"graph": {"type": "parallel", "branches": [], "maxConcurrency": v}},
                                         "/graph/maxConcurrency"),
    ("MapNode", "maxConcurrency"): (lambda v: {"graph": {"type": "map", "items": [], "template": TASK, "maxConcurrency": v}},
                                    "/graph/maxConcurrency"),
    **{("RetryPolicy", field): in_retry(field) for field in ("maxAttempts", "delayMs", "backoff", "maxDelayMs")},
    **{("WebhookRetry", field): in_webhook_retry(field) for field in ("maxAttempts", "delayMs", "backoff", "maxDelayMs")},
}


def numeric_limits() -> None:
    print("· numeric limits of request bodies", flush=True)
    documented = {(name, field) for name, s in SCHEMAS.items() for field, p in s.get("properties", {}).items()
                  if name in {"JobSubmission", "TaskNode", "ParallelNode", "MapNode", "RetryPolicy", "WebhookRetry", "Concurrency"}
                  and isinstance(p, dict) and ("minimum" in p or "maximum" in p)}
    check(documented == set(NUMERIC), f"every bounded field is probed (unprobed: {sorted(documented - set(NUMERIC))})")
    for (name, field), (build, pointer) in NUMERIC.items():
        prop = schema(name, field)
        integer = prop["type"] == "integer" or "integer" in prop["type"]  # a type list: [integer, 'null']
        step = 1 if integer else 0.5
        what = f"{name}.{field}"
        if "minimum" in prop:
            accepted(build(prop["minimum"]), f"{what} = minimum {prop['minimum']}")
            refused(build(prop["minimum"] - step), pointer, f"{what} = minimum - {step}")
        if "maximum" in prop:
            accepted(build(prop["maximum"]), f"{what} = maximum {prop['maximum']}")
            refused(build(prop["maximum"] + step), pointer, f"{what} = maximum + {step}")
        if integer:
            refused(build(prop.get("minimum", 0) + 0.5), pointer, f"{what} = a fraction")


def length_limits() -> None:
    print("· lengths and counts", flush=True)
    name = schema("JobSubmission", "name")["maxLength"]
    accepted({"graph": TASK, "name": "é" * name}, f"name of {name} characters")
    refused({"graph": TASK, "name": "é" * (name + 1)}, "/name", f"name of {name + 1} characters")

    labels = SCHEMAS["Labels"]
    most = labels["maxProperties"]
    accepted({"graph": TASK, "labels": {f"k{i}": "v" for i in range(most)}}, f"{most} labels")
    refused({"graph": TASK, "labels": {f"k{i}": "v" for i in range(most + 1)}}, "/labels", f"{most + 1} labels")
    value = labels["additionalProperties"]["maxLength"]
    accepted({"graph": TASK, "labels": {"k": "é" * value}}, f"a label value of {value} characters")
    refused({"graph": TASK, "labels": {"k": "é" * (value + 1)}}, "/labels/k", f"a label value of {value + 1} characters")

    url = schema("Webhook", "url")["maxLength"]
    long_url = "http://127.0.0.1/" + "a" * (url - len("http://127.0.0.1/"))
    accepted({"graph": TASK, "webhook": {"url": long_url}}, f"a webhook url of {url} characters")
    refused({"graph": TASK, "webhook": {"url": long_url + "a"}}, "/webhook/url", f"a webhook url of {url + 1} characters")

    key = schema("Concurrency", "key")["maxLength"]
    for where, build in (("/graph/concurrency/key", lambda k: {"graph": {**TASK, "concurrency": {"key": k, "max": 1}}}),
                         ("/concurrency/key", lambda k: {"graph": TASK, "concurrency": {"key": k, "max": 1}})):
        accepted(build("é" * key), f"{where} of {key} characters")
        refused(build("é" * (key + 1)), where, f"{where} of {key + 1} characters")
        refused(build(""), where, f"an empty {where}")

    batch = schema("JobBatch", "jobs")
    status, body = request("POST", "/v1/jobs/batch", {"jobs": [{"graph": TASK, "labels": {"limits": RUN}}] * batch["maxItems"]})
    check(status == 200 and len(body["items"]) == batch["maxItems"], f"a batch of {batch['maxItems']} jobs (got {status})")
    for jobs in ([{"graph": TASK}] * (batch["maxItems"] + 1), [{"graph": TASK}] * (batch["minItems"] - 1)):
        status, body = request("POST", "/v1/jobs/batch", {"jobs": jobs})
        check(status == 422 and body.get("code") == "batch.invalid" and "/jobs" in pointers(body),
              f"a batch of {len(jobs)} jobs: 422 batch.invalid at /jobs (got {status})")

    events = schema("Webhook", "events")["minItems"]
    refused({"graph": TASK, "webhook": {"url": "http://127.0.0.1/", "events": ["*"] * (events - 1)}}, "/webhook/events",
            f"{events - 1} webhook events")


# ------------------------------------------------------------------------------------- patterns


def matches(pattern: str, text: str) -> bool:
    # JSON Schema patterns are ECMA-262: `$` is the end of the text (Python's also matches before a
    # final newline, so the probes below never end in one).
    return re.search(pattern, text) is not None


def b64(n: int, padded: bool = True) -> str:
    text = base64.b64encode(bytes(range(n % 256)) * (n // 256) + bytes(range(n % 256))).decode()
    return text if padded else text.rstrip("=")


PATTERNS = {
    "Webhook.secret": (
        schema("Webhook", "secret")["pattern"], "/webhook/secret",
        lambda v: {"graph": TASK, "webhook": {"url": "http://127.0.0.1/", "secret": v}},
        ["whsec_" + b64(n, padded) for n in (0, 1, 2, 3, 32, 63, 64, 65, 66) for padded in (True, False)]
        + ["whsec_", "whsec_A", "whsec_AAAAA", "whsec_AA=", "whsec_AAA==", "whsec_AA==A", "whsec_!!!!", "whsec_" + "A" * 88,
           "plain secret", "x", "", "x" * 256, "x" * 257, "é" * 256, "whsec", "WHSEC_abc"],
    ),
    "Webhook.url": (
        schema("Webhook", "url")["pattern"], "/webhook/url",
        lambda v: {"graph": TASK, "webhook": {"url": v}},
        ["http://h", "https://h/", "HTTP://h", "hTtPs://h:443/x?y#z", "http://u:p@h/", "http://a@b@h/", "http://h:1", "http://h:65535",
         "http://h:0", "http://h:65536", "http://h:00080", "http://h:123456", "http://h:", "http://h:x", "http://[::1]:8080/",
         "http://[]/", "http://[::1]x/", "http://hé/", "http://h/é", "http://h/%zz", "http://h%41/", "http://h_~-./", "http://h/a b",
         "http://h/\t", "http://", "http:///x", "ftp://h/", "http:/h", "h", "", "http://h?x", "http://h#x", "http://a]b/",
         "http://h:8080:9/", "http://h/x\x7f"],
    ),
    "EventTypePattern": (
        SCHEMAS["EventTypePattern"]["pattern"], "/webhook/events/0",
        lambda v: {"graph": TASK, "webhook": {"url": "http://127.0.0.1/", "events": [v]}},
        ["*", "j*", "job*", "job.*", "job.c*", "job.created*", "task.*", "task.r*", "task.retrying*", "t*", "**", "job.*x", "x*",
         "jobs*", "job.x*", "task.retried*", "", "*job", "JOB.*", "task.skipped*"],
    ),
    "Webhook.headers (names)": (
        schema("Webhook", "headers")["propertyNames"]["pattern"], "/webhook/headers/{}",
        lambda v: {"graph": TASK, "webhook": {"url": "http://127.0.0.1/", "headers": {v: "1"}}},
        ["X-Team", "x", "a" * 256, "a" * 257, "Host", "host", "HOST", "Hosts", "Content-Type", "content-length", "Content-Encoding",
         "webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE", "webhook-other", "webhook-ids", "has space", "a:b", "é", "!#$%&'*+.^_`|~"],
    ),
    "Webhook.headers (values)": (
        schema("Webhook", "headers")["additionalProperties"]["pattern"], "/webhook/headers/X-Probe",
        lambda v: {"graph": TASK, "webhook": {"url": "http://127.0.0.1/", "headers": {"X-Probe": v}}},
        ["", "plain", "tab\tok", "é", "cr\rx", "lf\nx", "nul\x00x"],
    ),
    "Labels (names)": (
        SCHEMAS["Labels"]["propertyNames"]["pattern"], "/labels/{}",
        lambda v: {"graph": TASK, "labels": {v: "x"}},
        ["team", "a.b-c_D9", "a" * 63, "a" * 64, "has:colon", "sp ace", "é", "a/b"],
    ),
    "NodeId": (
        SCHEMAS["NodeId"]["pattern"], "/graph/id",
        lambda v: {"graph": {**TASK, "id": v}},
        ["a", "A-b_9", "a" * 64, "a" * 65, "a.b", "a/b", "é", "a[1]"],
    ),
    "IdempotencyKey": (SPEC["components"]["parameters"]["IdempotencyKey"]["schema"]["pattern"], None, None,
                       ["k", "~" * 255, "~" * 256, "a b", "é"]),
}


def show(probe: str) -> str:
    return repr(probe) if len(probe) <= 40 else f"{probe[:30]!r}… ({len(probe)} characters)"


def pattern_probes() -> None:
    print("· patterns: the server accepts a probe exactly when the pattern matches", flush=True)
    for name, (pattern, pointer, build, probes) in PATTERNS.items():
        for probe in probes:
            expected = matches(pattern, probe)
            if build is None:  # the Idempotency-Key header: refused is 400 (422 is a key used before)
                status, body = request("POST", "/v1/jobs", {"graph": TASK, "labels": {"limits": RUN}}, {"Idempotency-Key": probe})
                got = status != 400
                check(got == expected, f"{name} {show(probe)}: pattern says {expected}, server {'accepts' if got else 'refuses'} ({status})")
                continue
            status, body = validate(build(probe))
            got = status == 200
            at = pointer.format(probe.replace("~", "~0").replace("/", "~1"))
            if not got:
                check(status == 422 and at in pointers(body), f"{name} {show(probe)}: refused at {at} (got {status} {str(body)[:200]})")
            check(got == expected, f"{name} {show(probe)}: pattern says {expected}, server {'accepts' if got else 'refuses'}")

    # A map's `items` pattern is looser than the server's rule (a single template): it only has to
    # let every accepted value through.
    items = [branch for branch in schema("MapNode", "items")["anyOf"] if branch.get("type") == "string"][0]["pattern"]
    for probe in ["${input}", "${input.items}", "${tasks.a.result}", "x", "$${input}", " ${input}", "${input} ", "${a}${b}"]:
        status, body = validate({"graph": {"type": "map", "items": probe, "template": TASK}})
        if status == 200:
            check(matches(items, probe), f"MapNode.items {show(probe)}: accepted by the server, so the pattern must match")


# ---------------------------------------------------------------------------------- query limits


def query_limits() -> None:
    print("· query parameters", flush=True)
    job = submit({"graph": TASK}, wait_ms=5000)
    paths = {"/v1/jobs": "/v1/jobs", "/v1/jobs/{id}": f"/v1/jobs/{job['id']}", "/v1/jobs/{id}/events": f"/v1/jobs/{job['id']}/events",
             # A cursor of no process: everything held comes back at once (waitMs does not wait).
             "/v1/events": "/v1/events?after=stale.0"}
    params = SPEC["components"]["parameters"]
    for template, path in paths.items():
        item = SPEC["paths"][template]
        for parameter in item["get"].get("parameters", []):
            if "$ref" in parameter:
                parameter = params[parameter["$ref"].rsplit("/", 1)[1]]
            s = parameter["schema"]
            if parameter["in"] != "query" or s.get("type") != "integer":
                continue
            name = parameter["name"]
            for bound, outside in (("minimum", -1), ("maximum", 1)):
                if bound not in s:
                    continue
                sep = "&" if "?" in path else "?"
                status, _ = request("GET", f"{path}{sep}{name}={s[bound]}")
                check(status == 200, f"GET {template}?{name}={s[bound]} ({bound}): 200 (got {status})")
                status, body = request("GET", f"{path}{sep}{name}={s[bound] + outside}")
                check(status == 400 and body.get("code") == "query.invalid",
                      f"GET {template}?{name}={s[bound] + outside}: 400 query.invalid (got {status})")


# -------------------------------------------------------------------------------------- defaults


def retry_pauses(job_id: str) -> list[int]:
    return [event["data"]["delayMs"] for event in events(job_id) if event["type"] == "task.retrying"]


def defaults() -> None:
    print("· defaults, observed", flush=True)
    retry = SCHEMAS["RetryPolicy"]["properties"]
    check(retry["jitter"]["default"] is False, "RetryPolicy.jitter defaults to false (the pauses below are exact)")
    job = finished(submit({"graph": {"type": "task", "id": "t", "action": "fail", "retry": {}}})["id"])
    check(node(job["id"], "t")["attempts"] == retry["maxAttempts"]["default"],
          f"RetryPolicy.maxAttempts default {retry['maxAttempts']['default']}")
    job = finished(submit({"graph": {"type": "task", "action": "fail", "retry": {"maxAttempts": 2}}})["id"])
    check(retry_pauses(job["id"]) == [retry["delayMs"]["default"]], f"RetryPolicy.delayMs default {retry['delayMs']['default']}: "
          f"pauses {retry_pauses(job['id'])}")
    job = finished(submit({"graph": {"type": "task", "action": "fail", "retry": {"maxAttempts": 3, "delayMs": 10}}})["id"])
    expected = [10, int(10 * retry["backoff"]["default"])]
    check(retry_pauses(job["id"]) == expected, f"RetryPolicy.backoff default {retry['backoff']['default']}: pauses "
          f"{retry_pauses(job['id'])}, expected {expected}")

    job = finished(submit({"graph": {"type": "task", "id": "t", "action": "value"}})["id"])
    check(node(job["id"], "t")["executor"] == schema("TaskNode", "executor")["default"], "TaskNode.executor default")

    mode = schema("ParallelNode", "mode")["default"]
    job = finished(submit({"graph": {"type": "parallel", "branches": [{"type": "task", "action": "value", "params": {"value": v}}
                                                                      for v in (1, 2)]}})["id"])
    results = {"all": [1, 2], "any": 1, "settled": [{"state": "succeeded", "result": 1}, {"state": "succeeded", "result": 2}]}
    check(job.get("result") == results[mode], f"ParallelNode.mode default {mode}: result {job.get('result')}")
    fail_fast = schema("ParallelNode", "failFast")["default"]
    job = finished(submit({"graph": {"type": "parallel", "branches": [
        {"type": "task", "action": "fail"}, {"type": "task", "id": "slow", "action": "delay", "params": {"ms": 200}}]}})["id"])
    check(node(job["id"], "slow")["state"] == ("cancelled" if fail_fast else "succeeded"), f"ParallelNode.failFast default {fail_fast}")

    mode = schema("MapNode", "mode")["default"]
    job = finished(submit({"graph": {"type": "map", "id": "m", "items": ["a", "b"], "template": {"type": "task", "id": "f", "action": "fail"}}})["id"])
    check(node(job["id"], "f[1]")["state"] == ("skipped" if mode == "series" else "failed"), f"MapNode.mode default {mode}")
    items = schema("MapNode", "items")["default"]
    check(items == "${input}", "MapNode.items default ${input}")
    job = finished(submit({"input": [1, 2], "graph": {"type": "map", "template": {"type": "task", "action": "value"}}})["id"])
    check(job.get("result") == [1, 2], f"MapNode.items default {items}: result {job.get('result')}")

    on = schema("ContinuationNode", "on")["default"]
    check(on == "success", "ContinuationNode.on default success")
    job = finished(submit({"graph": {"type": "continuation", "antecedent": {"type": "task", "action": "fail"},
                                     "then": {"type": "task", "id": "then", "action": "value"}}})["id"])
    check(node(job["id"], "then")["state"] == "skipped", f"ContinuationNode.on default {on}: then skipped after a failure")

    job = submit({"graph": {"type": "series", "steps": [TASK, TASK]}}, wait_ms=5000)
    operation = SPEC["paths"]["/v1/jobs/{id}/graph"]["get"]
    fmt = [p for p in operation["parameters"] if p["name"] == "format"][0]["schema"]["default"]
    plain = request("GET", f"/v1/jobs/{job['id']}/graph")
    explicit = request("GET", f"/v1/jobs/{job['id']}/graph?format={fmt}")
    check(plain == explicit and plain[0] == 200, f"graph format default {fmt}")

    after = [p for p in SPEC["paths"]["/v1/jobs/{id}/events"]["get"]["parameters"] if p.get("name") == "after"][0]["schema"]["default"]
    check(events(job["id"]) == events(job["id"], f"?after={after}"), f"events after default {after}")

    limit = [p for p in SPEC["paths"]["/v1/jobs/{id}/events"]["get"]["parameters"] if p.get("name") == "limit"][0]["schema"]["default"]
    instances = limit // 2 + 10  # two events per instance: more than `limit` in all
    job = submit({"input": list(range(instances)), "graph": {"type": "map", "template": {**TASK, "executor": "immediate"}}}, wait_ms=10000)
    check(len(events(job["id"])) == limit, f"events limit default {limit}: got {len(events(job['id']))}")

    limit = [p for p in SPEC["paths"]["/v1/jobs"]["get"]["parameters"] if p.get("name") == "limit"][0]["schema"]["default"]
    label = f"page{RUN}"
    for _ in range(limit + 1):
        request("POST", "/v1/jobs", {"graph": TASK, "labels": {"limits": label}})
    status, page = request("GET", f"/v1/jobs?label=limits:{label}")
    check(status == 200 and len(page["items"]) == limit and page["nextCursor"] is not None, f"jobs limit default {limit}")

    webhook_defaults()


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook endpoint that answers 500 to everything."""
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def ms(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000


def webhook_defaults() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    retry = SCHEMAS["WebhookRetry"]["properties"]
    try:
        # All defaults: which events are sent, and the first two pauses.
        job = submit({"graph": TASK, "webhook": {"url": url}}, wait_ms=5000)
        patterns = schema("Webhook", "events")["default"]
        deadline = time.monotonic() + 15
        while True:
            deliveries = request("GET", f"/v1/jobs/{job['id']}/deliveries")[1]["items"]
            if (deliveries and len(deliveries[0]["attempts"]) >= 3) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        wanted = [e["type"] for e in events(job["id"]) if any(e["type"].startswith(p.rstrip("*")) if p.endswith("*") else e["type"] == p
                                                              for p in patterns)]
        check([d["eventType"] for d in deliveries] == wanted, f"Webhook.events default {patterns}: deliveries {[d['eventType'] for d in deliveries]}")
        attempts = deliveries[0]["attempts"] if deliveries else []
        check(len(attempts) >= 3, f"three attempts to a failing endpoint within 15 s (got {len(attempts)})")
        if len(attempts) >= 3:
            delay, backoff, jitter = retry["delayMs"]["default"], retry["backoff"]["default"], retry["jitter"]["default"]
            for n in (1, 2):
                pause = ms(attempts[n]["at"]) - ms(attempts[n - 1]["at"]) - attempts[n - 1]["durationMs"]
                full = delay * backoff ** (n - 1)
                low = full / 2 if jitter else full
                check(low - 5 <= pause <= full + 300, f"WebhookRetry defaults (delayMs {delay}, backoff {backoff}, jitter {jitter}): "
                      f"pause {n} of {pause:.0f} ms within [{low:.0f}, {full:.0f}]")
        # A retry object with one field keeps the other defaults: maxAttempts.
        job = submit({"graph": TASK, "webhook": {"url": url, "events": ["job.created"], "retry": {"delayMs": 0}}})
        deadline = time.monotonic() + 15
        while True:
            deliveries = request("GET", f"/v1/jobs/{job['id']}/deliveries")[1]["items"]
            if (deliveries and deliveries[0]["state"] != "pending") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        check(bool(deliveries) and deliveries[0]["state"] == "failed" and len(deliveries[0]["attempts"]) == retry["maxAttempts"]["default"],
              f"WebhookRetry.maxAttempts default {retry['maxAttempts']['default']}: "
              f"{[(d['state'], len(d['attempts'])) for d in deliveries]}")
    finally:
        server.shutdown()


numeric_limits()
length_limits()
pattern_probes()
query_limits()
defaults()
if failures:
    print(f"FAIL: {len(failures)} of {checks} checks: openapi.yaml and the server disagree", file=sys.stderr)
    sys.exit(1)
print(f"✔ openapi.yaml's defaults, limits and patterns are the server's ({checks} checks)")
