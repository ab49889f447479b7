import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph

/// The server-sent events wire format (the HTML standard's `text/event-stream`) and how a request
/// asks for it.
enum ServerSentEvents {
    static let contentType = "text/event-stream"
    /// A comment line that keeps proxies and clients from timing an idle stream out.
    static let keepAlive = ByteBuffer(string: ": keep-alive\n\n")

    /// Appends one event: `id`, `event` and a single-line `data` (compact JSON has no newlines).
    static func append(id: String, event: String, data: [UInt8], to bytes: inout [UInt8]) {
        bytes.append(contentsOf: "id: ".utf8)
        bytes.append(contentsOf: id.utf8)
        bytes.append(contentsOf: "\nevent: ".utf8)
        bytes.append(contentsOf: event.utf8)
        bytes.append(contentsOf: "\ndata: ".utf8)
        bytes.append(contentsOf: data)
        bytes.append(contentsOf: "\n\n".utf8)
    }

    /// A streamed `text/event-stream` response whose body `start` writes: never cached, never
    /// buffered by a proxy that honours `X-Accel-Buffering`.
    static func response(_ start: @escaping @Sendable (StreamWriter) -> Void) -> Response {
        var headers = HTTPHeaders()
        headers.add(name: "cache-control", value: "no-store")
        headers.add(name: "x-accel-buffering", value: "no")
        return .streaming(contentType: Self.contentType, headers: headers, ResponseStream(start))
    }

    /// Whether the request asks for a stream: `?stream=true`, or `Accept: text/event-stream`.
    /// `stream` other than `true`/`false` is a 400.
    static func isRequested(_ request: Request) throws(HTTPProblem) -> Bool {
        if let stream = request.query["stream"] {
            switch stream {
            case "true": return true
            case "false": return false
            default: throw .badQuery("stream must be true or false, got \"\(stream.prefix(40))\"")
            }
        }
        return request.headers["accept"].contains { $0.contains(Self.contentType) }
    }

    /// The `Last-Event-ID` header, if any (an EventSource sends it when it reconnects).
    static func lastEventID(_ request: Request) -> String? {
        request.headers.first(name: "last-event-id").map { String($0.prefix(100)) }
    }
}

/// What an event stream sends: chunks of encoded events after a position, and a wait for more.
protocol EventStreamSource: Sendable {
    /// What streams of this source park under (`EventStreamHub`).
    var key: String { get }
    /// The next chunk after `position` — its bytes (none when nothing is new), the position after
    /// it, and whether the stream ends with it.
    func chunk(after position: Int) -> (bytes: [UInt8], next: Int, ends: Bool)
    /// Completes when there may be more after `position`, or after `timeout`.
    func waitForMore(after position: Int, timeout: Duration) -> Future<Void>
}

/// Sends a stream's events (SPEC §7) from a position on, live, one chunk at a time, each write
/// waiting for the last: the events themselves live in their source, so a slow reader costs one
/// chunk of memory, and is cut off when a chunk waits `StreamWriter.writeTimeout`. An idle stream
/// gets a keep-alive comment every `keepAlive`. One pump serves both streams: a job's
/// (`JobEventSource`) and the server's (`FeedEventSource`).
struct EventStreamPump<Source: EventStreamSource>: Sendable {
    let source: Source
    let writer: StreamWriter
    let hub: EventStreamHub
    var keepAlive: Duration { self.hub.keepAlive }
    /// Events per chunk: a big history goes out in slices, each waiting for the last.
    static var chunkEvents: Int { 256 }
    /// Bytes after which a chunk takes no more events (a chunk holds at least one).
    static var chunkBytes: Int { 64 * 1024 }

    /// Sends what there is after `position`; with nothing to send, waits for more, and writes a
    /// keep-alive comment once the stream has been idle for `keepAlive` (since `idleSince`).
    func pump(after position: Int, idleSince: UInt64 = monotonicNanoseconds()) {
        if self.writer.isFinished { return }
        let chunk = self.hub.chunk(of: self.source, after: position)
        if chunk.bytes.readableBytes == 0 {
            if chunk.ends {
                self.writer.finish()
                return
            }
            let idle = Duration.nanoseconds(Int64(monotonicNanoseconds() &- idleSince))
            if idle >= self.keepAlive {
                self.send(ServerSentEvents.keepAlive, then: position, ends: false)
                return
            }
            let source = self.source
            self.hub.park(
                source.key,
                after: position,
                loop: self.writer.eventLoop,
                deadline: idleSince &+ self.keepAlive.clampedNanoseconds,
                waitForMore: { source.waitForMore(after: $0, timeout: .seconds(60)) },
                step: { self.pump(after: position, idleSince: idleSince) }
            )
            return
        }
        self.send(chunk.bytes, then: chunk.next, ends: chunk.ends)
    }

