import CCurl
import Synchronization
import TaskCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An HTTP client on libcurl's multi interface, driven by one dedicated thread.
///
/// `send` hands a request to the client's thread through a locked inbox and wakes it with
/// `curl_multi_wakeup` (the only libcurl call made from other threads). The thread owns the multi
/// handle, its easy handles and every transfer's state; it runs `curl_multi_poll`, and completes
/// each request's promise when the transfer ends. One multi handle means one connection cache:
/// keep-alive connections are reused across requests to the same host.
///
/// - At most `maxConcurrentTransfers` transfers run at once; the rest wait in FIFO order.
/// - A request's `timeout` counts from `send`, queueing included.
/// - Redirects are not followed unless the request asks; TLS peers and host names are verified
///   (against the system's certificate authorities, or `Configuration.caFile`'s); proxies from the
///   environment are ignored (the address policy must see the real peer).
/// - The address policy is checked on every address libcurl is about to connect to
///   (`CURLOPT_OPENSOCKETFUNCTION`): a refused address never gets a socket.
/// - Cancelling the token passed to `send` removes the transfer from the multi handle at once: the
///   connection is closed and the future is cancelled.
///
/// ```swift
/// let client = CurlClient()
/// let response = try await client.send(OutboundRequest(url: "http://127.0.0.1:9000/ping")).value
/// ```
///
/// - Note: Futures complete on the client's thread; their inline continuations must be short
///   (completing other promises, enqueueing work), as everywhere in TaskCore.
public final class CurlClient: Sendable {
    /// Limits and defaults of a client.
    public struct Configuration: Sendable {
        /// Most transfers in progress at once (default 256); more wait in FIFO order.
        public var maxConcurrentTransfers: Int
        /// Largest response body accepted unless a request says otherwise (default 4 MiB).
        public var maxResponseBytes: Int
        /// Which addresses may be connected to (default: link-local and metadata refused).
        public var policy: AddressPolicy
        /// The `User-Agent` sent unless a request sets its own.
        public var userAgent: String
        /// A PEM file of the certificate authorities that TLS servers are verified with, instead of
        /// the system's (nil, the default): for a server with a private or self-signed certificate.
        public var caFile: String?

        public init(
            maxConcurrentTransfers: Int = 256,
            maxResponseBytes: Int = 4 << 20,
            policy: AddressPolicy = AddressPolicy(),
            userAgent: String = "TaskServer/\(TaskServerVersion.current)",
            caFile: String? = nil
        ) {
            self.maxConcurrentTransfers = maxConcurrentTransfers
            self.maxResponseBytes = maxResponseBytes
            self.policy = policy
            self.userAgent = userAgent
            self.caFile = caFile
        }
    }

    /// Counters of a client.
    public struct Statistics: Sendable, Equatable {
        /// Transfers in progress.
        public var active: Int
        /// Requests waiting for a transfer slot.
        public var queued: Int
        /// Requests finished in any way since the client started.
        public var completed: Int
    }

    public let configuration: Configuration
    private let core: CurlCore

    /// Starts a client and its thread. Call `shutdown()` when done with it.
    public init(configuration: Configuration = Configuration()) {
        Self.initializeLibcurl()
        var configuration = configuration
        configuration.maxConcurrentTransfers = max(1, configuration.maxConcurrentTransfers)
        self.configuration = configuration
        self.core = CurlCore(configuration: configuration)
        self.core.startThread()
    }

    deinit {
        self.core.shutdown()
    }

    /// `curl_global_init`, once per process, before any other libcurl call.
    private static let globalInitialization: CURLcode = ts_curl_global_init()

    static func initializeLibcurl() {
        precondition(
            Self.globalInitialization == CURLE_OK,
            "libcurl failed to initialise (\(Self.globalInitialization.rawValue))"
        )
    }

    /// Sends `request`; the future completes with the response (any status), fails with an
    /// `OutboundError`, or is cancelled when `token` fires first.
    public func send(
        _ request: OutboundRequest,
        cancellationToken token: CancellationToken? = nil
    ) -> Future<OutboundResponse> {
        if let token, token.isCancellationRequested { return .cancelled() }
        let promise = Promise<OutboundResponse>()
        guard let id = self.core.enqueue(request, promise: promise) else {
            return Future(error: OutboundError(.shutdown, "the HTTP client is shut down"))
        }
        if let token {
            let core = self.core
            let registration = token.register { core.cancel(id) }
            promise.future.whenComplete { _ in registration.dispose() }
        }
        return promise.future
    }

