// Prints TaskGraph's engine figures, one line each: `<id> <number> <unit>` (median of several reps).
// Each figure runs end to end: decode the graph from JSON, run the job, wait for it to be terminal.
// Run: swift run -c release taskgraph-bench [--reps N]
// (Also the cron engine's next-fire computation, which schedules pay per fire: cron_next_fire_us.)
import Dispatch
import Foundation
import TaskCore
import TaskGraph
import TaskSchedule

let reps: Int = {
    if let index = CommandLine.arguments.firstIndex(of: "--reps"), index + 1 < CommandLine.arguments.count {
        return max(1, Int(CommandLine.arguments[index + 1]) ?? 5)
    }
    return 5
}()

let engine = Engine(
    configuration: EngineConfiguration(executors: ["default": 2], limits: GraphLimits(maxNodes: 250_000, maxDepth: 100))
)

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

/// Decodes `json`, runs it to the end, returns elapsed milliseconds.
func runOnce(_ json: JSONValue, expectNodes: Int) -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    let spec = try! engine.decoder.decodeJob(json)
    let run = engine.makeRun(id: "bench", spec: spec)
    run.start()
    _ = try! run.waitForTerminal(timeout: .seconds(120)).wait()
    let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
    let snapshot = run.snapshot
    precondition(
        snapshot.state == .succeeded,
        "bench job ended \(snapshot.state): \(String(describing: snapshot.error))"
    )
    precondition(run.nodes.count == expectNodes, "expected \(expectNodes) nodes, got \(run.nodes.count)")
    return elapsed
}

func measure(_ json: JSONValue, nodes: Int) -> Double {
    _ = runOnce(json, expectNodes: nodes)
    return median((0..<reps).map { _ in runOnce(json, expectNodes: nodes) })
}

func valueTask(_ i: Int) -> JSONValue {
    ["type": "task", "action": "value", "params": ["value": .int(i)]]
}

/// Resident memory in bytes (from /proc/self/statm).
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

// Memory per finished node, results excluded: 100,000 finished `value` tasks returning a small
// integer, kept alive (records, event log, job state), measured as the growth of resident memory.
// Measured first: after the other figures, freed memory is reused and resident memory hardly grows.
do {
    let nodes: JSONValue = [
        "input": .array((0..<100_000).map { .int($0) }),
        "graph": ["type": "map", "template": ["type": "task", "action": "value", "params": ["value": 1]]],
    ]
    let spec = try! engine.decoder.decodeJob(nodes)
    let before = residentBytes()
    let run = engine.makeRun(id: "memory", spec: spec)
    run.start()
    _ = try! run.waitForTerminal(timeout: .seconds(120)).wait()
    let after = residentBytes()
    precondition(run.snapshot.state == .succeeded)
    print("bytes_per_node \(max(0, after - before) / 100_001) bytes")
    withExtendedLifetime(run) {}
}

let parallel: JSONValue = ["graph": ["type": "parallel", "branches": .array((0..<10_000).map(valueTask))]]
let series: JSONValue = ["graph": ["type": "series", "steps": .array((0..<10_000).map(valueTask))]]
let map: JSONValue = [
    "input": .array((0..<100_000).map { .int($0) }),
    "graph": ["type": "map", "template": ["type": "task", "action": "value", "params": ["value": "${input}"]]],
]

let parallelMs = measure(parallel, nodes: 10_001)
print("parallel_10k \(String(format: "%.1f", parallelMs)) ms")
let seriesMs = measure(series, nodes: 10_001)
print("series_10k \(String(format: "%.1f", seriesMs)) ms")
let mapMs = measure(map, nodes: 100_001)
print("map_100k \(String(format: "%.1f", mapMs)) ms")
// Engine overhead per node: the 100k map's time over its nodes (decode, records, events, futures).
print("node_overhead_us \(String(format: "%.2f", mapMs * 1000 / 100_001))")

