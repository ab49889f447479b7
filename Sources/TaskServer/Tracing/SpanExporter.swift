import Logging
import NIOCore
import Synchronization
import TaskCore

/// Sends ended spans to the collector as OTLP/HTTP (protobuf), in batches, from a bounded queue.
///
/// Nothing a job does waits for it: `add` copies the span's bytes into the batch they will be sent
/// in, under a lock, or — the queue full — drops the span and counts it
/// (`taskserver_spans_dropped_total`). (A batch is one buffer, so the thread that ended a span
/// frees what it allocated, and the exporter frees one buffer per batch, not one per span.) One export is in flight at a time, on
/// its own libcurl client (the `http` tasks' address policy does not apply to the operator's
/// collector); a batch the collector refuses, answers with an error or does not answer within the
/// export timeout is dropped and counted, not retried, so a collector that is down, slow or
/// refusing costs the queue's memory at most. One warning is logged when spans start to be dropped,
/// and one notice when an export succeeds again (with how many were dropped in between).
final class SpanExporter: Sendable {
    struct Counters: Sendable {
        var onExported: @Sendable (Int) -> Void = { _ in }
        var onDropped: @Sendable (Int) -> Void = { _ in }
    }

    private let configuration: TracingConfiguration
    private let encoding: OTLPEncoding
    private let client: CurlClient
    private let logger: Logger
    private let counters: Counters
    private let state = Mutex(State())
    /// Where batches are encoded and sent: never on the event loop whose span filled a batch.
    private let worker = WorkerPool(name: "otlp-export", size: 1)

    /// Spans of one export request, as `ScopeSpans.spans` fields.
    struct Batch {
        var spans = ProtobufWriter()
        var count = 0

        /// Appends a span as a `ScopeSpans.spans` (2) field.
        mutating func add(_ span: [UInt8]) {
            self.spans.bytes(2, span)
            self.count += 1
        }
    }

    private struct State {
        /// Full batches waiting to be sent, and the one filling (a stored property, so that a span
        /// is appended in place: through a collection's subscript the batch's buffer would be
        /// copied at every span); `queued` spans in all.
        var full = CircularBuffer<Batch>()
        var filling = Batch()
        var queued = 0
        var exporting = false
        var stopped = false
        var timer: TimerQueue.ID?
        /// Spans dropped since the last export that succeeded; whether that was warned about.
        var droppedInEpisode = 0
        var warned = false
        /// Waiters of `flush`, completed once the queue is empty and no export is in flight.
        var flushWaiters: [Promise<Void>] = []
        var exported = 0
        var dropped = 0
    }

    init(configuration: TracingConfiguration, logger: Logger, counters: Counters = Counters()) {
        self.configuration = configuration
        self.encoding = OTLPEncoding(configuration: configuration)
        self.client = CurlClient(
            configuration: CurlClient.Configuration(
                maxConcurrentTransfers: 1,
                maxResponseBytes: 64 << 10,
                policy: .unrestricted
            )
        )
        self.logger = logger
        self.counters = counters
        self.scheduleTick()
    }

    /// Spans exported and dropped so far.
    var statistics: (exported: Int, dropped: Int, queued: Int) {
        self.state.withLock { ($0.exported, $0.dropped, $0.queued) }
    }

    /// Queues an ended span (the body of its `Span` message); drops it (counted) when the queue
    /// is full.
    func add(_ span: [UInt8]) {
        let (queued, startNow, warn): (Bool, Bool, Bool) = self.state.withLock { state in
            if state.stopped || state.queued >= self.configuration.maxQueueSize {
                state.dropped += 1
                state.droppedInEpisode += 1
                defer { state.warned = true }
                return (false, false, !state.warned)
            }
            if state.filling.count == 0 {
                // Room for a batch of spans like this one (grown if they are bigger), in one buffer.
                let capacity = min(self.configuration.maxBatchSize * (span.count + 16), 4 << 20)
                state.filling.spans.bytes.reserveCapacity(capacity)
            }
            state.filling.add(span)
            state.queued += 1
            if state.filling.count >= self.configuration.maxBatchSize {
                state.full.append(state.filling)
                state.filling = Batch()
            }
            return (true, !state.exporting && !state.full.isEmpty, false)
        }
        if !queued {
            self.counters.onDropped(1)
            if warn { self.warnDropping("the export queue is full (\(self.configuration.maxQueueSize) spans)") }
        } else if startNow {
            self.worker.execute { self.exportNext() }
        }
    }

