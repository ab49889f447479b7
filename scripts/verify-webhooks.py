#!/usr/bin/env python3
"""Checks TaskServer's webhook deliveries with code we did not write: PyPI's `standardwebhooks`.

A receiver on 127.0.0.1 records every delivery; each one must pass
`standardwebhooks.Webhook(secret).verify(body, headers)`.

- Against the server at TASKSERVER_URL: a job whose own webhook (events "*") has a fresh
  whsec_ secret; a job whose webhook fails its first attempt (the retry must keep the
  webhook-id and be signed again); the deliveries API must agree.
- With TASKSERVER_BIN: a second server started with TASKSERVER_WEBHOOK_URL and
  TASKSERVER_WEBHOOK_SECRET (on a port of its choosing, --port 0, read from its log), whose
  server-wide webhook must deliver every job's job.* events.

Run it with the tests' Python environment: .build/venv/bin/python (scripts/install-deps.sh --venv).

Exit status 0 when every check passed; the failures are printed otherwise.
"""
import base64
import json
import os
import secrets
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testserver import ServerStartError, TestServer, wait_until  # noqa: E402

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr)
    return condition


class Receiver(ThreadingHTTPServer):
    # http.server listens with a backlog of 5: concurrent deliveries would stall for seconds.
    request_queue_size = 256
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Condition()  # notified at each delivery received
        self.received = []  # (path, headers, body, status answered)
        self.seen_ids = set()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]

    def requests(self, path):
        with self.lock:
            return [r for r in self.received if r[0] == path]

    def wait_for(self, path, count, timeout=20.0):
        """Waits until at least `count` deliveries to `path` have arrived, or `timeout` passes."""
        with self.lock:
            self.lock.wait_for(lambda: sum(1 for r in self.received if r[0] == path) >= count, timeout)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        receiver = self.server
        with receiver.lock:
            first = headers.get("webhook-id") not in receiver.seen_ids
            receiver.seen_ids.add(headers.get("webhook-id"))
            # /flaky fails the first attempt of every delivery.
            status = 500 if (self.path == "/flaky" and first) else 204
            receiver.received.append((self.path, headers, body, status))
            receiver.lock.notify_all()
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def new_secret():
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def verify_all(requests, secret, label):
    verified = 0
    wrong = Webhook(new_secret())
    for path, headers, body, _ in requests:
        try:
            payload = Webhook(secret).verify(body, headers)
        except WebhookVerificationError as error:
            check(False, "%s: %s failed verification: %s" % (label, headers.get("webhook-id"), error))
            continue
        verified += 1
        check(headers.get("content-type") == "application/json", "%s: content-type %r" % (label, headers.get("content-type")))
        check(isinstance(payload.get("data", {}).get("seq"), int), "%s: payload without data.seq: %r" % (label, payload))
        # The check must be able to fail: the same delivery under another key does not verify.
        try:
            wrong.verify(body, headers)
            check(False, "%s: %s verified with an unrelated secret" % (label, headers.get("webhook-id")))
        except WebhookVerificationError:
            pass
    return verified


def job_level(base, receiver):
    secret = new_secret()
    job = {
        "graph": {"type": "series", "steps": [
            {"type": "task", "id": "a", "action": "value", "params": {"value": 1}},
            {"type": "task", "id": "b", "action": "value", "params": {"value": "${input}"}},
        ]},
        "webhook": {"url": receiver.url + "/signed", "secret": secret, "events": ["*"], "headers": {"X-CI": "verify"}},
    }
    job_id = call(base, "POST", "/v1/jobs?waitMs=20000", job)["id"]
    events = call(base, "GET", "/v1/jobs/%s/events" % job_id)["items"]
    receiver.wait_for("/signed", len(events))
    received = receiver.requests("/signed")
    check(len(received) == len(events), "job webhook: %d deliveries for %d events" % (len(received), len(events)))
    verified = verify_all(received, secret, "job webhook")
    by_seq = {event["seq"]: event for event in events}
    for _, headers, body, _ in received:
        payload = json.loads(body)
        seq = payload["data"]["seq"]
        check(headers.get("webhook-id") == "msg_%s_%d" % (job_id, seq), "webhook-id %r for seq %d" % (headers.get("webhook-id"), seq))
        check(payload["type"] == by_seq.get(seq, {}).get("type"), "type %r for seq %d" % (payload["type"], seq))
        check(headers.get("x-ci") == "verify", "custom header missing: %r" % headers)
    def all_delivered():
        items = call(base, "GET", "/v1/jobs/%s/deliveries" % job_id)["items"]
        return items if len(items) == len(events) and all(d["state"] == "delivered" for d in items) else None
    # The API has no long-poll: a bounded poll (the receiver has answered; the store follows).
    check(wait_until(all_delivered, 20), "deliveries API: %r" % call(base, "GET", "/v1/jobs/%s/deliveries" % job_id))
    return verified


