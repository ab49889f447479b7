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
        let hub = self.app.eventStreams
        let jobs = self.app.jobs
        return self.app.withJob(request) { job -> Future<Response> in
            if stream {
                let id = job.id
                let source = JobEventSource(job: job, refresh: { jobs.job(id) })
                return Future(
                    value: ServerSentEvents.response { writer in
                        EventStreamPump(source: source, writer: writer, hub: hub).pump(after: after)
                    }
                )
            }
            let respond: @Sendable (any JobView) -> Response = { job in
                .json(["items": .array(job.events(after: after, limit: limit).map(\.json))])
            }
            guard let waitMs, waitMs > 0 else { return Future(value: respond(job)) }
            return jobs.follow(
                job,
                timeout: .milliseconds(waitMs),
                isDone: { $0.lastVisibleSeq > after },
                wait: { job, timeout in job.waitForEvents(after: after, timeout: timeout) }
            ).map(respond)
        }
    }

    /// `GET /v1/events`: as a stream (`?stream=true`) from `Last-Event-ID` or `after` (a cursor),
    /// or as JSON pages `{"items", "next", "reset"?}`, long-polled with `waitMs`.
    @Sendable func serverEvents(_ request: Request) throws -> Future<Response> {
        let feed = self.app.eventFeed
        let stream = try ServerSentEvents.isRequested(request)
        let waitMs = try request.integerQuery("waitMs", in: 0...self.app.configuration.maxWaitMs)
        let limit = try request.integerQuery("limit", in: 1...10_000) ?? 1000
        let cursor = (stream ? ServerSentEvents.lastEventID(request) : nil) ?? request.query["after"]
        let start = feed.start(cursor)
        return feed.refresh().flatMap { () -> Future<Response> in
            try self.serverEvents(request, feed: feed, start: start, stream: stream, waitMs: waitMs, limit: limit)
        }
    }

    private func serverEvents(
        _ request: Request,
        feed: any EventFeed,
        start: FeedStart,
        stream: Bool,
        waitMs: Int?,
        limit: Int
    ) throws -> Future<Response> {
        let position: Int
        switch start {
        case .now: position = feed.latest
        case .after(let after): position = after
        // Another process's cursor: everything held is newer than it.
        case .stale: position = -1
        }
        if stream {
            let hub = self.app.eventStreams
            return Future(
                value: ServerSentEvents.response { writer in
                    EventStreamPump(source: FeedEventSource(feed: feed), writer: writer, hub: hub)
                        .pump(after: position)
                }
            )
        }
        let respond: @Sendable () -> Response = {
            let (entries, gap) = feed.entries(after: position, limit: limit)
            var json = JSONWriter(capacity: 256 + entries.count * 400)
            json.beginObject()
            json.key("items")
            json.beginArray()
            for entry in entries { json.encoded(entry.json) }
            json.endArray()
            json.key("next")
            json.string(feed.cursor(entries.last?.position ?? max(position, 0)))
            if gap || start == .stale {
                json.key("reset")
                json.value(.bool(true))
            }
            json.endObject()
            return .json(bytes: json.bytes)
        }
        guard let waitMs, waitMs > 0 else { return Future(value: respond()) }
        return feed.waitForEntries(after: position, timeout: .milliseconds(waitMs)).map { respond() }
    }
}