    private func send(_ bytes: ByteBuffer, then position: Int, ends: Bool) {
        self.writer.write(bytes).whenComplete { outcome in
            // A failed write closed the connection (gone, or cut off as too slow): nothing to do.
            guard outcome.value != nil else { return }
            if ends {
                self.writer.finish()
            } else {
                // Not at once: the write may have completed at once, and the loop has sockets
                // to serve (`EventStreamHub`).
                self.hub.runSoon(on: self.writer.eventLoop) { self.pump(after: position) }
            }
        }
    }
}

/// One job's events, until its terminal one.
///
/// A stream opened on a stored record of an unfinished job — one asleep until its delayed start
/// (SPEC §8), not live in this process — reads the job again (`refresh`) every `refreshInterval`
/// while it waits, and follows the live run from then on. Such a stream parks under a key of its
/// own: its view of the job is its own until it turns live.
struct JobEventSource: EventStreamSource {
    /// The job as last read.
    final class View: Sendable {
        let job: Mutex<any JobView>
        init(_ job: any JobView) { self.job = Mutex(job) }
    }

    static var refreshInterval: Duration { .seconds(1) }

    let view: View
    let refresh: (@Sendable () -> Future<(any JobView)?>)?

    init(job: any JobView, refresh: (@Sendable () -> Future<(any JobView)?>)? = nil) {
        self.view = View(job)
        self.refresh = refresh
    }

    var job: any JobView { self.view.job.withLock { $0 } }

    /// Whether the view is a stored record that may change under it (read again while waiting).
    private func isStale(_ job: any JobView) -> Bool {
        self.refresh != nil && !(job is JobRun) && !job.isTerminalAndVisible
    }

    var key: String {
        let job = self.job
        return self.isStale(job) ? "job \(job.id) \(ObjectIdentifier(self.view).hashValue)" : "job " + job.id
    }

    func chunk(after position: Int) -> (bytes: [UInt8], next: Int, ends: Bool) {
        let job = self.job
        let events = job.encodedEvents(after: position, limit: EventStreamPump<Self>.chunkEvents)
        // Nothing new: a finished job's stream ends (its terminal event was sent).
        if events.isEmpty { return ([], position, job.isTerminalAndVisible) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(events.reduce(0) { $0 + $1.json.count + 40 })
        var next = position
        var ends = false
        for (event, json) in events where bytes.count < EventStreamPump<Self>.chunkBytes {
            ServerSentEvents.append(id: String(event.seq), event: event.type.rawValue, data: json, to: &bytes)
            next = event.seq
            ends = event.type.isTerminal
        }
        // A redriven job's history goes on after a terminal event: the stream ends at the last one.
        if ends { ends = job.isTerminalAndVisible && next == job.lastVisibleSeq }
        return (bytes, next, ends)
    }

    func waitForMore(after position: Int, timeout: Duration) -> Future<Void> {
        let job = self.job
        guard self.isStale(job), let refresh else { return job.waitForEvents(after: position, timeout: timeout) }
        let promise = Promise<Void>()
        let view = self.view
        TimerQueue.shared.schedule(after: min(timeout, Self.refreshInterval)) {
            refresh().whenComplete { outcome in
                if case .success(let fresh?) = outcome { view.job.withLock { $0 = fresh } }
                promise.trySucceed(())
            }
        }
        return promise.future
    }
}

/// The server's `job.*` events, until the server drains. A reader that falls out of the feed's
/// window is told (`stream.reset`) and continues from the oldest entry held.
struct FeedEventSource: EventStreamSource {
    let feed: any EventFeed

    var key: String { "feed" }

    /// Entries per block: a chunk ends at a block boundary, so readers that fell behind at
    /// different places soon read the same chunks, built once (`EventStreamHub.chunk`).
    static var blockEntries: Int { 128 }

    func chunk(after position: Int) -> (bytes: [UInt8], next: Int, ends: Bool) {
        let block = Self.blockEntries
        let toBoundary = block - ((max(0, position) % block + block) % block)
        let (entries, gap) = self.feed.entries(after: position, limit: toBoundary)
        var bytes: [UInt8] = []
        var next = position
        if gap {
            next = self.feed.beforeOldest
            ServerSentEvents.append(
                id: self.feed.cursor(max(0, next)),
                event: "stream.reset",
                data: Array(#"{"reason":"events after this cursor are no longer held; reload and continue"}"#.utf8),
                to: &bytes
            )
        }
        var frames: [[UInt8]] = []
        var size = 0
        for entry in entries where size < EventStreamPump<Self>.chunkBytes {
            let frame = entry.frame
            frames.append(frame)
            size += frame.count
            next = entry.position
        }
        bytes.reserveCapacity(bytes.count + size)
        for frame in frames { bytes.append(contentsOf: frame) }
        return (bytes, next, false)
    }

    func waitForMore(after position: Int, timeout: Duration) -> Future<Void> {
        self.feed.waitForEntries(after: position, timeout: timeout)
    }
}