def retried(base, receiver):
    secret = new_secret()
    job = {
        "graph": {"type": "task", "action": "value", "params": {"value": "retry"}},
        "webhook": {"url": receiver.url + "/flaky", "secret": secret, "events": ["job.succeeded"],
                    "retry": {"maxAttempts": 3, "delayMs": 50, "jitter": False}},
    }
    job_id = call(base, "POST", "/v1/jobs?waitMs=20000", job)["id"]
    receiver.wait_for("/flaky", 2)
    received = receiver.requests("/flaky")
    check(len(received) == 2, "retried webhook: %d attempts received" % len(received))
    check(len({r[1].get("webhook-id") for r in received}) == 1, "the retry changed the webhook-id")
    check([r[3] for r in received] == [500, 204], "answers %r" % [r[3] for r in received])
    verified = verify_all(received, secret, "retried webhook")

    def delivered():
        items = call(base, "GET", "/v1/jobs/%s/deliveries" % job_id)["items"]
        return items if items and items[0]["state"] == "delivered" else None
    items = wait_until(delivered, 20)
    check(items and [a.get("status") for a in items[0]["attempts"]] == [500, 204], "deliveries API after a retry: %r" % items)
    return verified


def server_wide(binary, receiver):
    secret = new_secret()
    environment = dict(os.environ)
    environment.update({
        "TASKSERVER_WEBHOOK_URL": receiver.url + "/server",
        "TASKSERVER_WEBHOOK_SECRET": secret,
        "TASKSERVER_OUTBOUND_DENY": "0.0.0.0/0,::/0",
        "TASKSERVER_OUTBOUND_ALLOW": "127.0.0.0/8,::1/128",
    })
    try:
        server = TestServer(binary, ["--memory"], env=environment)
    except ServerStartError as error:
        check(False, "the second server did not start: %s" % error)
        return 0
    base = server.url
    try:
        if not check(_healthy(base), "the second server does not answer /healthz"):
            return 0
        ids = [call(base, "POST", "/v1/jobs?waitMs=20000",
                    {"graph": {"type": "task", "action": "value", "params": {"value": n}}})["id"] for n in range(3)]
        receiver.wait_for("/server", 9)
        received = receiver.requests("/server")
        check(len(received) == 9, "server-wide webhook: %d deliveries for 3 jobs" % len(received))
        expected = {"msg_%s_%d_server" % (job_id, seq) for job_id in ids for seq in (1, 2, 5)}
        check({r[1].get("webhook-id") for r in received} == expected, "server-wide ids %r" % sorted(r[1].get("webhook-id") for r in received))
        return verify_all(received, secret, "server-wide webhook")
    finally:
        status = server.stop(timeout=15)
        check(status == 0, "the second server exited with %r: %s" % (status if status is not None else "killed",
                                                                     server.log_text()[-2000:]))


def _healthy(base):
    try:
        return call(base, "GET", "/healthz") == {"status": "ok"}
    except OSError:
        return False


def main():
    base = os.environ.get("TASKSERVER_URL", "http://127.0.0.1:8080")
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    verified = job_level(base, receiver)
    verified += retried(base, receiver)
    binary = os.environ.get("TASKSERVER_BIN")
    if binary:
        verified += server_wide(binary, receiver)
    receiver.shutdown()
    if failures:
        print("verify-webhooks: %d problems (%d deliveries verified)" % (len(failures), verified), file=sys.stderr)
        return 1
    print("verify-webhooks: %d deliveries verified by standardwebhooks %s" % (verified, _version()))
    return 0


def _version():
    try:
        from importlib.metadata import version
        return version("standardwebhooks")
    except Exception:
        return ""


if __name__ == "__main__":
    sys.exit(main())
