import NIOHTTP1
import TaskCore
import TaskGraph

/// `GET /v1/jobs/{id}/deliveries`: the job's webhook deliveries and their attempts (SPEC §4).
struct DeliveriesAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.GET, "/v1/jobs/{id}/deliveries", self.list)
    }

    @Sendable func list(_ request: Request) throws -> Future<Response> {
        let deliveries = self.app.repository
        return self.app.withJob(request) { job -> Future<Response> in
            deliveries.deliveries(jobID: job.id).map { .json(["items": .array($0.map(\.json))]) }
        }
    }
}
