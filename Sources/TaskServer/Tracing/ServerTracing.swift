import Logging
import NIOHTTP1
import TaskCore
import TaskGraph
import Tracing

/// The server's traces (issue #46): one owner for the tracer, its exporter and the rules of what
/// is traced, handed to the HTTP layer (request spans), the job service (a job's context), the
/// engine (attempt spans, `AttemptTracer`) and the outbound calls (`http` tasks, webhooks).
///
/// The span tree of one job:
///
/// ```
/// POST /v1/jobs                      server    (the caller's span its parent, if it sent one)
/// └─ job <name or id>                internal  created → ended; `job.started` event, queue time
///    ├─ task <id>                    internal  one per attempt; waits as events
///    │  ├─ lease <pool>              consumer  a worker's claim → the attempt's end
///    │  │  └─ (the worker's spans: TRACEPARENT in its command's environment)
///    │  ├─ HTTP POST                 client    an `http` task's call (traceparent sent)
///    │  └─ job <child>               internal  a child job (issue #45) and its subtree
///    ├─ webhook job.succeeded        client    each delivery attempt (traceparent sent)
///    └─ redrive                      internal  a redriven run, from `job.redriven` to its end
/// ```
///
/// A job's context is kept with the job (`JobTraceLabel`), so a job resumed after a restart,
/// redriven, or taken over by another server of a cluster keeps its trace; the server that ends
/// the job exports its span. An attempt in flight when its server died is not exported.
public final class ServerTracing: Sendable {
    let configuration: TracingConfiguration
    let exporter: SpanExporter
    let tracer: OTLPTracer
    let logger: Logger

    init(configuration: TracingConfiguration, logger: Logger, counters: SpanExporter.Counters) {
        self.configuration = configuration
        self.logger = logger
        self.exporter = SpanExporter(configuration: configuration, logger: logger, counters: counters)
        self.tracer = OTLPTracer(exporter: self.exporter, sampler: configuration.sampler)
    }

    // MARK: - Requests

    /// A span for a request that says it belongs to a trace (`traceparent`), or that changes
    /// something (not `GET`/`HEAD`) and is not a worker's claim or lease call. Polls, streams,
    /// health checks, the dashboard's reads and workers' claims and heartbeats start no trace of
    /// their own: they would bury the jobs' traces.
    func requestSpan(method: HTTPMethod, route: String?, headers: HTTPHeaders, requestID: String) -> OTLPSpan? {
        let parentHeader = headers["traceparent"]
        if parentHeader.isEmpty,
            method == .GET || method == .HEAD || route?.hasPrefix("/v1/leases") == true
                || route == "/v1/executors/{name}/claim"
        {
            return nil
        }
        // Two `traceparent` fields are no valid context (W3C §3.2): the request starts a trace.
        let parent =
            parentHeader.count == 1
            ? SpanContext(
                traceparent: parentHeader[0],
                tracestate: headers["tracestate"].isEmpty ? nil : headers["tracestate"].joined(separator: ",")
            ) : nil
        let span = self.tracer.span(
            method.rawValue + " " + (route ?? "unmatched"),
            under: parent,
            kind: .server,
            at: .now()
        )
        span.update { attributes in
            attributes.set("http.request.method", method.rawValue)
            attributes.set("http.route", route ?? "unmatched")
            attributes.set("url.scheme", "http")
            attributes.set("taskserver.request.id", requestID)
        }
        return span
    }

    /// Ends a request's span with its answer's status (5xx: an error, as the HTTP conventions say
    /// for a server; 4xx is the client's).
    func endRequestSpan(_ span: OTLPSpan, status: Int) {
        span.update { attributes in
            attributes.set("http.response.status_code", Int64(status))
            if status >= 500 { attributes.set("error.type", String(status)) }
        }
        if status >= 500 { span.setStatus(SpanStatus(code: .error)) }
        span.end(at: SpanInstant.now())
    }

    // MARK: - Outbound calls

    /// A client span for an outbound request under `parent` (`http` tasks, webhook deliveries), and
    /// `request` with its `traceparent` (and `tracestate`) — unless the request sets its own. The
    /// URL's path and query are not recorded (a token may sit in either): its scheme, host and port are.
    func startClientSpan(
        _ request: inout OutboundRequest,
        under parent: SpanContext,
        name: String? = nil
    ) -> OTLPSpan {
        let span = self.tracer.span(name ?? request.method, under: parent, kind: .client, at: .now())
        Self.propagate(span.own, into: &request)
        span.update { attributes in
            attributes.set("http.request.method", request.method)
            if let url = OutboundURL(request.url) {
                attributes.set("url.scheme", url.scheme)
                let (host, port) = Self.hostAndPort(url)
                attributes.set("server.address", host)
                attributes.set("server.port", Int64(port))
            }
        }
        return span
    }

