import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Server-sent events and the dashboard's files (SPEC §7).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct StreamsTests {
    /// One parsed event of a stream.
    struct Event: Equatable {
        var id: String
        var event: String
        var data: JSONValue
    }

    /// The events (and comments) of an SSE body, in order.
    static func parse(_ body: String) -> (events: [Event], comments: [String]) {
        var events: [Event] = []
        var comments: [String] = []
        for block in body.components(separatedBy: "\n\n") {
            var event = Event(id: "", event: "", data: .null)
            var seen = false
            for line in block.split(separator: "\n") {
                if line.hasPrefix(":") {
                    comments.append(String(line))
                } else if line.hasPrefix("id: ") {
                    event.id = String(line.dropFirst(4))
                    seen = true
                } else if line.hasPrefix("event: ") {
                    event.event = String(line.dropFirst(7))
                } else if line.hasPrefix("data: ") {
                    event.data = jsonValue(String(line.dropFirst(6)))
                }
            }
            if seen { events.append(event) }
        }
        return (events, comments)
    }

    /// The body of a chunked response: the chunks' data joined.
    static func dechunk(_ raw: String) -> String {
        guard let headEnd = raw.range(of: "\r\n\r\n") else { return "" }
        var rest = Substring(raw[headEnd.upperBound...])
        var body = ""
        while let lineEnd = rest.range(of: "\r\n"), let size = Int(rest[..<lineEnd.lowerBound], radix: 16) {
            if size == 0 { break }
            let start = lineEnd.upperBound
            let utf8 = rest.utf8
            // A stream read mid-way may end inside a chunk.
            let end = utf8.index(start, offsetBy: size, limitedBy: utf8.endIndex) ?? utf8.endIndex
            body += String(rest[start..<end])
            // By bytes: "\r\n" is one Character, so dropping two Characters would eat a digit.
            guard let next = utf8.index(end, offsetBy: 2, limitedBy: utf8.endIndex) else { break }
            rest = Substring(utf8[next...])
        }
        return body
    }

    /// Reads until the whole event of type `type` (its blank line included) has arrived.
    static func read(_ connection: SocketConnection, throughEvent type: String) throws -> String {
        try connection.read(until: "event: \(type)\n", then: "\n\n")
    }

    static func request(_ target: String, headers: [(String, String)] = []) -> [UInt8] {
        HTTPRequestBytes.make("GET", target, headers: headers, body: nil)
    }

    // MARK: - One job's stream

    @Test func aJobsStreamCarriesItsEventsLiveAndEndsAfterTheTerminalOne() async throws {
        try await withServer { server in
            let id = try await server.submitID(
                jsonValue(
                    #"{"graph": {"type": "series", "id": "s", "steps": [{"type": "task", "id": "d", "action": "delay", "params": {"ms": 300}}, {"type": "task", "id": "v", "action": "value", "params": {"value": 7}}]}}"#
                )
            )
            let raw = try await server.raw { connection in
                try connection.send(Self.request("/v1/jobs/\(id)/events?stream=true"))
                return try connection.readToEnd()
            }
            #expect(raw.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(raw.lowercased().contains("content-type: text/event-stream"))
            #expect(raw.lowercased().contains("transfer-encoding: chunked"))
            #expect(raw.lowercased().contains("cache-control: no-store"))
            let (events, _) = Self.parse(Self.dechunk(raw))
            #expect(events.map(\.id) == (1...9).map(String.init), "every event once, in order")
            #expect(events.last?.event == "job.succeeded")
            let stored = try await server.get("/v1/jobs/\(id)/events").json["items"]?.arrayValue ?? []
            #expect(events.map(\.data) == stored, "data is the event JSON of GET …/events")
            #expect(events.map(\.event) == stored.map { $0["type"]?.stringValue ?? "" })
        }
    }

    @Test func aStreamResumesAfterLastEventIDAndAcceptSelectsIt() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.value(1), waitMs: 5000)
            let raw = try await server.raw { connection in
                try connection.send(
                    Self.request(
                        "/v1/jobs/\(id)/events",
                        headers: [("Accept", "text/event-stream"), ("Last-Event-ID", "3")]
                    )
                )
                return try connection.readToEnd()
            }
            let (events, _) = Self.parse(Self.dechunk(raw))
            #expect(events.map(\.id) == ["4", "5"])
            #expect(events.last?.event == "job.succeeded")
            // `after` does the same without the header; nothing left: the stream ends at once.
            let rest = try await server.raw { connection in
                try connection.send(Self.request("/v1/jobs/\(id)/events?stream=true&after=5"))
                return try connection.readToEnd()
            }
            #expect(Self.parse(Self.dechunk(rest)).events.isEmpty)
            expectProblem(try await server.get("/v1/jobs/\(id)/events?stream=yes"), 400, "query.invalid")
            expectProblem(
                try await server.get("/v1/jobs/\(id)/events?stream=true", headers: [("Last-Event-ID", "x")]),
                400,
                "query.invalid"
            )
        }
    }

    @Test func anIdleStreamGetsKeepAliveCommentsAndEndsWhenTheServerDrains() async throws {
        let server = try await TestServer.start { $0.streamKeepAlive = .milliseconds(100) }
        let id = try await server.submitID(Jobs.await())
        let (raw, _) = try await server.raw { connection -> (String, Bool) in
            try connection.send(Self.request("/v1/jobs/\(id)/events?stream=true"))
            // Two comments, one after the other.
            _ = try connection.read(until: ": keep-alive", then: ": keep-alive")
            server.app.beginDraining()
            return (try connection.readToEnd(), true)
        }
        #expect(Self.parse(Self.dechunk(raw)).comments.count >= 2)
        #expect(raw.hasSuffix("0\r\n\r\n"), "the stream ends properly when the server drains")
        await server.stop()
    }

    /// Issue #27: every append used to wake each waiting stream on the appending thread, so a
    /// burst with many streams stalled every request. Now a job holds one waiter however many
    /// streams follow it, and its streams are woken on their own loops.
    @Test func manyStreamsOfOneJobShareOneWaiterAndEachGetsTheBurst() async throws {
        try await withServer { server in
            let id = try await server.submitID(Jobs.await())
            let port = server.port
            let count = 64
            let connections = try await Blocking.run {
                try (0..<count).map { _ in try SocketConnection(port: port) }
            }
            for connection in connections { try connection.send(Self.request("/v1/jobs/\(id)/events?stream=true")) }
            #expect(await eventually { server.app.eventStreams.parkedCount == count }, "every stream parks")
            let run = try #require(server.app.jobs.liveRun(id))
            #expect(run.eventWaiterCount == 1, "one waiter for \(count) streams")

            let completed = try await server.post("/v1/jobs/\(id)/tasks/approve/complete", text: #"{"result": "yes"}"#)
            #expect(completed.status == 200)
            let bodies = try await Blocking.run {
                try connections.map { connection in
                    defer { connection.close() }
                    return try connection.readToEnd()
                }
            }
            for raw in bodies {
                let events = Self.parse(Self.dechunk(raw)).events
                #expect(events.map(\.id) == events.indices.map { String($0 + 1) }, "every event once, in order")
                #expect(events.last?.event == "job.succeeded")
            }
            #expect(server.app.eventStreams.parkedCount == 0)
        }
    }

    /// A source that counts the chunks it builds.
    final class CountingSource: EventStreamSource {
        let key = "counting"
        let built = Mutex(0)

        func chunk(after position: Int) -> (bytes: [UInt8], next: Int, ends: Bool) {
            self.built.withLock { $0 += 1 }
            return (Array("id: \(position + 1)\n\n".utf8), position + 1, false)
        }

        func waitForMore(after position: Int, timeout: Duration) -> Future<Void> { Future(value: ()) }
    }

    /// Issue #27: streams at one position send one chunk, built once, its bytes shared (NIO writes
    /// the same storage to every socket).
    @Test func streamsAtOnePositionShareOneChunk() {
        let hub = EventStreamHub(keepAlive: .seconds(15))
        let source = CountingSource()
        let first = hub.chunk(of: source, after: 4)
        let second = hub.chunk(of: source, after: 4)
        #expect(source.built.withLock { $0 } == 1)
        #expect(first.next == 5 && second.next == 5)
        let same = first.bytes.withUnsafeReadableBytes { a in
            second.bytes.withUnsafeReadableBytes { b in a.baseAddress == b.baseAddress }
        }
        #expect(same, "one storage for both")
        _ = hub.chunk(of: source, after: 5)
        #expect(source.built.withLock { $0 } == 2, "another position, another chunk")
    }

    // MARK: - The server-wide stream

    @Test func theServerStreamCarriesEveryJobsJobEventsWithTheJob() async throws {
        try await withServer { server in
            let port = server.port
            let connection = try await Blocking.run { try SocketConnection(port: port) }
            try connection.send(Self.request("/v1/events?stream=true"))
            _ = try await Blocking.run { try connection.read(until: "\r\n\r\n") }
            let id = try await server.submitID(Jobs.value(1), waitMs: 5000)
            let raw = try await Blocking.run { try Self.read(connection, throughEvent: "job.succeeded") }
            connection.close()
            let (events, _) = Self.parse(Self.dechunk(raw + "\r\n"))
            let mine = events.filter { $0.data["jobId"] == .string(id) }
            #expect(mine.map(\.event) == ["job.created", "job.started", "job.succeeded"])
            #expect(mine.map { $0.data["cursor"]?.stringValue } == mine.map(\.id))
            #expect(mine.last?.data["job"]?["state"] == "succeeded")
            #expect(mine.last?.data["job"]?["result"] == nil, "the job as list views show it")

            // Resume from a cursor: what came after it; a cursor of another process: a reset first.
            let cursor = mine[0].id
            let resumed = try await server.raw { connection in
                try connection.send(Self.request("/v1/events?stream=true", headers: [("Last-Event-ID", cursor)]))
                return try Self.read(connection, throughEvent: "job.succeeded")
            }
            #expect(Self.parse(Self.dechunk(resumed + "\r\n")).events.map(\.event) == ["job.started", "job.succeeded"])
            let stale = try await server.raw { connection in
                try connection.send(Self.request("/v1/events?stream=true", headers: [("Last-Event-ID", "zzz.4")]))
                return try Self.read(connection, throughEvent: "job.succeeded")
            }
            #expect(Self.parse(Self.dechunk(stale + "\r\n")).events.first?.event == "stream.reset")

            let page = try await server.get("/v1/events?after=\(cursor)").json
            #expect(page["items"]?.arrayValue?.map { $0["type"] } == ["job.started", "job.succeeded"])
            #expect(page["next"] == .string(mine[2].id))
            let empty = try await server.get("/v1/events?after=\(mine[2].id)&waitMs=50").json
            #expect(empty["items"] == [])
            #expect(try await server.get("/v1/events?after=nope").json["reset"] == true)
        }
    }

    // MARK: - The dashboard's files

    @Test func theDashboardIsServedWithAStrictContentSecurityPolicy() async throws {
        try await withServer { server in
            let index = try await server.get("/ui/")
            #expect(index.status == 200)
            #expect(index.header("content-type") == "text/html; charset=utf-8")
            let policy = try #require(index.header("content-security-policy"))
            #expect(policy.contains("script-src 'self'") && !policy.contains("unsafe"))
            #expect(index.header("x-content-type-options") == "nosniff")
            #expect(index.body == PackageResources.index_html)
            let script = try await server.get("/ui/app.js")
            #expect(script.header("content-type") == "text/javascript; charset=utf-8")
            // Every file under its own name (DashboardFiles pairs two lists kept by hand): each
            // script's first line names it.
            for (name, contentType) in DashboardFiles.names {
                let file = try await server.get("/ui/\(name)")
                #expect(file.status == 200 && file.header("content-type") == contentType, "\(name)")
                if name.hasSuffix(".js") { #expect(file.text.hasPrefix("// \(name) — "), "\(name)") }
            }
            let redirect = try await server.get("/ui")
            #expect(redirect.status == 308)
            #expect(redirect.header("location") == "/ui/")
            expectProblem(try await server.get("/ui/secrets.txt"), 404, "route.notFound")
        }
    }
}
