"""A webhook receiver for the crash and cluster tests: a real HTTP server on loopback that records
each delivery it accepts.

    recorder = WebhookRecorder()             # accepting at once; WebhookRecorder(accepting=False): 503s
    job["webhook"] = {"url": recorder.url, …}
    recorder.accepting.set()                 # from now on 204
    recorder.wait_for_end(job_id, "job.succeeded", timeout=30)
    recorder.deliveries                      # webhook-id -> [monotonic times it arrived]
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookRecorder:
    def __init__(self, accepting=True):
        self.accepting = threading.Event()
        if accepting:
            self.accepting.set()
        self.lock = threading.Condition()  # notified at each delivery accepted
        self.deliveries = {}  # webhook-id -> [time.monotonic() of each accepted delivery]
        self.ends = {}        # job id -> set of event types accepted
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if not recorder.accepting.is_set():
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                event = json.loads(body)
                data = event["data"]
                job_id = data.get("job", {}).get("id") or data.get("jobId")
                with recorder.lock:
                    recorder.deliveries.setdefault(self.headers.get("webhook-id"), []).append(time.monotonic())
                    recorder.ends.setdefault(job_id, set()).add(event["type"])
                    recorder.lock.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        class QuietServer(ThreadingHTTPServer):
            request_queue_size = 512
            daemon_threads = True

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for_end(self, job_id, event_type, timeout):
        """Whether a delivery of `event_type` for `job_id` was accepted (waiting up to `timeout` s)."""
        with self.lock:
            return self.lock.wait_for(lambda: event_type in self.ends.get(job_id, set()), timeout=timeout)
