import Synchronization
import TaskCore
import TaskGraph

/// Starts delayed jobs (SPEC §8 `runAt` / `delayMs`) on time, holding in memory only the ones due
/// within a short horizon: a sleeping job costs a row and an index entry, not a live run or a
/// timer (the million jobs asleep for an hour).
///
/// - **Held runs**: live `JobRun`s waiting to start, in a heap by start time, with one clock
///   timer for the earliest. A job is held from its submission when it is due by `through`
///   (`holdsAtSubmission`: the service then inserts it owned, not sleeping); later ones are
///   inserted *sleeping* and the run is let go.
/// - **The loader** takes (`claimSleeping`) the sleeping jobs due by `now + horizon` every
///   `interval`, a page at a time, and the service makes them live. Taking is a write: a job is
///   taken once, and after a crash `claimUnfinished` returns the jobs taken and not started —
///   the service holds them again. `through` only grows and is raised before a claim, so a job
///   judged "later" at submission is due after it and is taken by a claim that follows its
///   insert. At most `maxHeld` runs are held: past that the loader waits for starts to make room.
/// - **Starting**: when the timer fires, every due run is marked started at once (`job.started`
///   stamped), then their graphs run in slices of `startSlice`, one timer callback each, so that
///   a burst of 100,000 does not hold the timer thread. A run that ended meanwhile (cancelled
///   before its time) ignores its start.
public final class DelayedStarts: Sendable {
    public struct Options: Sendable {
        /// Jobs due within this are held live, ready to start.
        public var horizon: Duration = .seconds(10)
        /// How often the loader takes what fell within the horizon.
        public var interval: Duration = .seconds(1)
        /// Sleeping jobs taken per repository call.
        public var page = 1_000
        /// Held runs at most before the loader waits (a submission due soon is still held).
        public var maxHeld = 100_000
        /// Graphs run per timer callback once their jobs are marked started.
        public var startSlice = 1_000
        public init() {}
    }

    /// A held run with its start time (milliseconds) and arrival order (ties start FIFO).
    struct Held: Comparable {
        let at: Int64
        let order: UInt64
        let run: JobRun
        static func < (lhs: Held, rhs: Held) -> Bool { (lhs.at, lhs.order) < (rhs.at, rhs.order) }
        static func == (lhs: Held, rhs: Held) -> Bool { lhs.at == rhs.at && lhs.order == rhs.order }
    }

    private struct State {
        var held = BinaryHeap<Held>()
        var order: UInt64 = 0
        /// Every sleeping job due at or before this is held, or taken by a claim in flight.
        var through = Timestamp(milliseconds: .min)
        var timer: ClockTimer?
        var timerAt: Int64 = .max
        var loading = false
        var loaderTimer: ClockTimer?
        var running = true
    }

    let options: Options
    let clock: any ServerClock
    let repository: any JobRepository
    /// Makes a job taken from the repository live (nil: it cannot be built, or is live already).
    private let wake: Mutex<(@Sendable (StoredJob) -> JobRun?)?> = Mutex(nil)
    private let state: Mutex<State>

    init(repository: any JobRepository, clock: any ServerClock, options: Options = Options()) {
        self.repository = repository
        self.clock = clock
        self.options = options
        self.state = Mutex(State())
    }

    /// Sets how a taken job is made live (once, by the service), and starts the loader.
    func start(wake: @escaping @Sendable (StoredJob) -> JobRun?) {
        self.wake.withLock { $0 = wake }
        self.load()
    }

    /// Runs held, waiting for their start.
    var heldCount: Int { self.state.withLock { $0.held.count } }

    /// Stops loading and starting (shutdown): held runs stay unstarted; a restart holds them again.
    func stop() {
        let timers = self.state.withLock { state -> [ClockTimer] in
            state.running = false
            defer {
                state.timer = nil
                state.loaderTimer = nil
            }
            return [state.timer, state.loaderTimer].compactMap { $0 }
        }
        for timer in timers { self.clock.cancel(timer) }
    }

    /// Whether a job submitted now with start time `runAt` is held from the start (then the
    /// service inserts it owned, and `hold`s it once inserted) rather than left sleeping.
    func holdsAtSubmission(_ runAt: Timestamp) -> Bool {
        self.state.withLock { runAt <= $0.through }
    }