    /// Ends an outbound request's span: its status (4xx and 5xx are errors for a client, as the
    /// HTTP conventions say), or the kind of failure.
    func endClientSpan(_ span: OTLPSpan, _ outcome: Outcome<OutboundResponse>) {
        var failure: String?
        switch outcome {
        case .success(let response):
            if response.status >= 400 { failure = String(response.status) }
        case .failure(let error):
            failure = (error as? OutboundError).map { "\($0.kind)" } ?? "\(type(of: error))"
        case .cancelled:
            failure = "cancelled"
        }
        span.update { attributes in
            if case .success(let response) = outcome {
                attributes.set("http.response.status_code", Int64(response.status))
            }
            if let failure { attributes.set("error.type", failure) }
        }
        if let failure, !outcome.isCancelled { span.setStatus(SpanStatus(code: .error, message: failure)) }
        span.end(at: SpanInstant.now())
    }

    /// Adds `traceparent` and `tracestate` to `request` unless it has its own.
    static func propagate(_ context: SpanContext, into request: inout OutboundRequest) {
        if request.headers.contains(where: { $0.name.lowercasedASCII == "traceparent" }) { return }
        request.headers.append(("traceparent", context.traceparent))
        if let state = context.traceState { request.headers.append(("tracestate", state)) }
    }

    /// The host (without brackets) and port (the scheme's default when none is written).
    static func hostAndPort(_ url: OutboundURL) -> (String, Int) {
        let origin = url.origin
        let authority = origin.dropFirst(url.scheme.count + 3)
        guard let colon = authority.lastIndex(of: ":") else { return (String(authority), 80) }
        var host = authority[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return (String(host), Int(authority[authority.index(after: colon)...]) ?? 80)
    }

    // MARK: - Jobs

    /// The context a new job keeps (its `@trace` label): a span id of its own under `parent` (the
    /// request that submitted it, the attempt that started it), or a new trace when there is none.
    func jobLabel(parent: SpanContext?) -> String {
        JobTraceLabel(own: self.tracer.newSpan(under: parent), parentSpanID: parent?.spanID ?? 0).value
    }

    /// Starts a span under a job's span (`job` a run whose spec has the label).
    func startSpan(under label: JobTraceLabel, _ name: String, kind: SpanKind, at instant: SpanInstant) -> OTLPSpan {
        self.tracer.span(name, under: label.own, kind: kind, at: instant)
    }

    /// Exports what is queued (at most `timeout`) and stops.
    func shutdown(timeout: Duration = .seconds(2)) async {
        await self.exporter.shutdown(timeout: timeout)
    }
}

/// A traced job's context as the server keeps it, in the job's `@trace` label (see
/// `JobSnapshot.traceLabel`): `<traceparent of the job's span> <parent span id>[ <tracestate>]`,
/// the parent `0000000000000000` when the job began its trace. Kept with the job's labels, it
/// survives restarts, redrives and takeovers with the job, in every store, without a column.
struct JobTraceLabel: Sendable {
    /// The job span's own context (its trace, its span id, sampled, tracestate).
    var own: SpanContext
    /// The span the job's span descends from (0: none).
    var parentSpanID: UInt64

    init(own: SpanContext, parentSpanID: UInt64) {
        self.own = own
        self.parentSpanID = parentSpanID
    }

    init?(_ value: String) {
        var value = value
        guard
            let label = value.withUTF8({ bytes -> JobTraceLabel? in
                // `<traceparent: 55> <parent: 16>[ <tracestate>]`
                guard bytes.count >= 72, bytes[55] == UInt8(ascii: " "),
                    var own = SpanContext.parse(bytes, length: 55),
                    let parent = Hex.uint64(bytes, at: 56)
                else { return nil }
                if bytes.count > 73, bytes[72] == UInt8(ascii: " ") {
                    own.traceState = String(decoding: UnsafeBufferPointer(rebasing: bytes[73...]), as: UTF8.self)
                }
                return JobTraceLabel(own: own, parentSpanID: parent)
            })
        else { return nil }
        self = label
    }

    init?(_ run: JobRun) {
        guard let value = run.spec.labels[JobSnapshot.traceLabel] else { return nil }
        self.init(value)
    }

    var value: String {
        let state = self.own.traceState.map { Array($0.utf8) } ?? []
        return String(unsafeUninitializedCapacity: 72 + (state.isEmpty ? 0 : 1 + state.count)) { buffer in
            self.own.write(into: buffer)
            buffer[55] = UInt8(ascii: " ")
            Hex.write(self.parentSpanID, into: buffer, at: 56)
            guard !state.isEmpty else { return 72 }
            buffer[72] = UInt8(ascii: " ")
            for (index, byte) in state.enumerated() { buffer[73 + index] = byte }
            return 73 + state.count
        }
    }

    /// The job span's parent, as a context (nil for a job that began its trace).
    var parent: SpanContext? {
        self.parentSpanID == 0
            ? nil
            : SpanContext(
                traceID: self.own.traceID,
                spanID: self.parentSpanID,
                sampled: self.own.sampled,
                traceState: self.own.traceState
            )
    }
}
