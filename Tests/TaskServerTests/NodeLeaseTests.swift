import TestSupport
import Testing

@testable import TaskServer

/// The node lease's rules (SPEC §9), on hand-moved time: expiry, the stale stop, the reconnect
/// grace, and registering again only after a flush — no database, no sleeping.
@Suite struct NodeLeaseTests {
    let clock = ManualClock()
    let timing = ClusterTiming.standard

    func lease() -> NodeLease { NodeLease(timing: self.timing, registeredAt: self.clock.monotonicNanoseconds()) }

    var now: UInt64 { self.clock.monotonicNanoseconds() }

    @Test func aRenewedLeaseActsAndNeverExpires() {
        var lease = self.lease()
        for _ in 0..<20 {
            self.clock.advance(by: self.timing.heartbeat)
            #expect(lease.renewal(renewed: true, sentAt: self.now).isEmpty)
            #expect(lease.tick(now: self.now).isEmpty)
        }
        #expect(lease.isActing)
        #expect(!lease.isExpired(at: self.now))
    }

    @Test func aLeaseNotRenewedStopsActingOnceBeforeItExpires() {
        var lease = self.lease()
        self.clock.advance(by: self.timing.staleStop)
        #expect(lease.tick(now: self.now).isEmpty, "not past the stale stop yet")
        self.clock.advance(by: .milliseconds(1))
        #expect(lease.tick(now: self.now) == [.stopActing(.stale)])
        #expect(!lease.isExpired(at: self.now), "stopped before anyone may take the jobs")
        self.clock.advance(by: self.timing.watchInterval)
        #expect(lease.tick(now: self.now).isEmpty, "stops once")
        #expect(!lease.isExpired(at: self.now), "a watch interval later, still before the lease ends")
        self.clock.advance(by: self.timing.lease - self.timing.staleStop - self.timing.watchInterval)
        #expect(lease.isExpired(at: self.now))
        #expect(lease.phase == .stopped(.stale))
    }

    @Test func aStoppedLeaseFlushesThenRegistersThenClaims() {
        var lease = self.lease()
        self.clock.advance(by: .seconds(4))
        #expect(lease.tick(now: self.now) == [.stopActing(.stale)])
        // The row is still this server's (nobody took over): it registers again all the same, once
        // the given-up runs' writes are out.
        #expect(lease.renewal(renewed: true, sentAt: self.now) == [.flush])
        // The writer away: no registration yet; the next beat tries again.
        #expect(lease.flushFinished(done: false).isEmpty)
        #expect(!lease.isActing)
        self.clock.advance(by: self.timing.heartbeat)
        #expect(lease.renewal(renewed: true, sentAt: self.now) == [.flush])
        #expect(lease.flushFinished(done: true) == [.register])
        #expect(!lease.isActing, "acting only once registered")
        #expect(lease.registered(sentAt: self.now) == [.claimOwnerless])
        #expect(lease.isActing)
        self.clock.advance(by: self.timing.staleStop)
        #expect(lease.tick(now: self.now).isEmpty, "the registration renewed it")
    }

    @Test func aRegistrationWhoseFlushWasDoneWaitsForNoOtherFlush() {
        var lease = self.lease()
        #expect(lease.renewal(renewed: false, sentAt: self.now) == [.stopActing(.takenOver), .flush])
        #expect(lease.flushFinished(done: true) == [.register])
        // The registration failed (a statement error): the next beat registers without flushing.
        #expect(lease.renewal(renewed: false, sentAt: self.now) == [.register])
        #expect(lease.registered(sentAt: self.now) == [.claimOwnerless])
    }

    @Test func aRefusedCommitStopsAtOnceAndRegistersAgain() {
        var lease = self.lease()
        #expect(lease.commitFenced() == [.stopActing(.fenced)])
        #expect(lease.commitFenced().isEmpty, "stopped once")
        #expect(lease.fenced)
        // The row renews under the old token (a late commit of a predecessor's), yet the fence
        // said no: it registers again.
        #expect(lease.renewal(renewed: true, sentAt: self.now) == [.flush])
        #expect(lease.flushFinished(done: true) == [.register])
        #expect(lease.registered(sentAt: self.now) == [.claimOwnerless])
        #expect(!lease.fenced)
    }

    @Test func aRenewalSentBeforeAStallDoesNotRestartAStoppedLease() {
        var lease = self.lease()
        let sent = self.now
        self.clock.advance(by: .seconds(4))  // the process stalled while the renewal was on its way
        #expect(lease.tick(now: self.now) == [.stopActing(.stale)])
        #expect(lease.renewal(renewed: true, sentAt: sent) == [.flush], "stopped stays stopped")
        #expect(!lease.isActing)
    }

    @Test func reapingWaitsALeaseAfterEachConnection() {
        var lease = self.lease()
        #expect(!lease.mayReap(at: self.now), "not connected")
        lease.connected(now: self.now)
        self.clock.advance(by: self.timing.reconnectGrace - .milliseconds(1))
        #expect(!lease.mayReap(at: self.now), "the others get a lease's time to renew")
        self.clock.advance(by: .milliseconds(1))
        #expect(lease.mayReap(at: self.now))
        lease.disconnected()
        #expect(!lease.mayReap(at: self.now))
        lease.connected(now: self.now)
        #expect(!lease.mayReap(at: self.now), "the grace starts again")
        #expect(lease.reaped(0).isEmpty)
        #expect(lease.reaped(2) == [.claimOwnerless])
    }

    @Test func theStandardTimingAndScaledOnesKeepTheirRelations() throws {
        _ = try ClusterTiming.standard.validated()
        for factor in [1.0, 0.5, 0.2, 0.1] { _ = try ClusterTiming.scaled(factor).validated() }
    }

    @Test func timingsThatBreakARuleAreRefusedNamingIt() {
        var late = ClusterTiming.standard
        late.staleStop = .seconds(5)
        #expect(throws: ClusterTiming.Violation.self) { try late.validated() }
        #expect(Self.violation(late).contains("staleStop + watchInterval < lease"))
        var shortRelay = ClusterTiming.standard
        shortRelay.relayTimeout = .seconds(6)
        #expect(Self.violation(shortRelay).contains("relayTimeout > lease + heartbeat"))
        var quickReap = ClusterTiming.standard
        quickReap.reconnectGrace = .seconds(1)
        #expect(Self.violation(quickReap).contains("reconnectGrace >= lease"))
        var slowBeat = ClusterTiming.standard
        slowBeat.heartbeat = .seconds(4)
        #expect(Self.violation(slowBeat).contains("heartbeat < staleStop"))
    }

    static func violation(_ timing: ClusterTiming) -> String {
        do {
            _ = try timing.validated()
            return ""
        } catch {
            return error.description
        }
    }
}
