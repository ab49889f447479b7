import CCurl
import Logging
import NIOCore
import Synchronization
import TaskCore
import TaskGraph
import Tracing

/// Claims due deliveries from the outbox, sends them, retries them, and reports every attempt.
///
/// - The dispatcher pulls: `wake()` — after a commit that stored deliveries, and at start-up —
///   claims from the `DeliveryStore` the pending deliveries that are due, as many as it has room
///   for (`maxHeld`); a timer wakes it when the next one falls due (a retry, or one due later
///   after a restart). So it only sends what is stored, holds a bounded number in memory, and has
///   the shape of a cluster node claiming deliveries (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
///   `wake()` only schedules work: cheap enough for a commit's completion. A delivery is held from
///   its claim until its attempt's outcome is stored (`update`, which releases the claim).
/// - Past `maxHeld` deliveries held (10,000), the rest wait in the outbox: a receiver that falls
///   that far behind delays the claiming of other endpoints' new deliveries until its own attempts
///   end (fairness below that is per endpoint, see below).
/// - An attempt is a signed `POST` (Standard Webhooks headers) that must be answered `2xx` within
///   `attemptTimeout` (10 s). Anything else is retried after `delayMs × backoff^(n-1)` (capped at
///   `maxDelayMs`, drawn from [d/2, d] with `jitter`) until `maxAttempts`; on `429`/`503` a longer
///   `Retry-After` (seconds or an HTTP date) is honoured; `410 Gone` fails the delivery at once.
///   Redirects are not followed.
/// - Fairness: at most `maxConcurrentPerEndpoint` attempts are in flight per endpoint
///   (scheme, host and port) and `maxConcurrent` in all; endpoints with waiting deliveries take
///   turns (round robin), so a slow or dead receiver holds only its own share of connections.
/// - Completions are handled on the dispatcher's own worker pool, never on the HTTP client's
///   thread, so a store that writes to disk in `update` does not stall other transfers.
/// - Delivery is at least once: deduplicate on `webhook-id`. Order is not guaranteed (attempts to
///   one endpoint run concurrently); `data.seq` tells the receiver the event's place.
public final class WebhookDispatcher: Sendable {
    /// Limits of a dispatcher.
    public struct Configuration: Sendable {
        /// How long an attempt may take (default 10 s, as SPEC §4 promises receivers).
        public var attemptTimeout: Duration
        /// Most attempts in flight to one endpoint (default 16).
        public var maxConcurrentPerEndpoint: Int
        /// Most attempts in flight in all (default 128).
        public var maxConcurrent: Int
        /// The longest `Retry-After` honoured (default one day).
        public var maxRetryAfter: Duration

        public init(
            attemptTimeout: Duration = .seconds(10),
            maxConcurrentPerEndpoint: Int = 16,
            maxConcurrent: Int = 128,
            maxRetryAfter: Duration = .seconds(86_400)
        ) {
            self.attemptTimeout = attemptTimeout
            self.maxConcurrentPerEndpoint = maxConcurrentPerEndpoint
            self.maxConcurrent = maxConcurrent
            self.maxRetryAfter = maxRetryAfter
        }
    }

    /// How one attempt ended, for metrics.
    public enum AttemptResult: String, Sendable, CaseIterable {
        /// Answered 2xx: delivered.
        case delivered
        /// Failed; another attempt is scheduled.
        case retrying
        /// Failed for good (attempts exhausted, or 410 Gone).
        case failed
    }

    private struct Endpoint {
        var queue = CircularBuffer<Delivery>()
        var active = 0
        var isInRotation = false
    }

    private struct State {
        var isShutdown = false
        var endpoints: [String: Endpoint] = [:]
        /// Endpoints with waiting deliveries and room for another attempt, in turn order.
        var rotation = CircularBuffer<String>()
        var active = 0
        var isPumpScheduled = false
        /// Deliveries claimed and not yet released (queued, in flight, or being stored).
        var held = 0
        var isClaiming = false
        /// A wake-up came while claiming, or while full: claim again when possible.
        var wantsClaim = false
        /// The timer of the next wake-up, with when it fires.
        var wakeTimer: (timer: ClockTimer, at: Timestamp)?
    }

