import Synchronization

/// A read-only view of a cancellation request, handed to the work that should stop (Bolts'
/// `BFCancellationToken`).
///
/// Work polls `isCancellationRequested` or registers a handler. Handlers run once, outside any lock:
/// at once on the registering thread if the token is already cancelled, otherwise on the thread
/// that calls `cancel()`.
public final class CancellationToken: Sendable {
    typealias Handler = @Sendable () -> Void

    struct State {
        var isCancelled = false
        var nextID: UInt64 = 0
        var handlers: [UInt64: Handler] = [:]
    }

    let state = Mutex(State())

    init() {}

    /// A token that is never cancelled.
    public static let none = CancellationToken()

    /// `true` once cancellation was requested.
    public var isCancellationRequested: Bool {
        self.state.withLock { $0.isCancelled }
    }

    /// Calls `handler` once when cancellation is requested — at once if it already was.
    ///
    /// - Returns: a registration whose `dispose()` removes the handler (a no-op after it ran).
    @discardableResult
    public func register(_ handler: @escaping @Sendable () -> Void) -> CancellationRegistration {
        let id: UInt64? = self.state.withLock { state in
            if state.isCancelled { return nil }
            state.nextID += 1
            state.handlers[state.nextID] = handler
            return state.nextID
        }
        guard let id else {
            handler()
            return CancellationRegistration(token: nil, id: 0)
        }
        return CancellationRegistration(token: self, id: id)
    }

    /// Throws `CancellationError` when cancellation was requested.
    public func throwIfCancellationRequested() throws {
        if self.isCancellationRequested { throw CancellationError() }
    }

    /// Requests cancellation; returns `false` when it already was. Handlers run after the lock is released.
    @discardableResult
    func cancel() -> Bool {
        let handlers: [UInt64: Handler]? = self.state.withLock { state in
            if state.isCancelled { return nil }
            state.isCancelled = true
            defer { state.handlers = [:] }
            return state.handlers
        }
        guard let handlers else { return false }
        // Run in registration order, so cleanups happen in the order they were set up.
        for key in handlers.keys.sorted() { handlers[key]!() }
        return true
    }

    func unregister(_ id: UInt64) {
        _ = self.state.withLock { $0.handlers.removeValue(forKey: id) }
    }

    /// How many handlers are registered (for leak checks in tests).
    var registeredHandlerCount: Int { self.state.withLock { $0.handlers.count } }
}

/// A handler registered on a `CancellationToken`; `dispose()` removes it.
public struct CancellationRegistration: Sendable {
    let token: CancellationToken?
    let id: UInt64

    /// Removes the handler if it has not run; safe to call more than once.
    public func dispose() {
        self.token?.unregister(self.id)
    }
}

/// The owner of a cancellation token: whoever may cancel the work holds the source and hands out
/// its `token` (Bolts' `BFCancellationTokenSource`).
///
/// ```swift
/// let source = CancellationTokenSource()
/// let download = fetch(url, token: source.token)
/// source.cancel(after: .seconds(5))
/// ```
public final class CancellationTokenSource: Sendable {
    /// The token this source cancels.
    public let token: CancellationToken
    private let links: Mutex<[CancellationRegistration]>

    /// A source whose token is cancelled only by `cancel()`.
    public init() {
        self.token = CancellationToken()
        self.links = Mutex([])
    }

    /// A source whose token is also cancelled as soon as any of `parents` is.
    public convenience init(linkedTo parents: [CancellationToken]) {
        self.init()
        let token = self.token
        let registrations = parents.map { parent in parent.register { token.cancel() } }
        self.links.withLock { $0 = registrations }
    }

    deinit {
        // Unlink from the parents, so a long-lived parent does not accumulate dead children.
        for registration in self.links.withLock({ $0 }) { registration.dispose() }
    }

    /// `true` once cancellation was requested.
    public var isCancellationRequested: Bool { self.token.isCancellationRequested }

    /// Requests cancellation: the token's handlers run now, on this thread, once. Idempotent.
    public func cancel() {
        self.token.cancel()
    }

    /// Requests cancellation after `delay`, without holding a thread while it waits.
    ///
    /// A `delay` of zero or less cancels at once, on this thread, before returning (Bolts'
    /// `cancelAfterDelay:` does the same for zero; it rejects a negative delay, which here simply
    /// means "already due").
    public func cancel(after delay: Duration) {
        guard delay > .zero else {
            self.cancel()
            return
        }
        let token = self.token
        let timer = TimerQueue.shared.schedule(after: delay) { token.cancel() }
        token.register { TimerQueue.shared.cancel(timer) }
    }
}
