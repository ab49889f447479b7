import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph

/// TaskServer assembled: engine, store, routes and the HTTP server.
///
/// ```swift
/// let app = Application(configuration: config, logger: logger)
/// let port = try await app.start()
/// …
/// await app.shutdown()
/// ```
public final class Application: Sendable {
    public let configuration: ServerConfiguration
    public let engine: Engine
    public let store: any JobStore
    public let logger: Logger
    /// The libcurl client of `http` tasks (and, later, webhooks).
    public let outbound: CurlClient
    let metrics: Metrics
    private let draining = Atomic<Bool>(false)
    private let server = Mutex<HTTPServer?>(nil)

    /// - Parameter actions: the actions jobs may use; `http` (on this application's `CurlClient`)
    ///   is added unless the registry already has one.
    public init(configuration: ServerConfiguration, store: (any JobStore)? = nil, actions: ActionRegistry = .builtins, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        self.outbound = CurlClient(
            configuration: CurlClient.Configuration(
                maxConcurrentTransfers: configuration.outbound.maxConcurrentTransfers,
                maxResponseBytes: configuration.outbound.maxResponseBytes,
                policy: configuration.outbound.policy
            )
        )
        var actions = actions
        if actions["http"] == nil { actions.register(HTTPAction(client: self.outbound)) }
        self.engine = Engine(
            configuration: EngineConfiguration(
                executors: configuration.executors,
                actions: actions,
                limits: GraphLimits(maxNodes: configuration.maxNodes, maxDepth: configuration.maxDepth)
            )
        )
        self.store = store ?? MemoryJobStore()
        self.metrics = Metrics()
        self.engine.addObserver(self.metrics)
    }

    /// The routes of the API (the test that compares them with openapi.yaml reads this too).
    public var router: Router {
        var router = Router()
        JobsAPI(app: self).register(in: &router)
        TasksAPI(app: self).register(in: &router)
        ServiceAPI(app: self).register(in: &router)
        if !self.configuration.apiKeys.isEmpty { router = Authentication(keys: self.configuration.apiKeys).protect(router) }
        return router
    }

    /// Starts serving; returns the bound port.
    public func start() async throws -> Int {
        var limits = HTTPLimits()
        limits.maxBodyBytes = self.configuration.maxBodyBytes
        limits.maxConnections = self.configuration.maxConnections
        let metrics = self.metrics
        let server = HTTPServer(
            host: self.configuration.host,
            port: self.configuration.port,
            router: self.router,
            limits: limits,
            logger: self.logger
        ) { _, response, duration in
            metrics.httpResponse(status: Int(response.status.code), nanoseconds: duration)
        }
        self.server.withLock { $0 = server }
        return try await server.start()
    }

    /// Readiness turns 503 and new jobs are refused (`server.draining`); requests already in
    /// flight finish.
    public func beginDraining() {
        self.draining.store(true, ordering: .relaxed)
    }

    public var isDraining: Bool { self.draining.load(ordering: .relaxed) }

    /// Drains, stops the listener and the event loops, and lets the worker pools' threads exit.
    public func shutdown() async {
        self.beginDraining()
        let server = self.server.withLock { $0 }
        await server?.shutdown()
        self.outbound.shutdown()
        self.engine.shutdown()
    }

    var executors: [(name: String, statistics: WorkerPool.Statistics)] {
        var list = self.engine.executorStatistics
        list.append((Engine.immediateExecutor, WorkerPool.Statistics(size: 0, running: 0, queued: 0, completed: 0)))
        return list.sorted { $0.name < $1.name }
    }

    // MARK: - Helpers for the API

    /// The job `id`, or a 404 problem.
    func run(_ id: String) throws(HTTPProblem) -> JobRun {
        guard let run = self.store.run(id) else { throw HTTPProblem.notFound("job.notFound", "no job \(id)") }
        return run
    }

    /// The request body parsed as JSON: 415 unless `application/json`, 400 with line and column
    /// for malformed JSON.
    func jsonBody(_ request: Request) throws(HTTPProblem) -> JSONValue {
        let contentType = request.headers.first(name: "content-type") ?? ""
        let mediaType = contentType.split(separator: ";").first.map { $0.trimmingSpaces.lowercased() } ?? ""
        guard mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json")) else {
            throw HTTPProblem(
                .unsupportedMediaType,
                code: "contentType.unsupported",
                detail: contentType.isEmpty ? "send the body as application/json" : "the body must be application/json, not \(contentType.prefix(100))"
            )
        }
        guard let body = request.body, body.readableBytes > 0 else {
            throw HTTPProblem(.badRequest, code: "json.malformed", detail: "the body is empty; send a JSON document")
        }
        do {
            return try body.withUnsafeReadableBytes { raw throws(JSONParseError) in
                try JSONParser.parse(raw, limits: JSONParser.Limits(maxDepth: 512, maxBytes: self.configuration.maxBodyBytes))
            }
        } catch {
            throw HTTPProblem(.badRequest, code: "json.malformed", detail: "the body is not valid JSON: \(error)")
        }
    }

    /// A job decoded and validated, or a 422 with every problem.
    func decodeJob(_ json: JSONValue) throws(HTTPProblem) -> JobSpec {
        do {
            let spec = try self.engine.decoder.decodeJob(json)
            if spec.webhook != nil {
                // Outbound delivery (libcurl, signing, the outbox) is not built yet: refuse rather
                // than accept a webhook that would never be called.
                throw ValidationError([ValidationProblem(pointer: "/webhook", message: "webhook delivery is not available in this version of the server")])
            }
            return spec
        } catch let error as ValidationError {
            throw HTTPProblem(
                .unprocessableEntity,
                code: "graph.invalid",
                detail: error.problems.count == 1 ? "the job is invalid: \(error.problems[0])" : "the job is invalid (\(error.problems.count) problems)",
                errors: error.problems
            )
        } catch {
            throw HTTPProblem.internalError
        }
    }

    /// The job's representation, after waiting up to `waitMs` for it to end.
    func respond(with run: JobRun, status: HTTPResponseStatus, waitMs: Int?, location: Bool) -> Future<Response> {
        var headers = HTTPHeaders()
        if location { headers.add(name: "location", value: "/v1/jobs/\(run.id)") }
        let headersCopy = headers
        let make: @Sendable () -> Response = { .json(run.snapshot.json(), status: status, headers: headersCopy) }
        guard let waitMs, waitMs > 0 else { return Future(value: make()) }
        return run.waitForTerminal(timeout: .milliseconds(waitMs)).map { make() }
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while text.first == " " || text.first == "\t" { text = text.dropFirst() }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return text
    }
}
