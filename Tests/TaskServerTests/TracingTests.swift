import Foundation
import Logging
import NIOCore
import NIOHTTP1
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Traces (issue #46): W3C Trace Context in and out, the job's context kept with it, sampling, the
/// standard environment, and an exporter that never holds a job up. The span tree itself is checked
/// from outside, decoded with the official protobuf definitions (`scripts/tracing-test.py`).
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct TracingTests {
    static let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    // MARK: - traceparent and tracestate (W3C Trace Context level 1)

    @Test func aValidTraceparentIsRead() throws {
        let context = try #require(SpanContext(traceparent: Self.parent, tracestate: "congo=t61rcWkgMzE"))
        #expect(context.traceID.hex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(Hex.string(context.spanID) == "00f067aa0ba902b7")
        #expect(context.sampled)
        #expect(context.traceState == "congo=t61rcWkgMzE")
        #expect(context.traceparent == Self.parent)
        let unsampled = try #require(
            SpanContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
        )
        #expect(!unsampled.sampled)
        #expect(unsampled.traceparent.hasSuffix("-00"))
    }

    @Test(arguments: [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",  // short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // version 00 is 55 characters
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff is invalid
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero span id
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // delimiter
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version not hex
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // a later version's extra needs a dash
    ])
    func aMalformedTraceparentIsIgnored(_ value: String) {
        #expect(SpanContext(traceparent: value) == nil, "\(value)")
    }

    @Test func aLaterVersionIsReadAsFarAsVersion00Goes() throws {
        let context = try #require(
            SpanContext(traceparent: "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds")
        )
        #expect(context.traceID.hex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(context.traceparent == Self.parent)  // passed on as version 00
    }

    @Test func aMalformedTracestateIsDroppedAndTheParentKept() throws {
        for state in ["Congo=x", "congo", "a=b,a=c", "congo=t61rc,=x", "congo=va,lue" + "=", "x=" + "é"] {
            let context = try #require(SpanContext(traceparent: Self.parent, tracestate: state))
            #expect(context.traceState == nil, "\(state)")
        }
        let spaced = try #require(
            SpanContext(traceparent: Self.parent, tracestate: " rojo=00f067aa0ba902b7 ,, congo=t61 ")
        )
        #expect(spaced.traceState == "rojo=00f067aa0ba902b7,congo=t61")
        let tenant = try #require(
            SpanContext(traceparent: Self.parent, tracestate: "fw529a3039@dt=abc,1tenant@vendor=x")
        )
        #expect(tenant.traceState == "fw529a3039@dt=abc,1tenant@vendor=x")
    }

    @Test func anOversizedTracestateIsTruncatedByTheSpecsRule() throws {
        // 40 members: the last 8 go.
        let many = (0..<40).map { "k\($0)=v" }.joined(separator: ",")
        let truncated = try #require(SpanContext(traceparent: Self.parent, tracestate: many)?.traceState)
        #expect(truncated == (0..<32).map { "k\($0)=v" }.joined(separator: ","))
        // Over 512 characters: the member over 128 goes first, wherever it is.
        let long = "big=" + String(repeating: "x", count: 200)
        let members =
            ["a=" + String(repeating: "1", count: 100), long]
            + (0..<3).map { "m\($0)=" + String(repeating: "2", count: 100) }
        let kept = try #require(
            SpanContext(traceparent: Self.parent, tracestate: members.joined(separator: ","))?.traceState
        )
        #expect(!kept.contains("big="))
        #expect(kept.utf8.count <= 512)
        #expect(kept.hasPrefix("a=") && kept.contains("m2="))
    }

    // MARK: - Sampling and configuration

    @Test func samplersDecideAsOpenTelemetrysDo() throws {
        let ids = (0..<2000).map { _ in TraceIDs.traceID() }
        #expect(ids.allSatisfy { Sampler.alwaysOn.samples($0, parentSampled: nil) })
        #expect(!ids.contains { Sampler.alwaysOff.samples($0, parentSampled: true) })
        let half = ids.filter { Sampler.ratio(0.5).samples($0, parentSampled: nil) }.count
        #expect((800...1200).contains(half), "\(half) of 2000 at 0.5")
        // The decision is the trace id's: every server of a cluster decides alike.
        #expect(
            ids.map { Sampler.ratio(0.3).samples($0, parentSampled: nil) }
                == ids.map { Sampler.ratio(0.3).samples($0, parentSampled: nil) }
        )
        let parentBased = Sampler.parentBased(root: .alwaysOff)
        #expect(parentBased.samples(ids[0], parentSampled: true))
        #expect(!parentBased.samples(ids[0], parentSampled: false))
        #expect(!parentBased.samples(ids[0], parentSampled: nil))
        #expect(try Sampler(name: nil, argument: nil) == .parentBased(root: .alwaysOn))
        #expect(try Sampler(name: "parentbased_traceidratio", argument: "0.25") == .parentBased(root: .ratio(0.25)))
        #expect(throws: ConfigurationError.self) { try Sampler(name: "traceidratio", argument: "2") }
        #expect(throws: ConfigurationError.self) { try Sampler(name: "sometimes", argument: nil) }
    }

    @Test func theStandardEnvironmentConfiguresTracing() throws {
        #expect(try TracingConfiguration.resolve(endpoint: nil, includePayloads: false, environment: [:]) == nil)
        let environment = [
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_SERVICE_NAME": "jobs",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, service.name=ignored,team=a%20b",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=secret",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.1",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        ]
        let configuration = try #require(
            try TracingConfiguration.resolve(endpoint: nil, includePayloads: false, environment: environment)
        )
        #expect(configuration.tracesURL == "http://collector:4318/v1/traces")
        #expect(configuration.serviceName == "jobs")
        #expect(
            configuration.resourceAttributes.map { "\($0.key)=\($0.value)" } == [
                "deployment.environment=prod", "team=a b",
            ]
        )
        #expect(configuration.headers.map(\.name) == ["x-honeycomb-team"])
        #expect(configuration.sampler == .parentBased(root: .ratio(0.1)))
        #expect(configuration.scheduleDelay == .milliseconds(100))
        // The flag wins; the traces endpoint is a full URL; the SDK can be disabled.
        let flagged = try TracingConfiguration.resolve(
            endpoint: "http://127.0.0.1:9",
            includePayloads: true,
            environment: environment
        )
        #expect(flagged?.tracesURL == "http://127.0.0.1:9/v1/traces")
        #expect(flagged?.includePayloads == true)
        let full = try TracingConfiguration.resolve(
            endpoint: nil,
            includePayloads: false,
            environment: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://x/otlp/traces"]
        )
        #expect(full?.tracesURL == "https://x/otlp/traces")
        #expect(
            try TracingConfiguration.resolve(
                endpoint: nil,
                includePayloads: false,
                environment: environment.merging(["OTEL_SDK_DISABLED": "true"]) { $1 }
            ) == nil
        )
        #expect(throws: ConfigurationError.self) {
            try TracingConfiguration.resolve(
                endpoint: nil,
                includePayloads: false,
                environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"]
            )
        }
        // A malformed header list is refused without echoing it (it may hold a key).
        do {
            _ = try TracingConfiguration.resolve(
                endpoint: nil,
                includePayloads: false,
                environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_HEADERS": "sekrit"]
            )
            Issue.record("accepted")
        } catch {
            #expect(!"\(error)".contains("sekrit"))
        }
    }

    // MARK: - A server that traces

    static func tracing(_ collector: String, sampler: Sampler = .parentBased(root: .alwaysOn)) -> TracingConfiguration {
        var tracing = TracingConfiguration(tracesURL: collector + "/v1/traces")
        tracing.scheduleDelay = .milliseconds(50)
        tracing.sampler = sampler
        return tracing
    }

    static let httpJob =
        #"{"name": "call", "graph": {"type": "task", "id": "call", "action": "http", "params": {"url": "URL/hook"}}}"#

    /// The hex of `bytes`.
    static func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test func aJobJoinsItsCallersTraceAndSendsItOn() async throws {
        let collector = try await TestReceiver.answering(.ok)
        let downstream = try await TestReceiver.answering(.ok)
        defer {
            Task {
                await collector.stop()
                await downstream.stop()
            }
        }
        try await withServer({ $0.tracing = Self.tracing(collector.url) }) { server in
            let job = jsonValue(Self.httpJob.replacingOccurrences(of: "URL", with: downstream.url))
            let response = try await server.post(
                "/v1/jobs?waitMs=10000",
                json: job,
                headers: [("traceparent", Self.parent), ("tracestate", "congo=t61rcWkgMzE")]
            )
            #expect(response.status == 201)
            #expect(response.json["state"] == "succeeded", "\(response.json)")
            #expect(response.json["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect(response.json["labels"] == [:], "the context is no label of the client's")
            // The downstream call carries the trace, from a span of its own (not the caller's).
            let call = try await downstream.waitForRequests(1)[0]
            let sent = try #require(call.header("traceparent").flatMap { SpanContext(traceparent: $0) })
            #expect(sent.traceID.hex == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect(sent.spanID != 0x00f0_67aa_0ba9_02b7)
            #expect(call.header("tracestate") == "congo=t61rcWkgMzE")
            // The collector receives protobuf holding the trace id and the call's span id.
            _ = try await collector.waitForRequests(1)
            var exported: [UInt8] = []
            for _ in 0..<100 {
                exported = collector.requests.flatMap(\.body)
                if Self.hex(exported).contains(Hex.string(sent.spanID)) { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(collector.requests.allSatisfy { $0.header("content-type") == "application/x-protobuf" })
            #expect(Self.hex(exported).contains("4bf92f3577b34da6a3ce929d0e0e4736"))
            #expect(Self.hex(exported).contains(Hex.string(sent.spanID)), "the http call's span is exported")
            // Listed too, and filtered by no label of ours.
            let listed = try await server.get("/v1/jobs").json["items"]?.arrayValue ?? []
            #expect(listed.first?["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
        }
    }

    @Test func aMalformedTraceparentStartsATraceAndIsNoError() async throws {
        let collector = try await TestReceiver.answering(.ok)
        defer { Task { await collector.stop() } }
        try await withServer({ $0.tracing = Self.tracing(collector.url) }) { server in
            let job = jsonValue(#"{"graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#)
            for bad in [
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", "garbage",
                "ff-" + String(repeating: "a", count: 52),
            ] {
                let response = try await server.post("/v1/jobs", json: job, headers: [("traceparent", bad)])
                #expect(response.status == 201)
                let traceId = try #require(response.json["traceId"]?.stringValue)
                #expect(traceId.count == 32 && traceId != "4bf92f3577b34da6a3ce929d0e0e4736")
            }
            // Without any: a trace of its own as well; two jobs, two traces.
            let first = try await server.submit(job)["traceId"]?.stringValue
            let second = try await server.submit(job)["traceId"]?.stringValue
            #expect(first != nil && second != nil && first != second)
        }
    }

    @Test func tracingOffLeavesJobsAsTheyWere() async throws {
        let downstream = try await TestReceiver.answering(.ok)
        defer { Task { await downstream.stop() } }
        try await withServer { server in
            let job = jsonValue(Self.httpJob.replacingOccurrences(of: "URL", with: downstream.url))
            let response = try await server.post(
                "/v1/jobs?waitMs=10000",
                json: job,
                headers: [("traceparent", Self.parent)]
            )
            #expect(response.json["state"] == "succeeded")
            #expect(response.json["traceId"] == nil)
            #expect(try await downstream.waitForRequests(1)[0].header("traceparent") == nil)
        }
    }

    @Test func anUnsampledTraceIsCarriedOnButNotExported() async throws {
        let collector = try await TestReceiver.answering(.ok)
        let downstream = try await TestReceiver.answering(.ok)
        defer {
            Task {
                await collector.stop()
                await downstream.stop()
            }
        }
        try await withServer({ $0.tracing = Self.tracing(collector.url) }) { server in
            let job = jsonValue(Self.httpJob.replacingOccurrences(of: "URL", with: downstream.url))
            let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
            let response = try await server.post(
                "/v1/jobs?waitMs=10000",
                json: job,
                headers: [("traceparent", unsampled)]
            )
            #expect(response.json["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
            let sent = try await downstream.waitForRequests(1)[0].header("traceparent") ?? ""
            #expect(sent.hasPrefix("00-4bf92f3577b34da6a3ce929d0e0e4736-") && sent.hasSuffix("-00"), "\(sent)")
            try await Task.sleep(for: .milliseconds(300))
            #expect(server.app.tracing?.exporter.statistics.exported == 0)
            #expect(collector.requests.isEmpty)
        }
    }

    @Test func aCollectorThatIsDownHoldsNoJobUpAndDropsAreCounted() async throws {
        // Nothing listens on port 9 (discard) here: every export fails at connect.
        try await withServer({ $0.tracing = Self.tracing("http://127.0.0.1:9") }) { server in
            let job = jsonValue(#"{"graph": {"type": "task", "id": "t", "action": "value", "params": {"value": 1}}}"#)
            for _ in 0..<20 {
                let response = try await server.post("/v1/jobs?waitMs=5000", json: job)
                #expect(response.json["state"] == "succeeded")
            }
            let tracing = try #require(server.app.tracing)
            #expect(
                await eventually { tracing.exporter.statistics.dropped >= 20 },
                "\(tracing.exporter.statistics)"
            )
            let metrics = try await server.get("/metrics").text
            #expect(metrics.contains("taskserver_spans_dropped_total"))
        }
    }

    @Test func theExporterSendsFullBatchesKeepsItsQueueBoundAndFlushesTheRest() async throws {
        // Batches of 3, at most 7 queued, no periodic export: only full batches and flushes send.
        func configuration(_ url: String) -> TracingConfiguration {
            var configuration = TracingConfiguration(tracesURL: url + "/v1/traces")
            configuration.maxBatchSize = 3
            configuration.maxQueueSize = 7
            configuration.scheduleDelay = .seconds(3600)
            configuration.exportTimeout = .seconds(60)
            return configuration
        }
        let span: [UInt8] = [0x2A, 0x01, 0x78]  // Span.name = "x"

        let collector = try await TestReceiver.answering(.ok)
        let exporter = SpanExporter(configuration: configuration(collector.url), logger: Logger(label: "test"))
        for _ in 0..<7 { exporter.add(span) }
        _ = try await exporter.flush().value
        #expect(exporter.statistics.exported == 7 && exporter.statistics.dropped == 0, "\(exporter.statistics)")
        // Three requests of 3, 3 and 1 spans: each span once, as a `ScopeSpans.spans` field.
        let field: [UInt8] = [0x12, 0x03] + span
        let counts = try await collector.waitForRequests(3).map { request in
            (0...(request.body.count - field.count)).filter { Array(request.body[$0..<($0 + field.count)]) == field }
                .count
        }
        #expect(counts.sorted() == [1, 3, 3])
        await exporter.shutdown(timeout: .seconds(1))
        await collector.stop()

        // A collector that never answers: one batch in flight, 7 queued, the rest dropped.
        let silent = try await TestReceiver.start { _, _ in never() }
        let stuck = SpanExporter(configuration: configuration(silent.url), logger: Logger(label: "test"))
        for _ in 0..<3 { stuck.add(span) }
        _ = try await silent.waitForRequests(1)
        for _ in 0..<17 { stuck.add(span) }
        #expect(stuck.statistics.dropped == 10 && stuck.statistics.queued == 7, "\(stuck.statistics)")
        await stuck.shutdown(timeout: .milliseconds(100))
        await silent.stop()
    }

    @Test(arguments: [StoreKind.sqlite, .postgres])
    func aResumedJobKeepsItsTrace(_ kind: StoreKind) async throws {
        let collector = try await TestReceiver.answering(.ok)
        defer { Task { await collector.stop() } }
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        let settings = kind == .postgres ? try TestPostgres.freshSchema() : nil
        defer { settings.map(TestPostgres.drop) }
        let configure: (inout ServerConfiguration) -> Void = { configuration in
            configuration.tracing = Self.tracing(collector.url)
            if let settings { configuration.database = settings } else { configuration.dataPath = path }
        }
        // A job that waits for a completion, stopped with its server and resumed by the next.
        let job = jsonValue(#"{"graph": {"type": "task", "id": "wait", "action": "await"}}"#)
        let id = try await withServer(configure) { server in
            let response = try await server.post("/v1/jobs", json: job, headers: [("traceparent", Self.parent)])
            #expect(response.json["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
            return try #require(response.json["id"]?.stringValue)
        }
        try await withServer(configure) { server in
            let resumed = try await server.get("/v1/jobs/\(id)").json
            #expect(resumed["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736", "\(resumed)")
            #expect(resumed["labels"] == [:])
            let run = try #require(server.app.jobs.liveRun(id))
            let label = try #require(JobTraceLabel(run))
            #expect(label.parentSpanID != 0)
            let completed = try await server.post("/v1/jobs/\(id)/tasks/wait/complete", json: ["result": 1])
            #expect(completed.status == 200, "\(completed)")
            #expect(try await server.finished(id)["state"] == "succeeded")
            // The job's span, exported by the server that ended it, has the id the first one chose.
            let jobSpan = Hex.string(label.own.spanID)
            #expect(
                await eventually { Self.hex(collector.requests.flatMap(\.body)).contains(jobSpan) },
                "the job's span is exported after the restart"
            )
        }
    }
}
