#!/usr/bin/env python3
"""A stand-in OpenTelemetry collector for the tracing tests and benchmark: receives OTLP/HTTP
protobuf exports (POST /v1/traces), decodes them with the official definitions (PyPI's
opentelemetry-proto), and appends each span as one JSON line to --out.

    otlp_receiver.py --port 4318 --out spans.jsonl [--mode ok|500|slow|close|count]

Modes: `ok` answers 200 and records; `500` answers 500; `slow` answers after 10 s; `close` closes
the connection without an answer; `count` answers 200 without decoding (the benchmark's 100 %
case, where decoding every span would measure this script). The mode can be changed while
it runs: POST /mode with the new mode as the body. GET /stats answers {"requests", "spans"}.
"""
import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def any_value(value):
    which = value.WhichOneof("value")
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which is None:
        return None
    return getattr(value, which)


def attributes(pairs):
    return {pair.key: any_value(pair.value) for pair in pairs}


def span_dicts(request):
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex() or None,
                    "traceState": span.trace_state or None,
                    "name": span.name,
                    "kind": KINDS.get(span.kind, str(span.kind)),
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": e.name, "time": e.time_unix_nano, "attributes": attributes(e.attributes)}
                        for e in span.events
                    ],
                    "status": {"code": span.status.code, "message": span.status.message},
                }


class State:
    def __init__(self, mode, out):
        self.mode = mode
        self.out = out
        self.lock = threading.Lock()
        self.requests = 0
        self.spans = 0


def handler_for(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body=b"", content_type="application/x-protobuf"):
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/stats":
                with state.lock:
                    body = json.dumps({"requests": state.requests, "spans": state.spans}).encode()
                self.answer(200, body, "application/json")
            else:
                self.answer(404)

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            if self.path == "/mode":
                state.mode = body.decode().strip()
                self.answer(204)
                return
            if self.path != "/v1/traces":
                self.answer(404)
                return
            mode = state.mode
            with state.lock:
                state.requests += 1
            if mode == "500":
                self.answer(500, b"refused on purpose")
                return
            if mode == "slow":
                time.sleep(10)
            if mode == "close":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if self.headers.get("content-type") != "application/x-protobuf":
                self.answer(415)
                return
            if mode == "count":
                # Not decoded: the benchmark measures the server, not this script.
                self.answer(200, b"")
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans = list(span_dicts(request))
            with state.lock:
                state.spans += len(spans)
                if state.out:
                    with open(state.out, "a") as out:
                        for span in spans:
                            out.write(json.dumps(span) + "\n")
            self.answer(200, ExportTraceServiceResponse().SerializeToString())

    return Handler


def serve(port, out, mode="ok"):
    """Starts the receiver on a thread; returns (server, state)."""
    state = State(mode, out)
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=4318)
    parser.add_argument("--out", default=None)
    parser.add_argument("--mode", default="ok", choices=["ok", "500", "slow", "close", "count"])
    args = parser.parse_args()
    server, _ = serve(args.port, args.out, args.mode)
    print(f"otlp receiver on 127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