    /// Holds `run` until `runAt` (then starts it).
    func hold(_ run: JobRun, at runAt: Timestamp) {
        if self.state.withLock({ Self.push(run, at: runAt, into: &$0) }) { self.armTimer() }
    }

    /// Pushes a run; whether the timer must move earlier.
    private static func push(_ run: JobRun, at runAt: Timestamp, into state: inout State) -> Bool {
        state.order += 1
        state.held.push(Held(at: runAt.milliseconds, order: state.order, run: run))
        return runAt.milliseconds < state.timerAt
    }

    // MARK: - Loading

    private func load() {
        let now = self.clock.now()
        let request = self.state.withLock { state -> (through: Timestamp, limit: Int)? in
            guard state.running, !state.loading else { return nil }
            let room = self.options.maxHeld - state.held.count
            guard room > 0 else { return nil }
            state.loading = true
            state.through = max(
                state.through,
                Timestamp(milliseconds: now.milliseconds + self.options.horizon.wholeMilliseconds)
            )
            return (state.through, min(self.options.page, room))
        }
        guard let request else {
            self.scheduleLoad()
            return
        }
        self.repository.claimSleeping(through: request.through, limit: request.limit).whenComplete { outcome in
            let jobs = outcome.value ?? []
            let wake = self.wake.withLock { $0 }
            var made: [(run: JobRun, at: Timestamp)] = []
            made.reserveCapacity(jobs.count)
            for job in jobs {
                if let run = wake?(job) { made.append((run, job.runAt ?? now)) }
            }
            let (rearm, more) = self.state.withLock { state -> (Bool, Bool) in
                state.loading = false
                var rearm = false
                for (run, at) in made where Self.push(run, at: at, into: &state) { rearm = true }
                return (rearm, jobs.count == request.limit && state.running)
            }
            if rearm { self.armTimer() }
            // A full page: more may be due within the horizon (`load` checks the cap).
            if more { self.load() } else { self.scheduleLoad() }
        }
    }

    private func scheduleLoad() {
        let timer = self.clock.schedule(after: self.options.interval) { [weak self] in
            self?.state.withLock { $0.loaderTimer = nil }
            self?.load()
        }
        let stale = self.state.withLock { state -> ClockTimer? in
            guard state.running else { return timer }
            let old = state.loaderTimer
            state.loaderTimer = timer
            return old
        }
        if let stale { self.clock.cancel(stale) }
    }

    // MARK: - Starting

    /// Arms the timer for the earliest held run (replacing a later one).
    private func armTimer() {
        let now = self.clock.now().milliseconds
        let replaced: ClockTimer? = self.state.withLock { state in
            guard state.running, let first = state.held.min, first.at < state.timerAt else { return nil }
            let replaced = state.timer
            state.timerAt = first.at
            state.timer = self.clock.schedule(after: .milliseconds(max(0, first.at - now))) { [weak self] in
                self?.fire()
            }
            return replaced
        }
        if let replaced { self.clock.cancel(replaced) }
    }

    /// Starts the runs due now: marks them all started at once (`prepareStart`: the stamp of
    /// `job.started`, a microsecond or two each), then runs their graphs a slice at a time.
    private func fire() {
        let now = self.clock.now().milliseconds
        let due: [JobRun] = self.state.withLock { state in
            state.timer = nil
            state.timerAt = .max
            var due: [JobRun] = []
            while let first = state.held.min, first.at <= now { due.append(state.held.popMin()!.run) }
            return due
        }
        self.armTimer()
        guard !due.isEmpty else { return }
        self.runGraphs(due.compactMap { $0.prepareStart() }[...])
        // Room was made: a loader waiting at the cap goes on.
        if self.state.withLock({ $0.held.count + due.count >= self.options.maxHeld }) { self.load() }
    }

    /// Runs the graphs of jobs marked started, `startSlice` per timer callback.
    private func runGraphs(_ starts: ArraySlice<JobRun.PreparedStart>) {
        let slice = starts.prefix(self.options.startSlice)
        for start in slice { start.run() }
        let rest = starts.dropFirst(slice.count)
        if !rest.isEmpty { self.clock.schedule(after: .zero) { self.runGraphs(rest) } }
    }
}
