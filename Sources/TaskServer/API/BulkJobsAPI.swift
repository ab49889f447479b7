import NIOCore
import NIOHTTP1
import TaskCore
import TaskGraph

/// `POST /v1/jobs/redrive` and `POST /v1/jobs/cancel` (issue #45): the command of one job, applied
/// to a page of what `GET /v1/jobs` lists with the same filters — after a downstream outage, every
/// job it failed, a page per call.
///
/// Each job of the page is judged alone, as its own call would be (a running job is not redriven,
/// and its item says why), so repeating a call is harmless. At most `limit` jobs (1…1000) per
/// call; `nextCursor` continues from the last job the page held, by position, so a filter on the
/// state the command changes (`state=failed` for a redrive) still walks every job once.
struct BulkJobsAPI: Sendable {
    let app: Application

    static let maxLimit = 1000
    static let defaultLimit = 100

    func register(in router: inout Router) {
        router.add(.POST, "/v1/jobs/redrive", self.redrive)
        router.add(.POST, "/v1/jobs/cancel", self.cancel)
    }

    @Sendable func redrive(_ request: Request) throws -> Future<Response> {
        try JobsAPI(app: self.app).refuseRedriveWhileDraining()
        let jobs = self.app.jobs
        return try self.each(request) { id in
            jobs.redrive(id).map { outcome in
                JobsAPI.redriven(outcome, id: id).map { _ in HTTPResponseStatus.accepted }
            }
        }
    }

    @Sendable func cancel(_ request: Request) throws -> Future<Response> {
        let jobs = self.app.jobs
        return try self.each(request) { id in
            jobs.cancel(id).map { outcome in JobsAPI.cancelled(outcome, id: id).map(\.0) }
        }
    }

    /// How many commands of a page are in flight at once. All 1,000 at once made one huge commit
    /// that other traffic's writes queued behind (10,000 failed jobs redriven on SQLite: 0.8 s,
    /// other POSTs' p99 1.4 → 17–31 ms); chunks let them in between.
    static let chunk = 100

    /// Applies `command` to `ids`, `chunk` at a time (each chunk's commands at once, committed
    /// together), the next chunk once the last one is answered.
    private static func inChunks(
        _ ids: ArraySlice<String>,
        _ command: @escaping @Sendable (String) -> Future<Result<HTTPResponseStatus, HTTPProblem>>,
        done: [Result<HTTPResponseStatus, HTTPProblem>]
    ) -> Future<[Result<HTTPResponseStatus, HTTPProblem>]> {
        if ids.isEmpty { return Future(value: done) }
        let outcomes = ids.prefix(Self.chunk).map { id in
            command(id).continueWith(on: .immediate) { finished -> Result<HTTPResponseStatus, HTTPProblem> in
                switch finished.outcome! {
                case .success(let result): return result
                case .failure(let error as any HTTPResponseError): return .failure(error.problem)
                case .failure, .cancelled: return .failure(StoreError.writeFailed.problem)
                }
            }
        }
        let rest = ids.dropFirst(Self.chunk)
        return Future.whenAll(outcomes).flatMap { results in Self.inChunks(rest, command, done: done + results) }
    }

    /// Lists a page with the request's filters, applies `command` to each job of it (`chunk` at
    /// a time, committed together), and answers `{"items": [{"id", "status",
    /// "problem"?}], "nextCursor"}` in the page's order.
    private func each(
        _ request: Request,
        _ command: @escaping @Sendable (String) -> Future<Result<HTTPResponseStatus, HTTPProblem>>
    ) throws -> Future<Response> {
        if let body = request.body, body.readableBytes > 0 {
            throw HTTPProblem(
                .badRequest,
                code: "query.invalid",
                detail: "the filters go in the query string (those of GET /v1/jobs); send no body"
            )
        }
        let limit = try request.integerQuery("limit", in: 1...Self.maxLimit) ?? Self.defaultLimit
        let query = try JobsAPI.query(request, limit: limit)
        return self.app.jobs.list(query).flatMap { page -> Future<Response> in
            let ids = page.items.map(\.id)
            return Self.inChunks(ids[...], command, done: []).map { results -> Response in
                var json = JSONWriter(capacity: 64 + 96 * ids.count)
                json.beginObject()
                json.key("items")
                json.beginArray()
                for (id, result) in zip(ids, results) {
                    json.beginObject()
                    json.key("id")
                    json.string(id)
                    json.key("status")
                    switch result {
                    case .success(let status): json.int(Int(status.code))
                    case .failure(let problem):
                        json.int(Int(problem.status.code))
                        json.key("problem")
                        json.encoded(problem.response.body)
                    }
                    json.endObject()
                }
                json.endArray()
                json.key("nextCursor")
                if let next = page.next { json.string(Cursor.encode(next)) } else { json.null() }
                json.endObject()
                return .json(bytes: json.bytes)
            }
        }
    }
}