    public let configuration: Configuration
    let client: CurlClient
    let store: any DeliveryStore
    /// The server's `--webhook-secret`, for deliveries that reference it.
    let serverSecret: String?
    let logger: Logger
    let onAttempt: @Sendable (AttemptResult) -> Void
    let clock: any ServerClock
    /// Deliveries held at most (queued or in flight).
    let maxHeld = 10_000
    private let state = Mutex(State())
    private let shutdownSource = CancellationTokenSource()
    /// Where completions and queue pumping run (not the client's thread, not the caller's).
    private let worker = WorkerPool(name: "webhooks", size: 2)
    /// Delivery spans (issue #46), when tracing is on.
    private let tracing: ServerTracing?

    /// - Parameters:
    ///   - serverSecret: the key of deliveries whose secret is `.serverDefault`.
    ///   - logger: a background-activity logger (no request metadata).
    ///   - onAttempt: called after every attempt (metrics); must be quick.
    public init(
        client: CurlClient,
        store: any DeliveryStore,
        serverSecret: String? = nil,
        configuration: Configuration = Configuration(),
        logger: Logger,
        clock: any ServerClock = SystemClock(),
        tracing: ServerTracing? = nil,
        onAttempt: @escaping @Sendable (AttemptResult) -> Void = { _ in }
    ) {
        self.tracing = tracing
        var configuration = configuration
        configuration.maxConcurrent = max(1, configuration.maxConcurrent)
        configuration.maxConcurrentPerEndpoint = max(1, configuration.maxConcurrentPerEndpoint)
        self.configuration = configuration
        self.client = client
        self.store = store
        self.serverSecret = serverSecret
        self.logger = logger
        self.clock = clock
        self.onAttempt = onAttempt
    }

    // MARK: - Entry points

    /// Claims the deliveries that are due from the store (now, on the dispatcher's thread): after
    /// a commit that stored some, and at start-up.
    public func wake() {
        let limit: Int? = self.state.withLock { state in
            guard !state.isShutdown else { return nil }
            let room = min(1000, self.maxHeld - state.held)
            if state.isClaiming || room <= 0 {
                state.wantsClaim = true
                return nil
            }
            state.isClaiming = true
            state.wantsClaim = false
            return room
        }
        guard let limit else { return }
        self.store.claimDue(at: self.clock.now(), limit: limit).whenComplete { outcome in
            self.worker.execute { self.claimed(outcome, limit: limit) }
        }
    }

    private func claimed(_ outcome: Outcome<(deliveries: [Delivery], next: Timestamp?)>, limit: Int) {
        guard let (deliveries, next) = outcome.value else {
            self.logger.error("cannot claim due webhook deliveries; trying again in a second")
            self.state.withLock { $0.isClaiming = false }
            self.wake(at: Timestamp(milliseconds: self.clock.now().milliseconds + 1000))
            return
        }
        let (pump, again): (Bool, Bool) = self.state.withLock { state in
            state.isClaiming = false
            guard !state.isShutdown else { return (false, false) }
            for delivery in deliveries {
                state.held += 1
                Self.enqueue(
                    delivery,
                    endpointKey: Self.endpointKey(delivery.url),
                    in: &state,
                    perEndpoint: self.configuration.maxConcurrentPerEndpoint
                )
            }
            // A full claim may have left more behind.
            if deliveries.count == limit { state.wantsClaim = true }
            let again = state.wantsClaim && state.held < self.maxHeld
            if again { state.wantsClaim = false }
            return (self.needsPump(&state), again)
        }
        if let next { self.wake(at: next) }
        if pump { self.pump() }
        if again { self.wake() }
    }

