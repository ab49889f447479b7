import NIOHTTP1
import TaskCore
import TaskGraph
import TaskWorkerProtocol

/// `/v1/jobs/{id}/tasks…`: nodes, cancelling one, completing an `await` task.
struct TasksAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.GET, "/v1/jobs/{id}/tasks", self.list)
        router.add(.GET, "/v1/jobs/{id}/tasks/{taskId}", self.get)
        router.add(.POST, "/v1/jobs/{id}/tasks/{taskId}/cancel", self.cancel)
        router.add(.POST, "/v1/jobs/{id}/tasks/{taskId}/complete", self.complete)
    }

    @Sendable func list(_ request: Request) throws -> Future<Response> {
        self.app.withJob(request) { job in .json(["items": .array(job.nodes.map(\.json))]) }
    }

    @Sendable func get(_ request: Request) throws -> Future<Response> {
        let taskID = request.parameter("taskId")
        return self.app.withJob(request) { job in
            guard let node = job.node(taskID) else {
                throw HTTPProblem.notFound("task.notFound", "job \(job.id) has no task \(taskID)")
            }
            return .json(node.json)
        }
    }

    @Sendable func cancel(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        let taskID = request.parameter("taskId")
        return self.app.jobs.cancelTask(id, task: taskID).map { outcome -> Response in
            switch outcome {
            // 202: this request started the cancellation (even when it took effect at once); a
            // node that was already cancelled is answered 200, as openapi.yaml documents.
            case .done(let node): return .json(node.json, status: .accepted)
            case .alreadyCancelled(let node): return .json(node.json, status: .ok)
            case .terminal: throw HTTPProblem.conflict("task.terminal", "task \(taskID) already ended")
            case .notAwait, .notRunning: throw HTTPProblem.conflict("task.notRunning", "task \(taskID) is not running")
            case .taskNotFound: throw HTTPProblem.notFound("task.notFound", "job \(id) has no task \(taskID)")
            case .jobNotFound: throw HTTPProblem.notFound("job.notFound", "no job \(id)")
            }
        }
    }

    @Sendable func complete(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        let taskID = request.parameter("taskId")
        let body = try self.app.jsonBody(request)
        let outcome = try Self.completion(body)
        return self.app.jobs.completeTask(id, task: taskID, with: outcome).map { outcome -> Response in
            switch outcome {
            // Answered once the completion is durable: a restart never forgets an acknowledged one.
            case .done(let node): return .json(node.json)
            case .taskNotFound: throw HTTPProblem.notFound("task.notFound", "job \(id) has no task \(taskID)")
            case .jobNotFound: throw HTTPProblem.notFound("job.notFound", "no job \(id)")
            case .notAwait: throw HTTPProblem.conflict("task.notAwait", "task \(taskID) is not an await task")
            case .notRunning:
                throw HTTPProblem.conflict("task.notRunning", "task \(taskID) has not started waiting yet")
            case .terminal, .alreadyCancelled:
                throw HTTPProblem.conflict("task.terminal", "task \(taskID) already ended")
            }
        }
    }

    /// `{"result": any}` or `{"error": {"code", "message", "details"?}}`, nothing else (the shared
    /// parser's `awaitTask` form), or `422 graph.invalid` with every problem.
    static func completion(_ body: JSONValue) throws(HTTPProblem) -> Outcome<JSONValue> {
        switch CompletionBody.read(body, form: .awaitTask) {
        case .success(let completion):
            return completion.outcome
        case .failure(let error):
            throw HTTPProblem(
                .unprocessableEntity,
                code: "graph.invalid",
                detail: body.objectValue == nil ? "the body must be an object" : "the completion body is invalid",
                errors: error.problems
            )
        }
    }
}