    /// Completes once every span queued so far was exported (or dropped).
    func flush() -> Future<Void> {
        let promise = Promise<Void>()
        let idle = self.state.withLock { state in
            if state.queued == 0 && !state.exporting { return true }
            state.flushWaiters.append(promise)
            return false
        }
        if idle { return Future(value: ()) }
        self.worker.execute { self.exportNext() }
        return promise.future
    }

    /// Exports what is queued (waiting at most `timeout`), then stops: later spans are dropped.
    func shutdown(timeout: Duration) async {
        let flushed = self.flush()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { _ = try? await flushed.value }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
        let tick = self.state.withLock { state in
            state.stopped = true
            defer { state.timer = nil }
            return state.timer
        }
        if let tick { _ = TimerQueue.shared.cancel(tick) }
        self.client.shutdown()
        self.worker.shutdown()
    }

    // MARK: - Exporting

    /// The periodic export of a partial batch (`OTEL_BSP_SCHEDULE_DELAY`).
    private func scheduleTick() {
        let id = TimerQueue.shared.schedule(after: self.configuration.scheduleDelay) { [weak self] in
            guard let self else { return }
            self.worker.execute { self.exportNext() }
            let stopped = self.state.withLock { $0.stopped }
            if !stopped { self.scheduleTick() }
        }
        self.state.withLock { $0.timer = id }
    }

    /// Sends the next batch unless one is in flight or nothing is queued.
    private func exportNext() {
        let (batch, waiters): (Batch?, [Promise<Void>]) = self.state.withLock { state in
            if state.exporting { return (nil, []) }
            let batch: Batch
            if let first = state.full.popFirst() {
                batch = first
            } else if state.filling.count > 0 {
                batch = state.filling
                state.filling = Batch()
            } else {
                defer { state.flushWaiters = [] }
                return (nil, state.flushWaiters)
            }
            state.queued -= batch.count
            state.exporting = true
            return (batch, [])
        }
        for waiter in waiters { waiter.trySucceed(()) }
        guard let batch else { return }
        var headers: [(name: String, value: String)] = [("content-type", "application/x-protobuf")]
        headers += self.configuration.headers
        let request = OutboundRequest(
            method: "POST",
            url: self.configuration.tracesURL,
            headers: headers,
            body: self.encoding.request(batch.spans.bytes),
            timeout: self.configuration.exportTimeout
        )
        self.client.send(request).whenComplete { outcome in
            switch outcome {
            case .success(let response) where (200..<300).contains(response.status):
                self.exported(batch.count)
            case .success(let response):
                self.failed(batch.count, "the collector answered \(response.status)")
            case .failure(let error as OutboundError):
                self.failed(batch.count, "the export failed (\(error.kind))")
            case .failure(let error):
                self.failed(batch.count, "the export failed (\(type(of: error)))")
            case .cancelled:
                self.failed(batch.count, "the export was cancelled")
            }
            self.state.withLock { $0.exporting = false }
            let more = self.state.withLock { state in
                !state.full.isEmpty || !state.flushWaiters.isEmpty
            }
            if more { self.worker.execute { self.exportNext() } }
        }
    }

    private func exported(_ count: Int) {
        let recovered: Int? = self.state.withLock { state in
            state.exported += count
            defer {
                state.droppedInEpisode = 0
                state.warned = false
            }
            return state.warned ? state.droppedInEpisode : nil
        }
        self.counters.onExported(count)
        if let recovered {
            self.logger.notice("span export works again", metadata: ["spans.dropped": "\(recovered)"])
        }
    }

    private func failed(_ count: Int, _ reason: String) {
        let warn = self.state.withLock { state in
            state.dropped += count
            state.droppedInEpisode += count
            defer { state.warned = true }
            return !state.warned
        }
        self.counters.onDropped(count)
        if warn { self.warnDropping(reason) }
    }

    /// The episode's one warning. Never the URL's query or the export headers (they may hold keys).
    private func warnDropping(_ reason: String) {
        self.logger.warning(
            "spans are being dropped: \(reason); jobs are not affected",
            metadata: ["otlp.endpoint": "\(OutboundURL(self.configuration.tracesURL)?.origin ?? "?")"]
        )
    }
}