    /// Arms the wake-up timer for `time`, unless one fires sooner.
    private func wake(at time: Timestamp) {
        let delay = Duration.milliseconds(max(0, time.milliseconds - self.clock.now().milliseconds))
        let replaced: ClockTimer?? = self.state.withLock { state in
            guard !state.isShutdown else { return .none }
            if let current = state.wakeTimer, current.at <= time { return .none }
            let previous = state.wakeTimer?.timer
            let timer = self.clock.schedule(after: delay) { [weak self] in
                guard let self else { return }
                self.state.withLock { $0.wakeTimer = nil }
                self.worker.execute { self.wake() }
            }
            state.wakeTimer = (timer, time)
            return .some(previous)
        }
        if case .some(.some(let previous)) = replaced { self.clock.cancel(previous) }
    }

    /// Stops: no new attempts, attempts in flight are aborted (their deliveries stay `pending` in
    /// the store, to be sent by the next process), the worker threads exit.
    public func shutdown() {
        let timer: ClockTimer? = self.state.withLock { state in
            state.isShutdown = true
            state.endpoints = [:]
            state.rotation = CircularBuffer()
            defer { state.wakeTimer = nil }
            return state.wakeTimer?.timer
        }
        if let timer { self.clock.cancel(timer) }
        self.shutdownSource.cancel()
        self.worker.shutdown()
    }

    /// Attempts in flight, deliveries waiting for a turn (due now), and all deliveries held — for
    /// tests and metrics.
    public var counts: (active: Int, queued: Int, held: Int) {
        self.state.withLock { state in
            (state.active, state.endpoints.values.reduce(0) { $0 + $1.queue.count }, state.held)
        }
    }

    // MARK: - Queueing

    private static func enqueue(_ delivery: Delivery, endpointKey key: String, in state: inout State, perEndpoint: Int)
    {
        // Moved out of the dictionary (not copied), so the queue's storage stays uniquely
        // referenced and grows in place: a copy here made every enqueue O(queue length).
        var endpoint = state.endpoints.removeValue(forKey: key) ?? Endpoint()
        endpoint.queue.append(delivery)
        if !endpoint.isInRotation, endpoint.active < perEndpoint {
            endpoint.isInRotation = true
            state.rotation.append(key)
        }
        state.endpoints[key] = endpoint
    }

    /// Whether a pump should be scheduled (and marks it scheduled).
    private func needsPump(_ state: inout State) -> Bool {
        guard !state.isPumpScheduled, !state.rotation.isEmpty, state.active < self.configuration.maxConcurrent else {
            return false
        }
        state.isPumpScheduled = true
        return true
    }

    /// Starts attempts while there is room, one endpoint at a time in turn.
    private func pump() {
        let perEndpoint = self.configuration.maxConcurrentPerEndpoint
        let starting: [Delivery] = self.state.withLock { state in
            state.isPumpScheduled = false
            var starting: [Delivery] = []
            while state.active < self.configuration.maxConcurrent, let key = state.rotation.popFirst() {
                // Invariant: an endpoint is in the rotation (once) only while it has waiting
                // deliveries and room for another attempt; the guard only defends it.
                guard var endpoint = state.endpoints.removeValue(forKey: key) else { continue }  // moved, see `enqueue`
                guard endpoint.active < perEndpoint, let delivery = endpoint.queue.popFirst() else {
                    endpoint.isInRotation = false
                    state.endpoints[key] = endpoint
                    continue
                }
                endpoint.active += 1
                state.active += 1
                if !endpoint.queue.isEmpty, endpoint.active < perEndpoint {
                    state.rotation.append(key)
                } else {
                    endpoint.isInRotation = false
                }
                state.endpoints[key] = endpoint
                starting.append(delivery)
            }
            return starting
        }
        for delivery in starting { self.attempt(delivery) }
    }

    /// Gives back the attempt's slot of its endpoint.
    private func release(endpointKey key: String) {
        let pump: Bool = self.state.withLock { state in
            state.active -= 1
            if var endpoint = state.endpoints.removeValue(forKey: key) {  // moved, see `enqueue`
                endpoint.active -= 1
                if endpoint.active > 0 || !endpoint.queue.isEmpty {
                    if !endpoint.isInRotation, !endpoint.queue.isEmpty,
                        endpoint.active < self.configuration.maxConcurrentPerEndpoint
                    {
                        endpoint.isInRotation = true
                        state.rotation.append(key)
                    }
                    state.endpoints[key] = endpoint
                }
            }
            return self.needsPump(&state)
        }
        if pump { self.pump() }
    }

