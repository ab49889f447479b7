import Synchronization
import TaskCore

/// Receives every job's events, in order (the store's journal, webhooks, metrics).
///
/// Calls for one job never overlap and arrive in `seq` order; calls for different jobs may run at
/// once on different threads. They run on the thread that made the state change, after the job's
/// lock is released: keep them short and hand real work to a queue.
public protocol JobObserver: Sendable {
    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>)
}

/// What an engine runs on.
public struct EngineConfiguration: Sendable {
    /// Worker pools by name and size (`default` is added with 8 slots when missing).
    public var executors: [String: Int]
    public var actions: ActionRegistry
    public var limits: GraphLimits
    /// Top-level job fields defined outside TaskGraph (the server's `webhook`); see `JobField`.
    public var jobFields: [any JobField]
    /// Pools whose workers live in other processes (SPEC §6), by their names.
    public var externalExecutors: [any ExternalExecutor]
    /// Rate limits of pools by name (SPEC §8).
    public var rates: [String: RateLimit] = [:]
    /// See `Engine.eventsAwaitDurability`.
    public var eventsAwaitDurability = false
    /// Concurrency keys shared with other engines (a cluster's servers); nil: the engine's own.
    public var sharedKeys: (any SharedConcurrencyKeys)?
    /// Follows task attempts for tracing (issue #46); nil: attempts are not traced.
    public var attemptTracer: (any AttemptTracer)?

    public init(
        executors: [String: Int] = ["default": 8],
        actions: ActionRegistry = .builtins,
        limits: GraphLimits = GraphLimits(),
        jobFields: [any JobField] = [],
        externalExecutors: [any ExternalExecutor] = []
    ) {
        self.externalExecutors = externalExecutors
        self.executors = executors
        self.actions = actions
        self.limits = limits
        self.jobFields = jobFields
    }
}

/// Runs jobs: owns the worker pools and the action registry, and creates a `JobRun` per job.
///
/// ```swift
/// let engine = Engine(configuration: .init(executors: ["default": 8, "io": 64]))
/// let spec = try engine.decoder.decodeJob(json)
/// let run = engine.makeRun(id: "j1", spec: spec)
/// run.start()
/// ```
public final class Engine: Sendable {
    /// The name of the executor that runs actions inline, holding no slot.
    public static let immediateExecutor = "immediate"

    public let pools: [String: WorkerPool]
    /// `pools` as a list: a task finds its pool by a scan of a few names, cheaper than hashing one.
    private let poolList: [(name: String, pool: WorkerPool)]
    /// The external pools (SPEC §6), as a list: a task finds its pool by a scan of a few names.
    let externalList: [any ExternalExecutor]
    /// Whether any pool is external (most servers: none, and a task never looks one up).
    let hasExternalExecutors: Bool
    public let actions: ActionRegistry
    public let limits: GraphLimits
    public let decoder: JobDecoder
    /// The concurrency keys of every job and task this engine runs (SPEC §8), unless `sharedKeys`.
    public let concurrency = ConcurrencyLimiter()
    /// Concurrency keys held with other engines (a cluster's servers), in place of `concurrency`.
    public let sharedKeys: (any SharedConcurrencyKeys)?
    /// See `EngineConfiguration.attemptTracer`.
    public let attemptTracer: (any AttemptTracer)?
    /// How many times an attempt (or a job) had to wait, per reason, since the engine started.
    private let concurrencyWaits = Atomic<Int>(0)
    private let rateWaits = Atomic<Int>(0)
    private let slotWaits = Atomic<Int>(0)
    private let observerList = Mutex<[any JobObserver]>([])
    /// Whether readers of events (`JobRun.events`, `waitForEvents`) see only those the store
    /// committed (`JobRun.markDurable`). A durable store sets it before any job exists.
    public let eventsAwaitDurability: Bool

    public init(configuration: EngineConfiguration = EngineConfiguration()) {
        var sizes = configuration.executors
        if sizes["default"] == nil { sizes["default"] = 8 }
        sizes[Engine.immediateExecutor] = nil
        let externalNames = Set(configuration.externalExecutors.map(\.name))
        precondition(
            externalNames.count == configuration.externalExecutors.count && !externalNames.contains("default")
                && !externalNames.contains(Engine.immediateExecutor),
            "Engine: external executors need names of their own, other than default and immediate"
        )
        for name in externalNames { sizes[name] = nil }
        self.externalList = configuration.externalExecutors
        self.eventsAwaitDurability = configuration.eventsAwaitDurability
        self.sharedKeys = configuration.sharedKeys
        self.attemptTracer = configuration.attemptTracer
        self.hasExternalExecutors = !configuration.externalExecutors.isEmpty
        var pools: [String: WorkerPool] = [:]
        for (name, size) in sizes {
            pools[name] = WorkerPool(name: name, size: max(1, size), rate: configuration.rates[name])
        }
        self.pools = pools
        self.poolList = pools.map { (name: $0.key, pool: $0.value) }
        self.actions = configuration.actions
        self.limits = configuration.limits
        self.decoder = JobDecoder(
            actions: configuration.actions,
            executors: Set(pools.keys).union([Engine.immediateExecutor]),
            externalExecutors: externalNames,
            limits: configuration.limits,
            fields: configuration.jobFields
        )
    }

