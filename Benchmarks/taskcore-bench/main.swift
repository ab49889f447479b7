// Prints TaskCore's figures, one line per figure: `<id> <number> <unit>` (median of several reps).
// Run: swift run -c release taskcore-bench [--reps N]
import Dispatch
import Foundation
import TaskCore

let reps: Int = {
    if let index = CommandLine.arguments.firstIndex(of: "--reps"), index + 1 < CommandLine.arguments.count {
        return max(1, Int(CommandLine.arguments[index + 1]) ?? 5)
    }
    return 5
}()

/// `--only ID` runs one figure (for profiling).
let only: String? = {
    if let index = CommandLine.arguments.firstIndex(of: "--only"), index + 1 < CommandLine.arguments.count {
        return CommandLine.arguments[index + 1]
    }
    return nil
}()

func milliseconds(_ body: () -> Void) -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func report(_ id: String, _ value: Double, _ unit: String) {
    print("\(id) \(String(format: "%.1f", value)) \(unit)")
}

func measure(_ id: String, _ body: () -> Void) {
    if let only, only != id { return }
    body()  // warm-up
    report(id, median((0..<reps).map { _ in milliseconds(body) }), "ms")
}

// (a) 1,000,000 continueWith on the immediate executor, starting from a completed future.
measure("continue_1m") {
    var future = Future<Int>(value: 0)
    for _ in 0..<1_000_000 {
        future = future.continueWith(on: .immediate) { ($0.result ?? 0) &+ 1 }
    }
    precondition(future.result == 1_000_000)
}

// (a2) the same chain built on a pending future, then completed.
measure("pending_chain_1m") {
    let promise = Promise<Int>()
    var future = promise.future
    for _ in 0..<1_000_000 {
        future = future.continueWith(on: .immediate) { ($0.result ?? 0) &+ 1 }
    }
    promise.succeed(0)
    precondition(future.result == 1_000_000)
}

// (b) whenAll over 100,000 completed futures.
let completed = (0..<100_000).map { Future<Int>(value: $0) }
measure("when_all_100k") {
    let all = Future.whenAll(completed)
    precondition(all.result?.count == 100_000)
}

// (c) 100,000 promises completed from another thread, each with one continuation on the default executor.
measure("cross_thread_100k") {
    let promises = (0..<100_000).map { _ in Promise<Int>() }
    let continued = promises.map { $0.future.continueWith { ($0.result ?? 0) &+ 1 } }
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        for (index, promise) in promises.enumerated() { promise.succeed(index) }
        done.signal()
    }
    done.wait()
    let all = Future.whenAll(continued)
    precondition((try? all.wait())?.count == 100_000)
}

// (d) 1,000,000 tiny jobs through a 2-thread WorkerPool.
if only == nil || only == "pool_jobs_per_s" {
    let pool = WorkerPool(name: "bench", size: 2)
    let jobs = 1_000_000
    var samples: [Double] = []
    for rep in 0...reps {
        let remaining = ManagedAtomicCounter(jobs)
        let done = DispatchSemaphore(value: 0)
        let ms = milliseconds {
            for _ in 0..<jobs {
                pool.execute { if remaining.decrement() == 0 { done.signal() } }
            }
            done.wait()
        }
        if rep > 0 { samples.append(ms) }
    }
    pool.shutdown()
    report("pool_jobs_per_s", Double(jobs) / (median(samples) / 1000), "jobs/s")
}

// (e) baseline: withTaskGroup over 100,000 child tasks.
measure("taskgroup_100k") {
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        await withTaskGroup(of: Int.self) { group in
            for i in 0..<100_000 { group.addTask { i } }
            var sum = 0
            for await value in group { sum &+= value }
            precondition(sum > 0)
        }
        done.signal()
    }
    done.wait()
}