    /// The outcome of an attempt is stored and the delivery's claim released: with another attempt
    /// to come, the dispatcher wakes when that falls due.
    private func release(_ delivery: Delivery) {
        let wake: Bool = self.state.withLock { state in
            state.held -= 1
            guard state.wantsClaim, !state.isShutdown else { return false }
            state.wantsClaim = false
            return true
        }
        if delivery.state == .pending { self.wake(at: delivery.nextAttemptAt) }
        if wake { self.wake() }
    }

    // MARK: - Attempts

    /// The headers of one attempt: Standard Webhooks headers (signed when there is a key), then the
    /// webhook's own headers.
    func headers(for delivery: Delivery, timestamp: Int64) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = [
            ("Content-Type", "application/json"),
            ("webhook-id", delivery.id),
            ("webhook-timestamp", String(timestamp)),
        ]
        let secret: String?
        switch delivery.secret {
        case .none: secret = nil
        case .literal(let text): secret = text
        case .serverDefault: secret = self.serverSecret
        }
        if let secret, let key = WebhookSignature.key(fromSecret: secret), !key.isEmpty {
            headers.append(
                (
                    "webhook-signature",
                    WebhookSignature.sign(id: delivery.id, timestamp: timestamp, body: delivery.body, key: key)
                )
            )
        }
        for name in delivery.headers.keys.sorted() { headers.append((name, delivery.headers[name]!)) }
        return headers
    }

    private func attempt(_ delivery: Delivery) {
        let key = Self.endpointKey(delivery.url)
        let startedAt = self.clock.now()
        let start = monotonicNanoseconds()
        var request = OutboundRequest(
            method: "POST",
            url: delivery.url,
            headers: self.headers(for: delivery, timestamp: startedAt.milliseconds / 1000),
            body: delivery.body,
            timeout: self.configuration.attemptTimeout,
            followRedirects: false,
            maxResponseBytes: 1 << 20
        )
        let span = self.tracing.flatMap { tracing in self.startSpan(tracing, for: delivery, &request) }
        let tracing = self.tracing
        self.client.send(request, cancellationToken: self.shutdownSource.token).whenComplete { outcome in
            if let span { tracing?.endClientSpan(span, outcome) }
            let durationMs = Int((monotonicNanoseconds() - start) / 1_000_000)
            self.worker.execute {
                self.finish(delivery, outcome, startedAt: startedAt, durationMs: durationMs)
                self.release(endpointKey: key)
            }
        }
    }

    /// A span for this attempt under the job's (whose context the planner put in the delivery's
    /// headers), and its `traceparent` in place of the job's.
    private func startSpan(
        _ tracing: ServerTracing,
        for delivery: Delivery,
        _ request: inout OutboundRequest
    )
        -> OTLPSpan?
    {
        guard let traceparent = delivery.headers["traceparent"],
            let job = SpanContext(traceparent: traceparent, tracestate: delivery.headers["tracestate"])
        else { return nil }
        request.headers.removeAll { $0.name == "traceparent" || $0.name == "tracestate" }
        let span = tracing.startClientSpan(
            &request,
            under: job,
            name: "webhook " + delivery.eventType.rawValue
        )
        span.update { attributes in
            attributes.set("taskserver.job.id", delivery.jobID)
            attributes.set("taskserver.webhook.event", delivery.eventType.rawValue)
            attributes.set("taskserver.webhook.attempt", Int64(delivery.attempts.count + 1))
        }
        return span
    }

    private func finish(
        _ delivery: Delivery,
        _ outcome: Outcome<OutboundResponse>,
        startedAt: Timestamp,
        durationMs: Int
    ) {
        var delivery = delivery
        var attempt = DeliveryAttempt(at: startedAt, durationMs: durationMs)
        var retryAfter: Duration?
        var isGone = false
        switch outcome {
        case .cancelled:
            return  // shut down mid-attempt: the delivery stays pending (and unclaimed) in the store
        case .success(let response):
            attempt.status = response.status
            if (200...299).contains(response.status) {
                delivery.state = .delivered
            } else if response.status == 410 {
                isGone = true
            } else if response.status == 429 || response.status == 503 {
                retryAfter = Self.retryAfter(response.header("retry-after")).map {
                    min($0, self.configuration.maxRetryAfter)
                }
            }
        case .failure(let error):
            attempt.error = (error as? OutboundError)?.message ?? "\(error)"
        }
        delivery.attempts.append(attempt)
        let result: AttemptResult
        if delivery.state == .delivered {
            result = .delivered
        } else if isGone || delivery.attempts.count >= delivery.retry.maxAttempts {
            delivery.state = .failed
            result = .failed
        } else {
            var delay = Self.backoff(after: delivery.attempts.count, retry: delivery.retry)
            if let retryAfter, retryAfter > delay { delay = retryAfter }
            delivery.nextAttemptAt = Timestamp(milliseconds: self.clock.now().milliseconds + delay.wholeMilliseconds)
            result = .retrying
        }
        let stored = delivery
        self.store.update(delivery).whenComplete { _ in self.worker.execute { self.release(stored) } }
        self.onAttempt(result)
        switch result {
        case .delivered:
            self.logger.trace(
                "webhook delivered",
                metadata: ["webhook.id": "\(delivery.id)", "job.id": "\(delivery.jobID)"]
            )
        case .retrying:
            self.logger.debug(
                "webhook attempt failed; will retry",
                metadata: [
                    "webhook.id": "\(delivery.id)", "job.id": "\(delivery.jobID)",
                    "webhook.attempt": "\(delivery.attempts.count)",
                    "webhook.status": "\(attempt.status.map(String.init) ?? "-")",
                    "webhook.error": "\(attempt.error ?? "-")",
                ]
            )
        case .failed:
            self.logger.notice(
                "webhook delivery failed for good",
                metadata: [
                    "webhook.id": "\(delivery.id)", "job.id": "\(delivery.jobID)",
                    "webhook.attempts": "\(delivery.attempts.count)",
                    "webhook.status": "\(attempt.status.map(String.init) ?? "-")",
                    "webhook.error": "\(attempt.error ?? "-")",
                ]
            )
        }
    }

    // MARK: - Policies

    /// The pause before the attempt after attempt `n` (1-based): `delayMs × backoff^(n-1)`, capped
    /// at `maxDelayMs`; with `jitter`, drawn uniformly from [d/2, d].
    static func backoff(after attempts: Int, retry: RetrySpec) -> Duration {
        var delay = Double(retry.delayMs)
        for _ in 1..<max(1, attempts) {
            delay *= retry.backoff
            if delay > 86_400_000 { break }
        }
        if let cap = retry.maxDelayMs { delay = min(delay, Double(cap)) }
        delay = min(delay, 86_400_000)
        if retry.jitter, delay > 0 { delay = Double.random(in: (delay / 2)...delay) }
        return .milliseconds(Int64(delay))
    }

    /// A `Retry-After` value: delay-seconds, or an HTTP date (parsed by libcurl's `curl_getdate`).
    static func retryAfter(_ value: String?) -> Duration? {
        guard let value = value?.trimmingCharacters(), !value.isEmpty else { return nil }
        if value.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            guard let seconds = Int64(value.prefix(12)) else { return nil }
            return .seconds(seconds)
        }
        let date = curl_getdate(value, nil)
        guard date > 0 else { return nil }
        let seconds = Int64(date) - Timestamp.now().milliseconds / 1000
        return .seconds(max(0, seconds))
    }

    /// Deliveries are grouped by endpoint: lowercased scheme, host and port of the URL.
    static func endpointKey(_ url: String) -> String {
        OutboundURL(url)?.origin ?? url
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs.
    func trimmingCharacters() -> String {
        String(Substring(self).trimmingSpaces)
    }
}
