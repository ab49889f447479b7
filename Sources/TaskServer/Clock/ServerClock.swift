import Synchronization
import TaskCore
import TaskGraph

/// The server's time: wall time for what clients see, monotonic time for deadlines, and one-shot
/// timers — injected, so that tests move time by hand (`ManualClock`) instead of sleeping.
///
/// Which timers go through it, and which stay where they are:
/// - **Through the clock**: what the server decides by time about state it owns — worker leases
///   (heartbeat expiry, attempt and schedule timeouts, waiting claims, when a worker was last
///   seen) and retention.
/// - **TaskCore's `TimerQueue.shared`** stays for the engine's own waits (`delay` actions, task
///   and job timeouts, retry back-off) and for the waits of readers on a job or the event feed
///   (long-polls, and with them the keep-alive of event streams): they are the Bolts model's
///   timers, below TaskServer, and tests of them run in milliseconds without sleeping.
/// - **NIO's `scheduleTask`** stays for connection timeouts: they belong to one event loop and
///   fire on it.
/// - **`DispatchQueue.asyncAfter`** stays for the shutdown grace period of `taskserver serve` (a
///   process-level deadline once the server is stopping).
/// - **Semaphore timeouts** stay in `taskserver worker`'s threads: a client process whose threads
///   block by design (one per role).
public protocol ServerClock: Sendable {
    /// Wall-clock time (timestamps clients see).
    func now() -> Timestamp
    /// Monotonic time in nanoseconds (deadlines and durations).
    func monotonicNanoseconds() -> UInt64
    /// Runs `work` once after `delay`, on a timer thread (keep it short); returns what `cancel` takes.
    @discardableResult
    func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> ClockTimer
    /// Cancels a timer that has not fired (its work is released); a fired one is ignored.
    func cancel(_ timer: ClockTimer)
}

/// A scheduled timer of a `ServerClock`.
public struct ClockTimer: Hashable, Sendable {
    let id: UInt64
}

/// The process's clock: `CLOCK_REALTIME`, `CLOCK_MONOTONIC` and TaskCore's timer thread.
public struct SystemClock: ServerClock {
    public init() {}

    public func now() -> Timestamp { .now() }

    public func monotonicNanoseconds() -> UInt64 { TaskCore.monotonicNanoseconds() }

    @discardableResult
    public func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> ClockTimer {
        ClockTimer(id: TimerQueue.shared.schedule(after: delay, work).value)
    }

    public func cancel(_ timer: ClockTimer) { TimerQueue.shared.cancel(TimerQueue.ID(value: timer.id)) }
}

/// A clock that moves only when told (`advance(by:)`): timers that fall due run then, in deadline
/// order, on the caller's thread. For tests of leases, retention and streams.
public final class ManualClock: ServerClock {
    private struct State {
        /// Wall time at `monotonic == origin`.
        let wall: Int64
        let origin: UInt64 = 1_000_000_000
        var monotonic: UInt64 = 1_000_000_000
        var nextID: UInt64 = 0
        var timers: [UInt64: (deadline: UInt64, work: @Sendable () -> Void)] = [:]
    }

    private let state: Mutex<State>

    /// - Parameter start: the wall time it shows until moved.
    public init(start: Timestamp = Timestamp(milliseconds: 1_790_000_000_000)) {
        self.state = Mutex(State(wall: start.milliseconds))
    }

    public func now() -> Timestamp {
        self.state.withLock { Timestamp(milliseconds: $0.wall + Int64(($0.monotonic - $0.origin) / 1_000_000)) }
    }

    public func monotonicNanoseconds() -> UInt64 { self.state.withLock { $0.monotonic } }

    @discardableResult
    public func schedule(after delay: Duration, _ work: @escaping @Sendable () -> Void) -> ClockTimer {
        self.state.withLock { state in
            state.nextID += 1
            state.timers[state.nextID] = (state.monotonic &+ delay.clampedNanoseconds, work)
            return ClockTimer(id: state.nextID)
        }
    }

    public func cancel(_ timer: ClockTimer) {
        let work = self.state.withLock { $0.timers.removeValue(forKey: timer.id) }
        withExtendedLifetime(work) {}
    }

    /// Timers not yet fired or cancelled.
    public var pendingTimers: Int { self.state.withLock { $0.timers.count } }

    /// Moves time forward by `duration`, running every timer that falls due on the way (a timer
    /// scheduled by one that runs is run too if it falls due within `duration`).
    public func advance(by duration: Duration) {
        let target = self.state.withLock { $0.monotonic &+ duration.clampedNanoseconds }
        while true {
            let due: (@Sendable () -> Void)? = self.state.withLock { state in
                guard
                    let (id, timer) = state.timers.min(by: { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
                    ),
                    timer.deadline <= target
                else { return nil }
                state.timers[id] = nil
                state.monotonic = max(state.monotonic, timer.deadline)
                return timer.work
            }
            guard let due else { break }
            due()
        }
        self.state.withLock { $0.monotonic = target }
    }
}
