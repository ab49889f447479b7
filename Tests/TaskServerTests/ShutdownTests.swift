import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Stopping within the grace period (SPEC §5): requests in flight finish, hanging ones are cut at
/// the deadline. scripts/check-lifecycle.py checks the same with signals and the real binary.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ShutdownTests {
    static let slowJob = jsonValue(
        #"{"graph": {"type": "task", "id": "slow", "action": "delay", "params": {"ms": 60000}}}"#
    )

    /// Waits until the server holds `count` requests in flight.
    static func waitForRequestsInFlight(_ app: Application, _ count: Int) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: TestTiming.scaled(.seconds(10)))
        while app.requestsInFlight < count {
            #expect(clock.now < deadline, "no request in flight")
            if clock.now >= deadline { return }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test func aLongPollInFlightIsAnsweredBeforeTheServerStops() async throws {
        let server = try await TestServer.start()
        let id = try await server.submitID(Self.slowJob)
        // Long enough that the drain has surely begun when it ends, even on a loaded machine (with
        // 700 ms the answer once came before shutdown started, without `connection: close`), and
        // that the wait below sees it in flight even when a slow run (TSan) schedules that wait late.
        async let poll = server.get("/v1/jobs/\(id)?waitMs=\(TestTiming.ms(3000))")
        try await Self.waitForRequestsInFlight(server.app, 1)
        let clock = ContinuousClock()
        let start = clock.now
        await server.app.shutdown(gracePeriod: .seconds(30))
        let elapsed = clock.now - start
        let response = try await poll
        #expect(response.status == 200)
        #expect(response.json["state"] == "running")
        #expect(response.header("connection") == "close")
        // It stopped when the long-poll ended, not at the end of the grace period.
        #expect(elapsed < TestTiming.scaled(.seconds(10)))
        #expect(server.app.requestsInFlight == 0)
    }

    @Test func aHangingRequestIsCutAtTheEndOfTheGracePeriod() async throws {
        let server = try await TestServer.start()
        let id = try await server.submitID(Self.slowJob)
        async let poll: HTTPResponse? = try? server.get("/v1/jobs/\(id)?waitMs=60000")
        try await Self.waitForRequestsInFlight(server.app, 1)
        let clock = ContinuousClock()
        let start = clock.now
        await server.app.shutdown(gracePeriod: .milliseconds(300))
        let elapsed = clock.now - start
        #expect(elapsed >= .milliseconds(300))
        #expect(elapsed < TestTiming.scaled(.seconds(10)))
        // The connection was closed without an answer.
        #expect(await poll == nil)
    }

    @Test func aServerWithNothingInFlightStopsAtOnce() async throws {
        let server = try await TestServer.start()
        #expect(try await server.isHealthy())
        let clock = ContinuousClock()
        let start = clock.now
        await server.app.shutdown(gracePeriod: .seconds(30))
        #expect(clock.now - start < TestTiming.scaled(.seconds(5)))
    }
}
