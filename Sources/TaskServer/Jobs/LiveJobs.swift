import Synchronization
import TaskCore
import TaskGraph

/// The jobs this server runs (`JobRun`s), from before a job's record is inserted until its end is
/// recorded — and the two things that hang on a run leaving: commands waiting for a finished job's
/// end to be recorded (delete, redrive), and recoveries in flight, which must not resume a job
/// that ended here while their claim was on its way. One owner of all three, so that each rule
/// is checked under the lock it needs (`LiveJobsTests` drive the recovery race by hand).
final class LiveJobs: Sendable {
    /// In shards by id: every submission adds a run and every end removes one, from both event
    /// loops and the pools' threads, and one lock for all of them was contended.
    private let shards: [Shard] = (0..<16).map { _ in Shard() }

    private final class Shard: Sendable {
        let runs = Mutex<[JobIDKey: JobRun]>([:])
    }

    /// Commands waiting for a finished job's end to be recorded, by job id; `waitingForEnds`
    /// counts them, so that an end looks at them only when there are any.
    private let endWaiters = Mutex<[String: [Promise<Void>]]>([:])
    private let waitingForEnds = Atomic<Int>(0)
    /// The jobs that left while a recovery was in flight. A recovery's claim reads the jobs this
    /// server owns and does not run; one that ended here while the claim was on its way may have
    /// been read before its end was committed, and must not run again from that record.
    /// `recovering` counts the recoveries in flight (changed under this lock), so that an end
    /// looks only when there are any; the set is emptied when the last one ends.
    private let leftWhileRecovering = Mutex<Set<String>>([])
    private let recovering = Atomic<Int>(0)

    /// The shard of `key` (its random bytes pick it).
    private func shard(_ key: JobIDKey) -> Shard {
        switch key {
        case .inline(_, _, let random, _): self.shards[Int(truncatingIfNeeded: random >> 8) & 15]
        case .other(let id): self.shards[id.utf8.count & 15]
        }
    }

    /// Runs `body` on the runs of the shard of `id`.
    private func withShard<R>(_ id: String, _ body: (inout [JobIDKey: JobRun], JobIDKey) -> R) -> R {
        let key = JobIDKey(id)
        return self.shard(key).runs.withLock { body(&$0, key) }
    }

    // MARK: - The runs

    /// The live run of job `id`.
    func run(_ id: String) -> JobRun? { self.withShard(id) { runs, key in runs[key] } }

    /// The number of live runs.
    var count: Int { self.shards.reduce(0) { count, shard in count + shard.runs.withLock { $0.count } } }

    /// Makes a new job's run live (before its record is inserted: a reader that learns the id
    /// early finds the run, never a record a commit behind it).
    func add(_ run: JobRun) { self.withShard(run.id) { runs, key in runs[key] = run } }

    /// Makes `run` live unless its job is live already; whether it did.
    func addIfAbsent(_ run: JobRun) -> Bool {
        self.withShard(run.id) { runs, key -> Bool in
            guard runs[key] == nil else { return false }
            runs[key] = run
            return true
        }
    }

    /// Drops `run` (not inserted after all, or sleeping in the store), if it is the live one.
    func forget(_ run: JobRun) {
        self.withShard(run.id) { runs, key in
            if runs[key] === run { runs[key] = nil }
        }
    }

    /// Drops every run (they are given up to another server) and returns them.
    func removeAll() -> [JobRun] {
        var all: [JobRun] = []
        for shard in self.shards {
            shard.runs.withLock { runs in
                all += runs.values
                runs = [:]
            }
        }
        return all
    }

    // MARK: - Ends

    /// Where job `id` is: not live, live and not finished (its state), or finished a moment ago
    /// (the future completes once its end is recorded and the repository has the record).
    enum Place {
        case notLive
        case running(JobState)
        case ending(Future<Void>)
    }

    func place(_ id: String) -> Place {
        self.withShard(id) { runs, key in
            guard let run = runs[key] else { return .notLive }
            let state = run.jobState
            guard state.isTerminal else { return .running(state) }
            // Registered under the shard's lock: `ended` removes the run under it before it takes
            // the waiters, so this waiter cannot be missed.
            let promise = Promise<Void>()
            self.endWaiters.withLock { $0[id, default: []].append(promise) }
            self.waitingForEnds.add(1, ordering: .sequentiallyConsistent)
            return .ending(promise.future)
        }
    }

    /// `run`'s end is recorded (or lost with a failed commit): it leaves, and what waited for that
    /// goes on; a recovery in flight will not resume it.
    func ended(_ run: JobRun) {
        if self.recovering.load(ordering: .sequentiallyConsistent) > 0 {
            // Noted and removed together, so that a recovery either finds the run live or noted.
            self.leftWhileRecovering.withLock { left in
                left.insert(run.id)
                self.forget(run)
            }
        } else {
            self.forget(run)
        }
        // A command that found the run live registered before the run left (both under its
        // shard's lock), so it is counted by now.
        guard self.waitingForEnds.load(ordering: .sequentiallyConsistent) > 0 else { return }
        let waiters = self.endWaiters.withLock { $0.removeValue(forKey: run.id) ?? [] }
        if waiters.isEmpty { return }
        self.waitingForEnds.subtract(waiters.count, ordering: .sequentiallyConsistent)
        for waiter in waiters { waiter.succeed(()) }
    }

    // MARK: - Recoveries

    /// A recovery starts: the ids live now, which its claim excludes. Pair with `endRecovery`.
    func beginRecovery() -> Set<String> {
        self.leftWhileRecovering.withLock { _ in _ = self.recovering.add(1, ordering: .sequentiallyConsistent) }
        return self.shards.reduce(into: Set<String>()) { ids, shard in
            shard.runs.withLock { runs in ids.formUnion(runs.values.lazy.map { $0.id }) }
        }
    }

    /// Makes `run`, built from a record a recovery claimed, live — unless its job is live already,
    /// or left this server since the recovery began (its record may predate its end).
    func addRecovered(_ run: JobRun) -> Bool {
        self.leftWhileRecovering.withLock { left in !left.contains(run.id) && self.addIfAbsent(run) }
    }

    /// A recovery ended.
    func endRecovery() {
        self.leftWhileRecovering.withLock { left in
            if self.recovering.subtract(1, ordering: .sequentiallyConsistent).newValue == 0 { left = [] }
        }
    }
}
