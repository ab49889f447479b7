// Prints the outbound figures of issue #5, one line each: `<id> <number> <unit>` (median of reps).
//
// Everything runs in this process on loopback: a receiver (TaskServer's own NIO HTTP server, keep-alive,
// two event loops), the engine, one CurlClient thread and the webhook dispatcher, so the figures are
// what the two cores give all of them together.
//
//   http_tasks_per_s        a map of `http` GET tasks on an executor of 64 slots (64 transfers in flight)
//   webhook_deliveries_per_s  stored deliveries dispatched to a receiver that answers 204 at once
//   jobs_per_s_no_webhook   one-task jobs through the engine, no webhook
//   jobs_per_s_fast_webhook the same jobs, each sending its job.* events to a receiver that answers at once
//   jobs_per_s_slow_webhook the same jobs, the receiver answering after 5 s (the engine must not notice)
//
// Run: swift run -c release outbound-bench [--reps N] [--tasks N] [--deliveries N] [--jobs N]
import Dispatch
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph
import TaskServer

func argument(_ name: String, _ fallback: Int) -> Int {
    if let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count {
        return max(1, Int(CommandLine.arguments[index + 1]) ?? fallback)
    }
    return fallback
}

let reps = argument("--reps", 3)
let taskCount = argument("--tasks", 20_000)
let deliveryCount = argument("--deliveries", 20_000)
let jobCount = argument("--jobs", 20_000)
let logger = Logger(label: "outbound-bench") { _ in SwiftLogNoOpLogHandler() }

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
func seconds(since start: UInt64) -> Double { Double(now() - start) / 1e9 }

// MARK: - The receiver

var router = Router()
router.add(.GET, "/item/{n}") { _ in Future(value: .json(["ok": true])) }
router.add(.POST, "/hook") { _ in Future(value: Response(status: .noContent)) }
router.add(.POST, "/slow") { _ in Future<Void>.delay(.seconds(5)).map { Response(status: .noContent) } }
let receiver = HTTPServer(host: "127.0.0.1", port: 0, router: router, logger: logger)
let port = try await receiver.start()
let base = "http://127.0.0.1:\(port)"

// MARK: - http tasks

let client = CurlClient()
var actions = ActionRegistry.builtins
actions.register(HTTPAction(client: client))
let engine = Engine(
    configuration: EngineConfiguration(
        executors: ["default": 2, "io": 64],
        actions: actions,
        limits: GraphLimits(maxNodes: 1_000_000)
    )
)

func runHTTPTasks(_ count: Int) async throws -> Double {
    let job: JSONValue = [
        "input": ["base": .string(base), "items": .array((0..<count).map { .int($0) })],
        "graph": [
            "type": "map", "items": "${input.items}",
            "template": [
                "type": "task", "action": "http", "executor": "io",
                "params": ["url": "${job.input.base}/item/${input}"],
            ],
        ],
    ]
    let spec = try engine.decoder.decodeJob(job)
    let start = now()
    let run = engine.makeRun(id: "http-\(start)", spec: spec)
    run.start()
    try await run.waitForTerminal(timeout: .seconds(600)).value
    let elapsed = seconds(since: start)
    let snapshot = run.snapshot
    precondition(
        snapshot.state == .succeeded,
        "http bench job ended \(snapshot.state): \(String(describing: snapshot.error))"
    )
    precondition(snapshot.progress.succeeded == count)
    return Double(count) / elapsed
}

_ = try await runHTTPTasks(1000)  // warm-up: connections, code paths
var httpRates: [Double] = []
for _ in 0..<reps { httpRates.append(try await runHTTPTasks(taskCount)) }
print("http_tasks_per_s \(Int(median(httpRates))) tasks/s (\(taskCount) GETs, 64 in flight, median of \(reps))")

// MARK: - Webhook deliveries

/// Counts deliveries that ended (delivered, or failed for good) and completes a promise at a target.
final class DeliveryCounter: Sendable {
    private let state = Mutex<(ended: Int, failed: Int, target: Int, promise: Promise<Void>?)>((0, 0, .max, nil))
    func expect(_ target: Int) -> Future<Void> {
        let promise = Promise<Void>()
        self.state.withLock { $0 = (0, 0, target, promise) }
        return promise.future
    }
    func record(_ result: WebhookDispatcher.AttemptResult) {
        guard result != .retrying else { return }
        let done: Promise<Void>? = self.state.withLock { state in
            state.ended += 1
            if result == .failed { state.failed += 1 }
            return state.ended == state.target ? state.promise : nil
        }
        done?.succeed(())
    }
    var failed: Int { self.state.withLock { $0.failed } }
}

let counter = DeliveryCounter()
// The deliveries of one job per round, stored in a memory outbox that the dispatcher claims from.
let outbox = MemoryJobRepository()
let dispatcher = WebhookDispatcher(client: client, store: outbox, logger: logger) { counter.record($0) }