    /// The pool named `name` (`pools[name]`).
    func pool(named name: String) -> WorkerPool? {
        if self.poolList.count > 16 { return self.pools[name] }
        for entry in self.poolList where entry.name == name { return entry.pool }
        return nil
    }

    /// The external pool named `name`, if there is one.
    func externalExecutor(named name: String) -> (any ExternalExecutor)? {
        if self.externalList.isEmpty { return nil }
        for executor in self.externalList where executor.name == name { return executor }
        return nil
    }

    /// Counts a wait (the slow path only: an attempt that starts at once counts nothing).
    func noteWait(_ reason: WaitReason) {
        switch reason {
        case .concurrency: self.concurrencyWaits.add(1, ordering: .relaxed)
        case .rate: self.rateWaits.add(1, ordering: .relaxed)
        case .slot: self.slotWaits.add(1, ordering: .relaxed)
        }
    }

    /// How many times attempts (and jobs) waited for `reason` since the engine started.
    public func waitCount(_ reason: WaitReason) -> Int {
        switch reason {
        case .concurrency: self.concurrencyWaits.load(ordering: .relaxed)
        case .rate: self.rateWaits.load(ordering: .relaxed)
        case .slot: self.slotWaits.load(ordering: .relaxed)
        }
    }

    /// Adds an observer of every job's events (jobs created before keep their observers).
    public func addObserver(_ observer: any JobObserver) {
        self.observerList.withLock { $0.append(observer) }
    }

    var observers: [any JobObserver] { self.observerList.withLock { $0 } }

    /// A run of `spec` under `id`, not yet started (call `start()`).
    ///
    /// - Parameter restored: the stored state of a job that was running before a restart; nodes
    ///   with a stored outcome keep it and are not run again.
    public func makeRun(
        id: String,
        spec: JobSpec,
        createdAt: Timestamp = .now(),
        restored: RestoredJob? = nil
    ) -> JobRun {
        JobRun(engine: self, id: id, spec: spec, createdAt: createdAt, restored: restored)
    }

    /// The pools' counters, sorted by name.
    public var executorStatistics: [(name: String, statistics: WorkerPool.Statistics)] {
        self.pools.keys.sorted().map { ($0, self.pools[$0]!.statistics) }
    }

    /// Lets the pools' threads exit.
    public func shutdown() {
        for pool in self.pools.values { pool.shutdown() }
    }
}

/// The stored state of a job that was running when the process stopped (see `Engine.makeRun`).
public struct RestoredJob: Sendable {
    /// What a failed or cancelled job runs again from (`JobRun.startRedriven`): succeeded nodes keep
    /// their outcomes and do not run; failed, cancelled and skipped nodes are pending again, their
    /// attempts kept, so the count goes on (each gets its retry policy's attempts afresh).
    public static func redriving(nodes: [NodeRecord], events: [JobEvent], startedAt: Timestamp?) -> RestoredJob {
        var byID: [String: NodeRecord] = [:]
        byID.reserveCapacity(nodes.count)
        for record in nodes { byID[record.id] = record.redriven }
        return RestoredJob(nodes: byID, events: events, startedAt: startedAt)
    }

    /// The stored node records by id; terminal ones are not run again, others run (again).
    public var nodes: [String: NodeRecord]
    /// The job's events so far, in order; new events continue after the last seq.
    public var events: [JobEvent]
    public var startedAt: Timestamp?
    /// Whether a cancellation had been requested.
    public var cancelRequested: Bool
    /// Set for a job that had finished: it is shown as stored and never runs.
    public var finished: FinishedJob?

    public init(
        nodes: [String: NodeRecord],
        events: [JobEvent],
        startedAt: Timestamp?,
        cancelRequested: Bool = false,
        finished: FinishedJob? = nil
    ) {
        self.nodes = nodes
        self.events = events
        self.startedAt = startedAt
        self.cancelRequested = cancelRequested
        self.finished = finished
    }
}

/// How a stored job ended, with its node records in registration order.
public struct FinishedJob: Sendable {
    public var state: JobState
    public var result: JSONValue?
    public var error: TaskError?
    public var finishedAt: Timestamp
    public var records: [NodeRecord]

    public init(state: JobState, result: JSONValue?, error: TaskError?, finishedAt: Timestamp, records: [NodeRecord]) {
        self.state = state
        self.result = result
        self.error = error
        self.finishedAt = finishedAt
        self.records = records
    }
}
