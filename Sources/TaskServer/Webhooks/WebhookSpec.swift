import TaskGraph

/// A job's `webhook` object (SPEC §4), validated.
public struct WebhookSpec: Sendable, Equatable {
    public var url: String
    public var secret: String?
    /// Event-type patterns (`job.*`, `task.failed`); default `["job.*"]`.
    public var events: [String]
    public var headers: [String: String]
    public var retry: RetrySpec

    public init(
        url: String,
        secret: String? = nil,
        events: [String] = ["job.*"],
        headers: [String: String] = [:],
        retry: RetrySpec = RetrySpec(maxAttempts: 8, delayMs: 500, backoff: 2, maxDelayMs: 60_000, jitter: true)
    ) {
        self.url = url
        self.secret = secret
        self.events = events
        self.headers = headers
        self.retry = retry
    }

    /// Whether an event of `type` matches one of `events` (a `*` suffix matches a prefix).
    public func wants(_ type: String) -> Bool {
        for pattern in self.events {
            if pattern == "*" || pattern == type { return true }
            if pattern.hasSuffix("*"), type.hasPrefix(pattern.dropLast()) { return true }
        }
        return false
    }
}
