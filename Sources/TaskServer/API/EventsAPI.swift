import NIOHTTP1
import TaskCore
import TaskGraph

/// `/v1/jobs/{id}/events`: a job's history in order, read or long-polled after a sequence number.
struct EventsAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.GET, "/v1/jobs/{id}/events", self.events)
    }

    @Sendable func events(_ request: Request) throws -> Future<Response> {
        let after = try request.integerQuery("after", in: 0...9_007_199_254_740_991) ?? 0
        let waitMs = try request.integerQuery("waitMs", in: 0...self.app.configuration.maxWaitMs)
        let limit = try request.integerQuery("limit", in: 1...10_000) ?? 1000
        return self.app.withRun(request) { run -> Future<Response> in
            let respond: @Sendable () -> Response = {
                .json(["items": .array(run.events(after: after, limit: limit).map(\.json))])
            }
            guard let waitMs, waitMs > 0 else { return Future(value: respond()) }
            return run.waitForEvents(after: after, timeout: .milliseconds(waitMs)).map { respond() }
        }
    }
}