func runDeliveries(_ count: Int, round: Int) async throws -> Double {
    let body: JSONValue = [
        "type": "job.succeeded", "timestamp": .string(Timestamp.now().rfc3339),
        "data": [
            "seq": 3,
            "job": [
                "id": "01jobidxxxxxxxxxxxxxxxxxxx", "state": "succeeded", "result": ["a": 1, "b": "two"], "labels": [:],
            ],
        ],
    ]
    let bytes = body.jsonBytes
    let time = Timestamp.now()
    let deliveries = (0..<count).map { index in
        Delivery(
            id: "msg_bench\(round)_\(index)",
            jobID: "bench\(round)",
            seq: index % 5 + 1,
            eventType: .jobSucceeded,
            url: base + "/hook",
            secret: .literal("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            body: bytes,
            nextAttemptAt: time,
            retry: RetrySpec(maxAttempts: 3, delayMs: 100, backoff: 2, maxDelayMs: 1000, jitter: true),
            createdAt: time
        )
    }
    let job = NewJobRecord(
        id: "bench\(round)",
        name: nil,
        labels: [:],
        createdAt: time,
        document: ByteBuffer(),
        idempotency: nil
    )
    guard case .inserted(let key) = outbox.insert(job).outcome?.value else { fatalError("not inserted") }
    var batch = JournalBatch(id: job.id, key: key, events: [])
    batch.deliveries = deliveries
    let done = counter.expect(count)
    let start = now()
    outbox.append(batch)
    dispatcher.wake()
    try await done.value
    let rate = Double(count) / seconds(since: start)
    precondition(counter.failed == 0, "\(counter.failed) deliveries failed")
    return rate
}

_ = try await runDeliveries(1000, round: 0)
var deliveryRates: [Double] = []
for round in 1...reps { deliveryRates.append(try await runDeliveries(deliveryCount, round: round)) }
print(
    "webhook_deliveries_per_s \(Int(median(deliveryRates))) deliveries/s (\(deliveryCount) signed POSTs to one endpoint, "
        + "16 in flight, median of \(reps))"
)

// MARK: - Engine throughput with a slow receiver

/// Runs `count` one-task jobs on `jobEngine`, all submitted at once; returns jobs per second.
func runJobs(_ jobEngine: Engine, _ count: Int, webhook: String?, tag: String) async throws -> Double {
    var json: JSONValue = ["graph": ["type": "task", "action": "value", "params": ["value": 1]]]
    if let webhook, case .object(var object) = json {
        // The default filter, job.*: three deliveries per job.
        object["webhook"] = ["url": .string(webhook), "retry": ["maxAttempts": 1]]
        json = .object(object)
    }
    let spec = try jobEngine.decoder.decodeJob(json)
    let start = now()
    var waits: [Future<Void>] = []
    waits.reserveCapacity(count)
    for index in 0..<count {
        let run = jobEngine.makeRun(id: "\(tag)-\(index)", spec: spec)
        run.start()
        waits.append(run.waitForTerminal(timeout: .seconds(600)))
    }
    for wait in waits { try await wait.value }
    return Double(count) / seconds(since: start)
}

/// An engine whose jobs' webhooks go through their own outbox and dispatcher: a job service on
/// a memory repository plans each job's deliveries and hands them to the dispatcher.
func webhookEngine() -> (Engine, WebhookDispatcher) {
    let repository = MemoryJobRepository()
    let dispatcher = WebhookDispatcher(client: client, store: repository, logger: logger)
    let engine = Engine(configuration: EngineConfiguration(executors: ["default": 2], jobFields: [WebhookField()]))
    _ = JobService(engine: engine, repository: repository, dispatcher: dispatcher, logger: logger)
    return (engine, dispatcher)
}
let (fastEngine, fastDispatcher) = webhookEngine()
let (slowEngine, slowDispatcher) = webhookEngine()
let plainEngine = Engine(configuration: EngineConfiguration(executors: ["default": 2]))

_ = try await runJobs(plainEngine, 1000, webhook: nil, tag: "warm")
var plainRates: [Double] = []
var fastRates: [Double] = []
var slowRates: [Double] = []
for round in 0..<reps {
    plainRates.append(try await runJobs(plainEngine, jobCount, webhook: nil, tag: "plain\(round)"))
    fastRates.append(try await runJobs(fastEngine, jobCount, webhook: base + "/hook", tag: "fast\(round)"))
    // Let the fast receiver's deliveries drain, so they do not compete with the next figures.
    while fastDispatcher.counts.active + fastDispatcher.counts.queued > 0 {
        try await Task.sleep(for: .milliseconds(50))
    }
    slowRates.append(try await runJobs(slowEngine, jobCount, webhook: base + "/slow", tag: "slow\(round)"))
}
let backlog = slowDispatcher.counts
print(
    "jobs_per_s_no_webhook \(Int(median(plainRates))) jobs/s (\(jobCount) one-task jobs submitted at once, median of \(reps))"
)
print(
    "jobs_per_s_fast_webhook \(Int(median(fastRates))) jobs/s (the same jobs with a webhook on job.*, receiver answers 204 at once)"
)
print(
    "jobs_per_s_slow_webhook \(Int(median(slowRates))) jobs/s (the same, receiver answers after 5 s; "
        + "\(backlog.active) attempts in flight, \(backlog.queued) deliveries waiting at the end)"
)
print("slow_vs_fast_webhook_ratio \(String(format: "%.2f", median(slowRates) / median(fastRates)))")

slowDispatcher.shutdown()
fastDispatcher.shutdown()
dispatcher.shutdown()
client.shutdown()
await receiver.shutdown()
engine.shutdown()
fastEngine.shutdown()
slowEngine.shutdown()
plainEngine.shutdown()
