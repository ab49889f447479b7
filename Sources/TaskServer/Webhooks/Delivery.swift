import TaskGraph

/// One event to be sent to one webhook endpoint (SPEC §4) — a row of the outbox.
///
/// It carries everything needed to send it, or to resume it after a restart from a stored copy:
/// the exact body bytes (signed as they are), the endpoint and its extra headers, how to find the
/// signing secret, the retry policy, and every attempt so far. Only the `webhook-timestamp` and
/// the signature are computed per attempt.
public struct Delivery: Sendable, Equatable {
    /// The `webhook-id`: unique per event and endpoint, the same on every attempt, and derived
    /// from job id, seq and endpoint only, so planning the same event again yields the same id.
    public var id: String
    public var jobID: String
    /// The event's `seq` in the job's history.
    public var seq: Int
    public var eventType: JobEventType
    public var url: String
    /// Extra headers of the webhook (never the `webhook-*` or `content-type` headers).
    public var headers: [String: String]
    /// Where the signing key comes from.
    public var secret: SecretReference
    /// The JSON payload exactly as it is sent and signed.
    public var body: [UInt8]
    public var state: DeliveryState
    /// Attempts so far, oldest first.
    public var attempts: [DeliveryAttempt]
    /// When the next attempt is due (meaningful while `pending`).
    public var nextAttemptAt: Timestamp
    /// `maxAttempts`, `delayMs`, `backoff`, `maxDelayMs`, `jitter` (its `on` is unused).
    public var retry: RetrySpec
    public var createdAt: Timestamp

    public init(
        id: String,
        jobID: String,
        seq: Int,
        eventType: JobEventType,
        url: String,
        headers: [String: String] = [:],
        secret: SecretReference = .none,
        body: [UInt8],
        state: DeliveryState = .pending,
        attempts: [DeliveryAttempt] = [],
        nextAttemptAt: Timestamp,
        retry: RetrySpec,
        createdAt: Timestamp
    ) {
        self.id = id
        self.jobID = jobID
        self.seq = seq
        self.eventType = eventType
        self.url = url
        self.headers = headers
        self.secret = secret
        self.body = body
        self.state = state
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.retry = retry
        self.createdAt = createdAt
    }

    /// The delivery as `GET /v1/jobs/{id}/deliveries` shows it (no body, no secret).
    public var json: JSONValue {
        [
            "id": .string(self.id),
            "eventType": .string(self.eventType.rawValue),
            "url": .string(OutboundURL(self.url)?.redacted ?? self.url),  // credentials stay private
            "state": .string(self.state.rawValue),
            "attempts": .array(self.attempts.map(\.json)),
        ]
    }
}

/// Where a delivery's signing key comes from.
public enum SecretReference: Sendable, Equatable {
    /// Unsigned (no `webhook-signature` header).
    case none
    /// The job's own `webhook.secret` (stored with the delivery, like the job spec that holds it).
    case literal(String)
    /// The server's `--webhook-secret` as configured when the attempt is made (never stored, so a
    /// rotated secret applies to pending deliveries after a restart).
    case serverDefault

    /// A compact text form for storage: `none`, `server`, or `literal:<secret>`.
    public var storageText: String {
        switch self {
        case .none: return "none"
        case .serverDefault: return "server"
        case .literal(let secret): return "literal:" + secret
        }
    }

    /// The reference stored as `storageText`; nil for unknown text.
    public init?(storageText: String) {
        switch storageText {
        case "none": self = .none
        case "server": self = .serverDefault
        default:
            guard storageText.hasPrefix("literal:") else { return nil }
            self = .literal(String(storageText.dropFirst(8)))
        }
    }
}

/// A delivery's state (SPEC §4).
public enum DeliveryState: String, Sendable, CaseIterable {
    /// Not yet delivered; an attempt is due at `nextAttemptAt`.
    case pending
    /// An attempt was answered 2xx.
    case delivered
    /// Attempts exhausted, or the endpoint answered 410 Gone.
    case failed
}

/// One attempt to deliver.
public struct DeliveryAttempt: Sendable, Equatable {
    /// When the attempt started.
    public var at: Timestamp
    /// The endpoint's status, when it answered.
    public var status: Int?
    /// Why the attempt failed without a status (connect, timeout, refused address, …).
    public var error: String?
    public var durationMs: Int

    public init(at: Timestamp, status: Int? = nil, error: String? = nil, durationMs: Int) {
        self.at = at
        self.status = status
        self.error = error
        self.durationMs = durationMs
    }

    public var json: JSONValue {
        var object = JSONObject()
        object["at"] = .string(self.at.rfc3339)
        if let status { object["status"] = .int(status) }
        if let error { object["error"] = .string(error) }
        object["durationMs"] = .int(self.durationMs)
        return .object(object)
    }
}