    /// Aborts every transfer (their futures fail with `.shutdown`) and lets the thread exit.
    /// Idempotent; requests sent afterwards fail at once.
    public func shutdown() {
        self.core.shutdown()
    }

    /// The client's counters now.
    public var statistics: Statistics {
        Statistics(
            active: self.core.activeCount.load(ordering: .relaxed),
            queued: self.core.queuedCount.load(ordering: .relaxed),
            completed: self.core.completedCount.load(ordering: .relaxed)
        )
    }
}

// MARK: - The shared core: inbox and multi handle

/// A request waiting to be picked up by the client's thread.
struct PendingTransfer: Sendable {
    let id: UInt64
    let request: OutboundRequest
    let promise: Promise<OutboundResponse>
    /// Monotonic nanoseconds at `send` and the deadline derived from the request's timeout.
    let start: UInt64
    let deadline: UInt64
}

/// What other threads hand to the client's thread.
struct CurlInbox {
    var requests: [PendingTransfer] = []
    var cancellations: [UInt64] = []
    var nextID: UInt64 = 0
    var isShutdown = false
    /// A wakeup was sent since the thread last emptied the inbox (so another one is not needed).
    var isWakeupPending = false
}

/// The multi handle, shared between the client's thread and the threads that wake it.
// @unchecked Sendable: the handle is used only on the client's own thread, except for
// `curl_multi_wakeup`, which libcurl allows from any thread. `wakeUp` is only called while the
// inbox lock is held and the inbox is not shut down, and the thread cleans the handle up only
// after it has seen the shut-down inbox under that lock, so no wakeup can reach a freed handle.
final class MultiHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer

    init() {
        guard let pointer = curl_multi_init() else { fatalError("curl_multi_init failed (out of memory)") }
        self.pointer = pointer
    }

    func wakeUp() {
        curl_multi_wakeup(self.pointer)
    }
}

/// The state shared by the client facade, its thread and cancellation handlers.
final class CurlCore: Sendable {
    let configuration: CurlClient.Configuration
    let multi = MultiHandle()
    let inbox = Mutex(CurlInbox())
    let activeCount = Atomic<Int>(0)
    let queuedCount = Atomic<Int>(0)
    let completedCount = Atomic<Int>(0)

    init(configuration: CurlClient.Configuration) {
        self.configuration = configuration
        ts_multi_setopt_long(self.multi.pointer, CURLMOPT_MAXCONNECTS, configuration.maxConcurrentTransfers)
    }

    /// Queues a request for the thread; nil when the client is shut down.
    func enqueue(_ request: OutboundRequest, promise: Promise<OutboundResponse>) -> UInt64? {
        let start = monotonicNanoseconds()
        let timeout = max(0, request.timeout.wholeNanoseconds)
        let deadline = start &+ UInt64(min(timeout, Int64(Int64.max / 2)))
        return self.inbox.withLock { inbox -> UInt64? in
            guard !inbox.isShutdown else { return nil }
            inbox.nextID += 1
            let id = inbox.nextID
            inbox.requests.append(
                PendingTransfer(id: id, request: request, promise: promise, start: start, deadline: deadline)
            )
            self.wakeUpLocked(&inbox)
            return id
        }
    }

    /// Asks the thread to abort request `id` (a no-op once it has finished).
    func cancel(_ id: UInt64) {
        self.inbox.withLock { inbox in
            guard !inbox.isShutdown else { return }
            inbox.cancellations.append(id)
            self.wakeUpLocked(&inbox)
        }
    }

    func shutdown() {
        self.inbox.withLock { inbox in
            guard !inbox.isShutdown else { return }
            // Wake before marking: after `isShutdown` the thread may free the handle.
            self.multi.wakeUp()
            inbox.isShutdown = true
        }
    }

    /// Called with the inbox lock held (see `MultiHandle`).
    private func wakeUpLocked(_ inbox: inout CurlInbox) {
        if inbox.isWakeupPending { return }
        inbox.isWakeupPending = true
        self.multi.wakeUp()
    }

    func startThread() {
        let retained = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let status = pthread_create(
            &thread,
            nil,
            { raw in
                let core = Unmanaged<CurlCore>.fromOpaque(raw!).takeRetainedValue()
                CurlLoop(core: core).run()
                return nil
            },
            retained.toOpaque()
        )
        precondition(status == 0, "TaskServer: cannot start the HTTP client thread (\(status))")
        pthread_detach(thread)
    }
}
