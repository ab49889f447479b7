import Logging
import NIOCore
import NIOHTTP1
import Prometheus
import Synchronization
import TaskCore
import TaskGraph

/// TaskServer assembled: engine, job service and repository, routes and the HTTP server.
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
    /// The owner of the jobs this server runs, and what the API talks to about jobs.
    public let jobs: JobService
    /// The cron schedules (SPEC §8), fired through `jobs`.
    public let scheduler: Scheduler
    /// Named workflow definitions and their versions (issue #45).
    public let definitions: Definitions
    /// Where job records live (SQLite, PostgreSQL with `--database`, or memory with `--memory`).
    public let repository: any JobRepository
    public let logger: Logger
    /// The libcurl client of `http` tasks and webhooks.
    public let outbound: CurlClient
    /// The dispatcher that sends the outbox's webhook deliveries.
    public let dispatcher: WebhookDispatcher
    /// The external worker pools (SPEC §6): queues, waiting claims and leases.
    public let externalPools: ExternalPools
    /// Worker claims and leases, here or (in a cluster, SPEC §9) where they are held.
    let workerLeases: WorkerLeases
    /// Every job's committed `job.*` events, server-wide (`GET /v1/events`).
    let eventFeed: any EventFeed
    /// Where idle event streams wait, and are woken on their own loops.
    let eventStreams: EventStreamHub
    /// The time of the server's own timers, and of "now" in schedule previews.
    let clock: any ServerClock
    /// The dashboard's files (`/ui/`).
    let dashboard: DashboardFiles
    let metrics: Metrics
    /// Traces (issue #46), when `configuration.tracing` asks for them.
    let tracing: ServerTracing?
    /// The registry behind `/metrics` (the executable bootstraps swift-metrics on it).
    public var metricsRegistry: PrometheusCollectorRegistry { self.metrics.registry }
    /// Requests in flight and the draining flag, shared with the HTTP server: readiness (`/readyz`)
    /// and keep-alive (`Connection: close` once draining) read the same flag, so no client sees a
    /// draining server keep its connection, nor a ready one close it.
    private let activity = ServerActivity()
    private let server = Mutex<HTTPServer?>(nil)

    /// Assembles the server. With `configuration.dataPath` set, opens (and migrates) the SQLite
    /// repository — which throws when the file cannot be used — otherwise records live in memory.
    /// `actions`: the actions jobs may use; `http` (on this application's `CurlClient`) is added
    /// unless the registry already has one.
    /// `clock`: the time of the server's own timers (leases, retention, stream keep-alives);
    /// tests pass a `ManualClock`.
    public init(
        configuration: ServerConfiguration,
        actions: ActionRegistry = .builtins,
        clock: any ServerClock = SystemClock(),
        logger: Logger
    ) throws {
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        self.dashboard =
            try configuration.uiDirectory.map { directory throws(ConfigurationError) in
                try DashboardFiles.reading(directory)
            } ?? .embedded
        self.outbound = CurlClient(
            configuration: CurlClient.Configuration(
                maxConcurrentTransfers: configuration.outbound.maxConcurrentTransfers,
                maxResponseBytes: configuration.outbound.maxResponseBytes,
                policy: configuration.outbound.policy
            )
        )
        let metrics = Metrics()
        self.metrics = metrics
        let tracing = configuration.tracing.map { tracing in
            var tracingLogger = logger
            tracingLogger[metadataKey: "activity"] = "tracing"
            return ServerTracing(configuration: tracing, logger: tracingLogger, counters: metrics.spanCounters)
        }
        self.tracing = tracing
        let repository: any JobRepository
        if let database = configuration.database {
            var options = PostgresJobRepository.Options()
            options.retention = configuration.retention
            options.onCommit = { nanoseconds in metrics.storeCommit(nanoseconds: nanoseconds) }
            options.clock = clock
            if let name = configuration.nodeName { options.nodeName = name }
            repository = try PostgresJobRepository(settings: database, options: options, logger: logger)
        } else if let path = configuration.dataPath {
            var options = SQLiteJobRepository.Options()
            options.synchronousFull = configuration.syncFull
            options.checkIntegrity = configuration.checkIntegrity
            options.retention = configuration.retention
            options.onCommit = { nanoseconds in metrics.storeCommit(nanoseconds: nanoseconds) }
            options.clock = clock
            repository = try SQLiteJobRepository(path: path, options: options, logger: logger)
        } else {
            repository = MemoryJobRepository(retention: configuration.retention)
        }
        self.repository = repository
        var actions = actions
        if actions["http"] == nil { actions.register(HTTPAction(client: self.outbound, tracing: tracing)) }
        let children = ChildJobs()
        actions.register(children.action)
        let externalPools = ExternalPools(pools: configuration.externalExecutors, clock: clock)
        self.externalPools = externalPools
        // Leases are durable where jobs are; in memory they die with the process anyway.
        if repository.isDurable { externalPools.attach(journal: repository) }
        // PostgreSQL keeps one feed for every server sharing it; otherwise the process keeps its own.
        let eventFeed = repository.eventFeed ?? InProcessEventFeed()
        self.eventFeed = eventFeed
        self.eventStreams = EventStreamHub(keepAlive: configuration.streamKeepAlive)
        var engineConfiguration = EngineConfiguration(
            executors: configuration.executors,
            actions: actions,
            limits: GraphLimits(maxNodes: configuration.maxNodes, maxDepth: configuration.maxDepth),
            jobFields: [WebhookField()],
            externalExecutors: externalPools.executors
        )
        engineConfiguration.rates = configuration.rates
        // A cluster's servers hold concurrency keys together (at most `max` on all of them).
        engineConfiguration.sharedKeys = repository.sharedKeys
        // With a durable repository, event readers (long-polls, streams) see an event once it is
        // committed: a crash never takes back an event a client has seen.
        engineConfiguration.eventsAwaitDurability = repository.isDurable
        let jobSpans = tracing.map { JobSpans(tracing: $0) }
        engineConfiguration.attemptTracer = jobSpans
        self.engine = Engine(configuration: engineConfiguration)
        self.engine.addObserver(metrics)
        if let jobSpans { self.engine.addObserver(jobSpans) }
        // A cluster's servers divide each pool's `rate=` among the live ones (1/N each), re-divided
        // at every heartbeat: the sum stays the configured rate (SPEC §8, §9).
        let limited = self.engine.pools.values.filter { $0.rate != nil }
        if let cluster = repository.cluster, !limited.isEmpty {
            cluster.observeServerCount { servers in
                for pool in limited { pool.setRateShare(1 / Double(max(1, servers))) }
            }
        }
        if logger.logLevel <= .debug { self.engine.addObserver(JobLog(logger: logger)) }
        var backgroundLogger = logger
        backgroundLogger[metadataKey: "activity"] = "webhooks"
        self.dispatcher = WebhookDispatcher(
            client: self.outbound,
            store: repository,
            serverSecret: configuration.webhooks.secret,
            configuration: WebhookDispatcher.Configuration(
                attemptTimeout: configuration.webhooks.attemptTimeout,
                maxConcurrentPerEndpoint: configuration.webhooks.maxConcurrentPerEndpoint,
                maxConcurrent: configuration.webhooks.maxConcurrent
            ),
            logger: backgroundLogger,
            clock: clock,
            tracing: tracing,
            onAttempt: { metrics.webhookAttempt($0) }
        )
        self.jobs = JobService(
            engine: self.engine,
            repository: repository,
            planner: WebhookPlanner(configuration: configuration),
            dispatcher: self.dispatcher,
            eventFeed: eventFeed,
            clock: clock,
            delayedStarts: configuration.delayedStarts,
            tracing: tracing,
            logger: logger
        )
        self.workerLeases = WorkerLeases(
            pools: externalPools,
            relay: repository.cluster.map { PoolRelay(pools: externalPools, cluster: $0) }
        )
        self.definitions = Definitions(store: repository, decoder: self.engine.decoder, clock: clock)
        children.attach(jobs: self.jobs, definitions: self.definitions)
        self.scheduler = Scheduler(
            jobs: self.jobs,
            definitions: self.definitions,
            store: repository,
            cluster: repository.cluster,
            clock: clock,
            logger: logger
        )
        // A cluster's servers publish their executors with each heartbeat (`GET /v1/executors`
        // answers for the cluster on any server).
        repository.cluster?.publishExecutors { [weak self] in
            self.map { JSONValue.array($0.publishedExecutorItems().map(JSONValue.object)).jsonString }
        }
    }

    /// The routes of the API (the test that compares them with the contract reads this too).
    public var router: Router {
        var router = Router()
        // Before JobsAPI: the router takes the first pattern a path matches, and /v1/jobs/{id}
        // would take /v1/jobs/redrive.
        BulkJobsAPI(app: self).register(in: &router)
        JobsAPI(app: self).register(in: &router)
        TasksAPI(app: self).register(in: &router)
        EventsAPI(app: self).register(in: &router)
        DeliveriesAPI(app: self).register(in: &router)
        ExternalPoolsAPI(app: self).register(in: &router)
        SchedulesAPI(app: self).register(in: &router)
        DefinitionsAPI(app: self).register(in: &router)
        DashboardAPI(files: self.dashboard).register(in: &router)
        ServiceAPI(app: self).register(in: &router)
        if !self.configuration.apiKeys.isEmpty {
            router = Authentication(keys: self.configuration.apiKeys).protect(router)
        }
        return router
    }

    /// Resumes the jobs that were unfinished when the server last stopped, then starts serving;
    /// returns the bound port.
    public func start() async throws -> Int {
        // Leases from before the restart first: the resumed jobs' attempts take them up again.
        self.externalPools.restore(try await self.repository.storedLeases().value)
        let recovered = try await self.jobs.recover().value
        self.externalPools.finishRestoring()
        if self.repository.cluster != nil {
            // From now on a recovery is a takeover (or this server registering again): the jobs'
            // leases carry on here, as after a restart.
            let (repository, pools) = (self.repository, self.externalPools)
            self.jobs.setResumeHooks(
                JobService.ResumeHooks(
                    before: { ids in repository.storedLeases(ofJobs: ids).map { pools.restore($0) } },
                    after: { pools.finishRestoring() }
                )
            )
        }
        try await self.scheduler.start()
        if recovered > 0 {
            self.logger.notice("resumed unfinished jobs", metadata: ["count": "\(recovered)"])
        }
        var limits = HTTPLimits()
        limits.maxBodyBytes = self.configuration.maxBodyBytes
        limits.maxConnections = self.configuration.maxConnections
        limits.requestHeadTimeout = self.configuration.httpTimeouts.head
        limits.requestBodyTimeout = self.configuration.httpTimeouts.body
        limits.idleTimeout = self.configuration.httpTimeouts.idle
        let metrics = self.metrics
        let server = HTTPServer(
            host: self.configuration.host,
            port: self.configuration.port,
            router: self.router,
            limits: limits,
            logger: self.logger,
            activity: self.activity,
            tracing: self.tracing
        ) { request, response, duration in
            metrics.httpResponse(
                route: request?.route ?? "unmatched",
                method: request.map { Self.methodLabel($0.method) } ?? "unknown",
                status: Int(response.status.code),
                nanoseconds: duration
            )
        }
        self.server.withLock { $0 = server }
        let port = try await server.start()
        // Deliveries a durable outbox still holds from before a restart (none in memory).
        self.dispatcher.wake()
        return port
    }

    /// Readiness turns 503 and new jobs are refused (`server.draining`); requests already in
    /// flight finish.
    public func beginDraining() {
        self.activity.isDraining.store(true, ordering: .relaxed)
        // Waiting claims are answered with nothing: a draining server hands out no more work.
        self.externalPools.drain()
        // Event streams end; their clients reconnect (to another server, or this one restarted).
        self.activity.streams.finishAll()
    }

    public var isDraining: Bool { self.activity.isDraining.load(ordering: .relaxed) }

    /// Open and refused connections, and open event streams.
    var connectionStatistics: (open: Int, refused: Int, streams: Int) {
        let server = self.server.withLock { $0 }
        return (server?.connectionCount ?? 0, server?.refusedConnections ?? 0, self.activity.streams.count)
    }

    /// Requests received in full and not answered yet (0 before `start`).
    public var requestsInFlight: Int { self.server.withLock { $0 }?.requestsInFlight ?? 0 }

    /// Drains, stops the listener, waits up to `gracePeriod` (default: the configuration's
    /// `shutdownGrace`) for requests in flight, closes the connections left, flushes the store and
    /// lets the worker pools' threads exit.
    public func shutdown(gracePeriod: Duration? = nil) async {
        self.beginDraining()
        let server = self.server.withLock { $0 }
        await server?.shutdown(gracePeriod: gracePeriod ?? self.configuration.shutdownGrace)
        // Delayed jobs not started yet stay as stored; the next start holds them again. Schedules
        // fire no more: fires missed until the next start are caught up then (`catchUp`).
        self.scheduler.stop()
        self.jobs.stop()
        self.dispatcher.shutdown()
        self.outbound.shutdown()
        // The spans of what ended before the stop reach the collector, if it answers in time.
        await self.tracing?.shutdown()
        // Everything journalled so far reaches the file before the process exits.
        _ = try? await self.repository.close().value
        self.engine.shutdown()
    }

    /// A method as a metric label: the methods of the API by name, anything else `other`, so that
    /// clients cannot mint label values.
    static func methodLabel(_ method: HTTPMethod) -> String {
        switch method {
        case .GET, .HEAD, .POST, .PUT, .PATCH, .DELETE, .OPTIONS: return method.rawValue
        default: return "other"
        }
    }

    /// This server's executors as `GET /v1/executors` lists them (and its heartbeat publishes them
    /// to a cluster's other servers), sorted by name.
    func executorItems() -> [JSONObject] {
        var items: [(name: String, item: JSONObject)] = self.executors.map { entry in
            let kind = entry.name == Engine.immediateExecutor ? "inline" : "pool"
            let statistics = entry.statistics
            var item: JSONObject = [
                "name": .string(entry.name), "kind": .string(kind), "size": .int(statistics.size),
                "running": .int(statistics.running),
                "queued": .int(statistics.queued), "completed": .int(statistics.completed),
                "queuedByPriority": ServiceAPI.byPriority(statistics.queuedByPriority),
            ]
            if let rate = statistics.rate {
                item["rate"] = [
                    "limit": .int(rate.count), "per": rate.period == .seconds(60) ? "minute" : "second",
                    "burst": .int(rate.burst),
                    // Two decimals: a fraction says how close the next token is.
                    "tokens": .double(((statistics.tokens ?? 0) * 100).rounded(.down) / 100),
                    "share": .double(statistics.rateShare),
                ]
            }
            return (entry.name, item)
        }
        for name in self.externalPools.names {
            guard let statistics = self.externalPools.statistics(name) else { continue }
            let item: JSONObject = [
                "name": .string(name), "kind": "external", "queued": .int(statistics.queued),
                "leased": .int(statistics.leased), "workers": .int(statistics.workers),
                "queuedByPriority": ServiceAPI.byPriority(statistics.queuedByPriority),
            ]
            items.append((name, item))
        }
        items.sort { $0.name < $1.name }
        return items.map(\.item)
    }

    /// The most workers per external pool a server publishes to the others with its heartbeat
    /// (the most recently seen): each server's own list is whole.
    static let publishedWorkersPerPool = 1_000

    /// What a cluster's server publishes with each heartbeat: its executors, each external pool's
    /// with its recent workers (`workerList`, for `GET /v1/executors/{name}/workers` elsewhere).
    func publishedExecutorItems() -> [JSONObject] {
        self.executorItems().map { item in
            guard item["kind"] == "external", let name = item["name"]?.stringValue,
                let workers = self.externalPools.workers(name)
            else { return item }
            var published = item
            published["workerList"] = .array(
                workers.prefix(Self.publishedWorkersPerPool).map { .object(ExternalPoolsAPI.workerItem($0)) }
            )
            return published
        }
    }

    var executors: [(name: String, statistics: WorkerPool.Statistics)] {
        var list = self.engine.executorStatistics
        list.append((Engine.immediateExecutor, WorkerPool.Statistics(size: 0, running: 0, queued: 0, completed: 0)))
        return list.sorted { $0.name < $1.name }
    }

    // MARK: - Helpers for the API

    /// The response `body` makes for the job named by the request's `{id}`, or a 404 problem.
    func withJob(
        _ request: Request,
        _ body: @escaping @Sendable (any JobView) throws -> Future<Response>
    ) -> Future<Response> {
        let id = request.parameter("id")
        return self.jobs.job(id).flatMap { job in
            guard let job else { throw HTTPProblem.notFound("job.notFound", "no job \(id)") }
            return try body(job)
        }
    }

    /// `withJob` for a body that answers at once.
    func withJob(_ request: Request, _ body: @escaping @Sendable (any JobView) throws -> Response) -> Future<Response> {
        self.withJob(request) { job -> Future<Response> in Future(value: try body(job)) }
    }

    /// The request body parsed as JSON: 415 unless `application/json`, 400 with line and column
    /// for malformed JSON.
    func jsonBody(_ request: Request) throws(HTTPProblem) -> JSONValue {
        let contentType = request.headers.first(name: "content-type") ?? ""
        // The usual header as is; anything else (parameters, case, `+json` types) parsed.
        let mediaType =
            contentType == "application/json"
            ? contentType : contentType.split(separator: ";").first.map { $0.trimmingSpaces.lowercased() } ?? ""
        guard mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json"))
        else {
            throw HTTPProblem(
                .unsupportedMediaType,
                code: "contentType.unsupported",
                detail: contentType.isEmpty
                    ? "send the body as application/json"
                    : "the body must be application/json, not \(contentType.prefix(100))"
            )
        }
        guard let body = request.body, body.readableBytes > 0 else {
            throw HTTPProblem(.badRequest, code: "json.malformed", detail: "the body is empty; send a JSON document")
        }
        do {
            return try body.withUnsafeReadableBytes { raw throws(JSONParseError) in
                try JSONParser.parse(
                    raw,
                    limits: JSONParser.Limits(maxDepth: 512, maxBytes: self.configuration.maxBodyBytes)
                )
            }
        } catch {
            throw HTTPProblem(.badRequest, code: "json.malformed", detail: "the body is not valid JSON: \(error)")
        }
    }

    /// A job decoded and validated, or a 422 with every problem.
    func decodeJob(_ json: JSONValue) throws(HTTPProblem) -> JobSpec {
        do throws(ValidationError) {
            let spec = try self.engine.decoder.decodeJob(json)
            // The labels that make a job a child (issue #45) are the server's to set.
            for label in [JobSnapshot.parentLabel, JobSnapshot.parentTaskLabel] where spec.labels[label] != nil {
                throw ValidationError([
                    ValidationProblem(pointer: "/labels/\(label)", message: "is set by the server on child jobs")
                ])
            }
            return spec
        } catch {
            throw HTTPProblem(
                .unprocessableEntity,
                code: "graph.invalid",
                detail: error.problems.count == 1
                    ? "the job is invalid: \(error.problems[0])"
                    : "the job is invalid (\(error.problems.count) problems)",
                errors: error.problems
            )
        }
    }

    /// The job's representation, after waiting up to `waitMs` for it to end.
    func respond(with job: any JobView, status: HTTPResponseStatus, waitMs: Int?, location: Bool) -> Future<Response> {
        var headers = HTTPHeaders()
        if location { headers.add(name: "location", value: "/v1/jobs/\(job.id)") }
        let headersCopy = headers
        let make: @Sendable (any JobView) -> Response = { job in
            .json(bytes: job.snapshot.jsonBytes(), status: status, headers: headersCopy)
        }
        guard let waitMs, waitMs > 0 else { return Future(value: make(job)) }
        return self.jobs.follow(
            job,
            timeout: .milliseconds(waitMs),
            isDone: { $0.isTerminalAndVisible },
            wait: { job, timeout in job.waitForTerminal(timeout: timeout) }
        ).map(make)
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
