import NIOHTTP1
import TaskCore
import TaskGraph

/// The server-sent events wire format (the HTML standard's `text/event-stream`) and how a request
/// asks for it.
enum ServerSentEvents {
    static let contentType = "text/event-stream"
    /// A comment line that keeps proxies and clients from timing an idle stream out.
    static let keepAlive = Array(": keep-alive\n\n".utf8)

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

/// Streams one job's events (SPEC §7): from a position on, live, with keep-alive comments, until
/// the job's terminal event. One write at a time: the events themselves live in the job, so a slow
/// reader costs one chunk of memory, and is cut off when a chunk waits `StreamWriter.writeTimeout`.
struct JobEventStream: Sendable {
    let job: any JobView
    let writer: StreamWriter
    let keepAlive: Duration
    /// Events per chunk: a big job's history goes out in slices, each waiting for the last.
    static let chunkEvents = 256

    func pump(after: Int) {
        if self.writer.isFinished { return }
        let events = self.job.events(after: after, limit: Self.chunkEvents)
        guard let last = events.last else {
            // Nothing new. A finished job's stream ends (its terminal event was sent); else wait.
            if self.job.isTerminalAndVisible {
                self.writer.finish()
                return
            }
            self.job.waitForEvents(after: after, timeout: self.keepAlive).whenComplete { _ in
                if self.writer.isFinished { return }
                if self.job.events(after: after, limit: 1).isEmpty {
                    self.writer.write(ServerSentEvents.keepAlive).whenComplete { outcome in
                        if outcome.value != nil { self.pump(after: after) }
                    }
                } else {
                    self.pump(after: after)
                }
            }
            return
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(events.count * 160)
        for event in events {
            ServerSentEvents.append(
                id: String(event.seq),
                event: event.type.rawValue,
                data: event.json.jsonBytes,
                to: &bytes
            )
        }
        let ended = last.type.isTerminal
        self.writer.write(bytes).whenComplete { outcome in
            // A failed write closed the connection (gone, or cut off as too slow): nothing to do.
            guard outcome.value != nil else { return }
            if ended { self.writer.finish() } else { self.pump(after: last.seq) }
        }
    }
}
