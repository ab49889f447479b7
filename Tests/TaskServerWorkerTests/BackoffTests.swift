import Testing

@testable import TaskServerWorker

/// Retry delays.
struct BackoffTests {
    @Test func delaysDoubleFrom100msTo5sWithJitterAndHonourRetryAfter() {
        var backoff = Backoff()
        for base in [100, 200, 400, 800, 1600, 3200, 5000, 5000] {
            let delay = backoff.next()
            #expect(delay >= .milliseconds(base) * 0.8 && delay <= .milliseconds(base) * 1.2, "\(delay) for \(base)")
        }
        #expect(backoff.next(retryAfter: .seconds(30)) == .seconds(30))
        backoff.reset()
        #expect(backoff.next() <= .milliseconds(120))
    }
}
