import Foundation
import NIOHTTP1
import TaskCore
import TaskGraph
import TaskSchedule
import TaskWorkerProtocol

/// `/v1/schedules` (SPEC §8): cron schedules — create, list, read, change, delete, trigger — and the
/// preview of when an expression fires, by the same rules (and the same code) that fire them.
struct SchedulesAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.POST, "/v1/schedules/preview", self.preview)
        router.add(.POST, "/v1/schedules", self.create)
        router.add(.GET, "/v1/schedules", self.list)
        router.add(.GET, "/v1/schedules/{id}", self.get)
        router.add(.PATCH, "/v1/schedules/{id}", self.update)
        router.add(.DELETE, "/v1/schedules/{id}", self.delete)
        router.add(.POST, "/v1/schedules/{id}/trigger", self.trigger)
    }

    static func notFound(_ id: String) -> HTTPProblem {
        .notFound("schedule.notFound", "no schedule \(id.prefix(100))")
    }

    /// The answer to a change of schedule `id`.
    static func answer(_ change: Scheduler.Change, id: String, status: HTTPResponseStatus) throws -> Response {
        switch change {
        case .done(let schedule):
            var headers = HTTPHeaders()
            if status == .created { headers.add(name: "location", value: "/v1/schedules/\(id)") }
            return .json(schedule, status: status, headers: headers)
        case .notFound: throw Self.notFound(id)
        case .exists: throw HTTPProblem.conflict("schedule.exists", "a schedule with id \(id) exists already")
        case .full:
            throw HTTPProblem.conflict(
                "schedule.limitReached",
                "the server holds \(Scheduler.maxSchedules) schedules, its limit; delete one first"
            )
        }
    }

    @Sendable func create(_ request: Request) throws -> Future<Response> {
        if self.app.isDraining {
            throw HTTPProblem(.serviceUnavailable, code: "server.draining", detail: "the server is shutting down")
        }
        let definition = try ScheduleDefinition(
            self.app.jsonBody(request),
            id: nil,
            decoder: self.app.engine.decoder
        )
        let scheduler = self.app.scheduler
        // (Spelled out: JSONValue is ExpressibleByNilLiteral, so a bare `nil` here would be `.null`.)
        let start: JSONValue? = definition.spec == nil ? .some(definition.labelledJob) : .none
        return self.startsNow(start).flatMap {
            scheduler.create(definition).map { change in
                try Self.answer(change, id: definition.id, status: .created)
            }
        }
    }

    /// Completes when `job` — a start of a workflow definition, or nil — would start now: the
    /// definition exists and takes its input. A fire resolves it again (a later version may
    /// refuse it: that fire then starts nothing), but a schedule that cannot start is refused
    /// at the door, its problems under `/job`.
    private func startsNow(_ job: JSONValue?) -> Future<Void> {
        guard let job else { return Future(value: ()) }
        return self.app.definitions.jobDocument(job).continueWith(on: .immediate) { resolved in
            guard case .failure(let error) = resolved.outcome! else { return }
            guard let problem = error as? HTTPProblem, problem.status == .unprocessableEntity else { throw error }
            let problems = problem.errors.map { ValidationProblem(pointer: "/job" + $0.pointer, message: $0.message) }
            throw HTTPProblem(
                .unprocessableEntity,
                code: "request.invalid",
                detail: "the schedule is invalid: \(problems.first.map { "\($0)" } ?? problem.detail)",
                errors: problems
            )
        }
    }

    @Sendable func list(_ request: Request) throws -> Future<Response> {
        let limit = try request.integerQuery("limit", in: 1...self.app.configuration.maxListLimit) ?? 100
        let after = request.query["after"]
        return self.app.scheduler.listed(limit: limit, after: after).map { page -> Response in
            .json(["items": .array(page.items), "next": page.next.map(JSONValue.string) ?? .null])
        }
    }

    @Sendable func get(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        return self.app.scheduler.schedule(id).map { schedule -> Response in
            guard let schedule else { throw Self.notFound(id) }
            return .json(schedule)
        }
    }

    @Sendable func update(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        let patch = try self.app.jsonBody(request)
        let job: JSONValue? = patch["job"].flatMap { Definitions.isStart($0) ? .some($0) : .none }
        let scheduler = self.app.scheduler
        return self.startsNow(job).flatMap {
            try scheduler.update(id, patch: patch).map { change in
                try Self.answer(change, id: id, status: .ok)
            }
        }
    }

    @Sendable func delete(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        return self.app.scheduler.delete(id).map { deleted in
            guard deleted else { throw Self.notFound(id) }
            return Response(status: .noContent)
        }
    }

    /// Starts a run now: `201` with the job.
    @Sendable func trigger(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        if self.app.isDraining {
            throw HTTPProblem(.serviceUnavailable, code: "server.draining", detail: "the server is shutting down")
        }
        let app = self.app
        return self.app.scheduler.trigger(id, trace: request.trace).flatMap { submitted -> Future<Response> in
            guard case .created(let run)? = submitted else { throw Self.notFound(id) }
            app.metrics.jobSubmitted()
            return app.respond(with: run, status: .created, waitMs: nil, location: true)
        }
    }

    // MARK: preview

    /// `{"cron", "timezone"?, "from"?, "count"?}` → `{"times": [...]}`: the next `count` fire
    /// instants strictly after `from`.
    @Sendable func preview(_ request: Request) throws -> Future<Response> {
        let preview = try SchedulePreview(self.app.jsonBody(request), now: self.app.clock.now())
        let times = preview.schedule.nextFires(after: preview.from, count: preview.count)
        return Future(value: .json(["times": .array(times.map { .string(SchedulePreview.format($0)) })]))
    }
}

/// A preview request, checked field by field (every problem with its pointer, in one `422`).
struct SchedulePreview: Sendable {
    static let maxCount = 100

    var schedule: CronSchedule
    var from: Date
    var count: Int

    init(_ body: JSONValue, now: Timestamp) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: ["cron", "timezone", "from", "count"])
        let expression = reader.cron("cron")
        let timeZone = reader.timeZone("timezone").zone
        var from = Date(timeIntervalSince1970: Double(now.milliseconds) / 1000)
        switch reader.object["from"] {
        case .string(let text):
            if let timestamp = Timestamp(rfc3339: text) {
                from = Date(timeIntervalSince1970: Double(timestamp.milliseconds) / 1000)
            } else {
                reader.report("from", "must be an RFC 3339 date-time like \"2026-03-29T00:00:00Z\"")
            }
        case nil: break
        default: reader.report("from", "must be a string: an RFC 3339 date-time")
        }
        self.count = reader.integer("count", in: 1...Self.maxCount, default: 5)
        try reader.check("preview")
        self.schedule = CronSchedule(expression!, timeZone: timeZone)
        self.from = from
    }

    /// A fire time as SPEC §8 shows it: UTC, whole seconds, `Z`.
    static func format(_ date: Date) -> String {
        let seconds = Int64((date.timeIntervalSince1970).rounded(.down))
        return String(Timestamp(milliseconds: seconds * 1000).rfc3339.prefix(19)) + "Z"
    }
}