// Fixed cost of a job (what every POST /v1/jobs pays): a one-task job decoded, run and waited
// for, 20,000 times in a row; microseconds per job.
let oneTask: JSONValue = ["graph": ["type": "task", "action": "value", "params": ["value": 1]]]
let jobUs = median(
    (0...reps).map { _ in
        let jobs = 20_000
        let start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<jobs {
            let spec = try! engine.decoder.decodeJob(oneTask)
            let run = engine.makeRun(id: "one", spec: spec)
            run.start()
            _ = try! run.waitForTerminal(timeout: .seconds(120)).wait()
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e3 / Double(jobs)
    }.dropFirst().map { $0 }
)
print("job_1task_us \(String(format: "%.2f", jobUs))")

// Queue rules (SPEC §8), per attempt. A map of 100,000 `value` tasks as above (the pool's fast
// path: a slot is free), then with a priority on the job, then with a concurrency key per task
// (`${input}`, max 1: a key taken and given back per attempt) while 10,000 other keys are held —
// the extra microseconds per attempt are the rules' cost. Then the pool's waiting line: a pool of
// one slot, held, with 100,000 slot requests queued at one priority (one lane) or at ten, then
// granted one after another: microseconds per request, queueing and granting.
let heldKeys = (0..<10_000).map { try! engine.concurrency.acquire(key: "live-\($0)", max: 1).wait() }
func mapJob(priority: Int?, keyed: Bool) -> JSONValue {
    var template: JSONObject = ["type": "task", "action": "value", "params": ["value": 1]]
    if keyed { template["concurrency"] = ["key": "${input}", "max": 1] }
    var job: JSONObject = [
        "graph": ["type": "map", "items": .array((0..<100_000).map { .int($0) }), "template": .object(template)]
    ]
    if let priority { job["priority"] = .int(priority) }
    return .object(job)
}
let plainUs = measure(mapJob(priority: nil, keyed: false), nodes: 100_001) * 1000 / 100_001
let priorityUs = measure(mapJob(priority: 9, keyed: false), nodes: 100_001) * 1000 / 100_001
let keyedUs = measure(mapJob(priority: nil, keyed: true), nodes: 100_001) * 1000 / 100_001
print("queue_attempt_us[plain] \(String(format: "%.2f", plainUs))")
print("queue_attempt_us[priority_9] \(String(format: "%.2f", priorityUs))")
print("queue_attempt_us[key_10k_live] \(String(format: "%.2f", keyedUs))")
print("queue_extra_us[priority] \(String(format: "%.2f", priorityUs - plainUs))")
print("queue_extra_us[key] \(String(format: "%.2f", keyedUs - plainUs))")
precondition(engine.concurrency.statistics.keys == 10_000, "the map's keys were not all given back")
for held in heldKeys { held.release() }

for (name, lanes) in [("one_lane", 1), ("ten_lanes", 10)] {
    let us = median(
        (0...reps).map { _ in
            let pool = WorkerPool(name: "line", size: 1)
            defer { pool.shutdown() }
            let holder = try! pool.acquireSlot().wait()
            let requests = 100_000
            let start = DispatchTime.now().uptimeNanoseconds
            var grants: [Future<Void>] = []
            grants.reserveCapacity(requests)
            // Each holder gives its slot back as it gets it (completions run on the trampoline,
            // so the chain of grants stays iterative).
            for index in 0..<requests {
                grants.append(pool.acquireSlot(priority: lanes == 1 ? 5 : index % 10).map { $0.release() })
            }
            holder.release()
            _ = try! Future.whenAll(grants).wait()
            return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e3 / Double(requests)
        }.dropFirst().map { $0 }
    )
    print("pool_waiter_us[\(name)] \(String(format: "%.3f", us))")
}

// The cron engine (TaskSchedule): one next-fire computation, as a schedule pays per fire and a
// preview per time shown, in microseconds — for a frequent wildcard in UTC, a fixed time on Paris's
// wall clock (daylight saving on the way), and a rare day (a 29 February that is a Monday: years
// of days searched per call).
for (name, cron, zone) in [
    ("every_5_min_utc", "*/5 * * * *", "UTC"), ("daily_0230_paris", "30 2 * * *", "Europe/Paris"),
    ("feb29_monday", "0 0 29 2 1", "UTC"),
] {
    let schedule = try! CronSchedule(CronExpression(parsing: cron), timeZone: CronSchedule.timeZone(named: zone))
    let calls = name == "feb29_monday" ? 200 : 20_000
    let us = median(
        (0...reps).map { _ in
            var at = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
            let start = DispatchTime.now().uptimeNanoseconds
            for _ in 0..<calls { at = schedule.nextFire(after: at) ?? at }
            return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e3 / Double(calls)
        }.dropFirst().map { $0 }
    )
    print("cron_next_fire_us[\(name)] \(String(format: "%.2f", us))")
}
