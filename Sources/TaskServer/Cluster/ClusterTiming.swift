/// Every duration the cluster's rules rest on (SPEC §9), in one place, with the relations between
/// them checked when it is built — a shortened set for tests must keep them too.
///
/// The rules they make, with the defaults:
/// - a server renews its lease every `heartbeat` (1 s) for `lease` (5 s); another server may take
///   its jobs over once the lease has ended — 5–6 s after the last renewal;
/// - a server that has not renewed for `staleStop` (3.5 s) stops acting on its jobs, looked at
///   every `watchInterval` (250 ms): it has stopped before anyone may take them;
/// - back after the database was away, a server reaps nobody for `reconnectGrace` (the lease):
///   the others get a lease's time to reconnect and renew too;
/// - a client's command relayed to a job's server (cancel a task, complete an `await`) waits
///   `relayTimeout` (10 s) for its answer: past a takeover of its target;
/// - a worker's call relayed (a claim, a lease's heartbeat or completion) waits
///   `poolCommandTimeout` (3 s), then 503 and the worker retries; a relayed claim is applied
///   only within `claimFreshness` (2 s) of being sent (later, its leases would reach nobody);
/// - an unapplied command older than `lostCommandAge` (1 s) is picked up by the heartbeat (its
///   notification was lost); answered ones are deleted after `commandRetention` (60 s).
struct ClusterTiming: Sendable, Equatable {
    var lease: Duration = .seconds(5)
    var heartbeat: Duration = .seconds(1)
    var staleStop: Duration = .milliseconds(3500)
    var watchInterval: Duration = .milliseconds(250)
    var reconnectGrace: Duration = .seconds(5)
    var relayTimeout: Duration = .seconds(10)
    var claimFreshness: Duration = .seconds(2)
    var poolCommandTimeout: Duration = .seconds(3)
    var lostCommandAge: Duration = .seconds(1)
    var commandRetention: Duration = .seconds(60)

    /// The defaults (checked by the tests: `ClusterTimingTests`).
    static let standard = ClusterTiming()

    struct Violation: Error, Equatable, CustomStringConvertible {
        let description: String
    }

    /// The relations the rules above need, each with why; the first one broken is thrown.
    func validated() throws(Violation) -> ClusterTiming {
        func require(_ holds: Bool, _ rule: String) throws(Violation) {
            if !holds { throw Violation(description: "cluster timing: \(rule)") }
        }
        try require(
            self.heartbeat > .zero && self.watchInterval > .zero,
            "the heartbeat and the watch interval must be positive"
        )
        try require(
            self.heartbeat < self.staleStop,
            "heartbeat < staleStop (one late heartbeat must not stop a server)"
        )
        try require(
            self.staleStop + self.watchInterval < self.lease,
            "staleStop + watchInterval < lease (a server stops acting before its jobs may be taken)"
        )
        try require(
            self.reconnectGrace >= self.lease,
            "reconnectGrace >= lease (after an outage every server gets a lease's time to renew)"
        )
        try require(
            self.relayTimeout > self.lease + self.heartbeat,
            "relayTimeout > lease + heartbeat (a relayed command outlives a takeover of its target)"
        )
        try require(
            self.poolCommandTimeout > self.claimFreshness,
            "poolCommandTimeout > claimFreshness (a claim applied in time is answered in time)"
        )
        try require(
            self.lostCommandAge >= self.heartbeat / 2 && self.lostCommandAge < self.relayTimeout,
            "heartbeat / 2 <= lostCommandAge < relayTimeout (a lost notification is made up before the wait ends)"
        )
        try require(
            self.commandRetention > self.relayTimeout,
            "commandRetention > relayTimeout (an answer is kept while someone may wait for it)"
        )
        return self
    }

    /// A shorter set for tests, every duration scaled by `factor` (0 < factor ≤ 1) from the
    /// standard's, so that the relations hold as they do there.
    static func scaled(_ factor: Double) -> ClusterTiming {
        func scale(_ duration: Duration) -> Duration { duration * factor }
        let standard = ClusterTiming.standard
        return ClusterTiming(
            lease: scale(standard.lease),
            heartbeat: scale(standard.heartbeat),
            staleStop: scale(standard.staleStop),
            watchInterval: scale(standard.watchInterval),
            reconnectGrace: scale(standard.reconnectGrace),
            relayTimeout: scale(standard.relayTimeout),
            claimFreshness: scale(standard.claimFreshness),
            poolCommandTimeout: scale(standard.poolCommandTimeout),
            lostCommandAge: scale(standard.lostCommandAge),
            commandRetention: scale(standard.commandRetention)
        )
    }
}
