import NIOHTTP1
import TaskCore
import TaskGraph

/// `/v1/jobs/{id}/events`: a job's history in order, read, long-polled or streamed (SSE) after a
/// sequence number; `/v1/events`: every job's `job.*` events, server-wide (SPEC §3.4, §7).
struct EventsAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.GET, "/v1/jobs/{id}/events", self.events)
        router.add(.GET, "/v1/events", self.serverEvents)
    }

    @Sendable func events(_ request: Request) throws -> Future<Response> {
        var from = try request.integerQuery("after", in: 0...9_007_199_254_740_991) ?? 0
        let waitMs = try request.integerQuery("waitMs", in: 0...self.app.configuration.maxWaitMs)
        let limit = try request.integerQuery("limit", in: 1...10_000) ?? 1000
        let stream = try ServerSentEvents.isRequested(request)
        if stream, let lastEventID = ServerSentEvents.lastEventID(request) {
            // A reconnecting EventSource resumes where it was.
            guard let seq = Int(lastEventID), seq >= 0 else {
                throw HTTPProblem.badQuery("Last-Event-ID must be an event's seq, got \"\(lastEventID.prefix(40))\"")
            }
            from = seq
        }
        let after = from
        let keepAlive = self.app.configuration.streamKeepAlive
        return self.app.withJob(request) { job -> Future<Response> in
            if stream {
                return Future(
                    value: ServerSentEvents.response { writer in
                        JobEventStream(job: job, writer: writer, keepAlive: keepAlive).pump(after: after)
                    }
                )
            }
            let respond: @Sendable () -> Response = {
                .json(["items": .array(job.events(after: after, limit: limit).map(\.json))])
            }
            guard let waitMs, waitMs > 0 else { return Future(value: respond()) }
            return job.waitForEvents(after: after, timeout: .milliseconds(waitMs)).map { respond() }
        }
    }

    /// `GET /v1/events`: as a stream (`?stream=true`) from `Last-Event-ID` or `after` (a cursor),
    /// or as JSON pages `{"items", "next", "reset"?}`, long-polled with `waitMs`.
    @Sendable func serverEvents(_ request: Request) throws -> Future<Response> {
        let log = self.app.serverEvents
        let stream = try ServerSentEvents.isRequested(request)
        let waitMs = try request.integerQuery("waitMs", in: 0...self.app.configuration.maxWaitMs)
        let limit = try request.integerQuery("limit", in: 1...10_000) ?? 1000
        let cursor = (stream ? ServerSentEvents.lastEventID(request) : nil) ?? request.query["after"]
        let start = log.start(cursor)
        let keepAlive = self.app.configuration.streamKeepAlive
        if stream {
            return Future(
                value: ServerSentEvents.response { writer in
                    let events = ServerEventStream(log: log, writer: writer, keepAlive: keepAlive)
                    switch start {
                    case .now: events.pump(after: log.latest)
                    case .after(let position): events.pump(after: position)
                    // Another process's cursor: everything held is newer than it.
                    case .stale: events.pump(after: -1)
                    }
                }
            )
        }
        let position: Int
        switch start {
        case .now: position = log.latest
        case .after(let after): position = after
        case .stale: position = -1
        }
        let respond: @Sendable () -> Response = {
            let (entries, gap) = log.entries(after: position, limit: limit)
            var json = JSONWriter(capacity: 256 + entries.count * 400)
            json.beginObject()
            json.key("items")
            json.beginArray()
            for entry in entries { json.encoded(log.json(entry)) }
            json.endArray()
            json.key("next")
            json.string(log.cursor(entries.last?.position ?? max(position, 0)))
            if gap || start == .stale {
                json.key("reset")
                json.value(.bool(true))
            }
            json.endObject()
            return .json(bytes: json.bytes)
        }
        guard let waitMs, waitMs > 0 else { return Future(value: respond()) }
        return log.waitForEntries(after: position, timeout: .milliseconds(waitMs)).map { respond() }
    }
}
