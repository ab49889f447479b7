import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// One request as a `TestReceiver` saw it.
struct ReceivedRequest: Sendable {
    var method: String
    var uri: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    /// When it arrived.
    var at: ContinuousClock.Instant

    /// The first value of header `name` (case-insensitive).
    func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return self.headers.first { $0.name.lowercased() == lower }?.value
    }

    var text: String { String(decoding: self.body, as: UTF8.self) }
    var json: JSONValue { (try? JSONParser.parse(self.body)) ?? .string("<not JSON: \(self.text.prefix(300))>") }
}

/// A real HTTP/1.1 server on 127.0.0.1 (the repository's own NIO `HTTPServer`) that records every
/// request and answers with whatever `respond` returns — at once, later (a pending future), or never.
///
/// `respond` gets the request and its index among all requests received so far (0-based).
final class TestReceiver: Sendable {
    typealias Respond = @Sendable (ReceivedRequest, Int) -> Future<Response>

    /// Event loops shared by every receiver of the test run.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    private struct State {
        var requests: [ReceivedRequest] = []
        var inFlight = 0
        var maxInFlight = 0
        var waiters: [(count: Int, promise: Promise<Void>)] = []
    }

    let server: HTTPServer
    let port: Int
    private let state: Mutex<State>

    private init(server: HTTPServer, port: Int) {
        self.server = server
        self.port = port
        self.state = Mutex(State())
    }

    /// Starts a receiver whose answers come from `respond`.
    static func start(_ respond: @escaping Respond) async throws -> TestReceiver {
        let box = ReceiverBox()
        var router = Router()
        let handler: Handler = { request in
            guard let receiver = box.receiver else { return Future(value: Response(status: .serviceUnavailable)) }
            return receiver.receive(request, respond)
        }
        for template in ["/", "/{a}", "/{a}/{b}", "/{a}/{b}/{c}"] {
            for method in [HTTPMethod.GET, .HEAD, .POST, .PUT, .PATCH, .DELETE, .OPTIONS] {
                router.add(method, template, handler)
            }
        }
        var limits = HTTPLimits()
        limits.maxBodyBytes = 8 << 20
        let server = HTTPServer(
            host: "127.0.0.1",
            port: 0,
            router: router,
            limits: limits,
            logger: Logger(label: "receiver") { _ in SwiftLogNoOpLogHandler() },
            group: Self.group
        )
        let port = try await server.start()
        let receiver = TestReceiver(server: server, port: port)
        box.receiver = receiver
        return receiver
    }

    /// A receiver that answers every request with `status` (and an optional JSON body).
    static func answering(_ status: HTTPResponseStatus, json: JSONValue? = nil) async throws -> TestReceiver {
        try await self.start { _, _ in
            Future(value: json.map { Response.json($0, status: status) } ?? Response(status: status))
        }
    }

    var url: String { "http://127.0.0.1:\(self.port)" }

    /// Every request received so far, in arrival order.
    var requests: [ReceivedRequest] { self.state.withLock { $0.requests } }

    /// The most requests that were ever waiting for their answer at once.
    var maxInFlight: Int { self.state.withLock { $0.maxInFlight } }

    /// Returns once `count` requests have arrived (or `timeout` passed): every request so far.
    func waitForRequests(_ count: Int, timeout: Duration = .seconds(20)) async throws -> [ReceivedRequest] {
        let promise = Promise<Void>()
        let ready = self.state.withLock { state in
            if state.requests.count >= count { return true }
            state.waiters.append((count, promise))
            return false
        }
        if !ready {
            let timer = TimerQueue.shared.schedule(after: timeout) { promise.trySucceed(()) }
            try await promise.future.value
            TimerQueue.shared.cancel(timer)
        }
        return self.requests
    }

    /// Waits until the receiver has no open connection (or `timeout` passed); returns whether it has none.
    func waitForNoConnections(timeout: Duration = .seconds(10)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while self.server.connectionCount > 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        return self.server.connectionCount == 0
    }

    func stop() async {
        await self.server.stopAccepting()
    }

    private func receive(_ request: Request, _ respond: Respond) -> Future<Response> {
        var headers: [(name: String, value: String)] = []
        for header in request.headers { headers.append((header.name, header.value)) }
        let received = ReceivedRequest(
            method: request.method.rawValue,
            uri: request.uri,
            headers: headers,
            body: request.body.map { Array($0.readableBytesView) } ?? [],
            at: .now
        )
        let (index, ready): (Int, [Promise<Void>]) = self.state.withLock { state in
            state.requests.append(received)
            state.inFlight += 1
            state.maxInFlight = max(state.maxInFlight, state.inFlight)
            let count = state.requests.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.promise)
            state.waiters.removeAll { $0.count <= count }
            return (count - 1, ready)
        }
        for promise in ready { promise.trySucceed(()) }
        let response = respond(received, index)
        response.whenComplete { _ in self.state.withLock { $0.inFlight -= 1 } }
        return response
    }
}

/// Lets the router's handler reach the receiver created after it.
private final class ReceiverBox: Sendable {
    private let value = Mutex<TestReceiver?>(nil)
    var receiver: TestReceiver? {
        get { self.value.withLock { $0 } }
        set { self.value.withLock { $0 = newValue } }
    }
}

/// A response after `delay` (a pending future meanwhile; no thread is held).
func delayed(_ delay: Duration, _ response: Response) -> Future<Response> {
    Future<Void>.delay(delay).map { response }
}

/// A future that never completes: the receiver never answers (until the client gives up).
func never() -> Future<Response> {
    Promise<Response>().future
}

/// Waits until `condition` holds, checking every 10 ms, at most `timeout` (scaled under TSan: a
/// loaded sanitizer run can stall a process for seconds); returns whether it held.
func eventually(
    timeout: Duration = TestTiming.scaled(.seconds(20)),
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}

/// `eventually` for a blocking thread (inside `TestServer.raw`): checks every millisecond.
func waitUntil(timeout: Duration = TestTiming.scaled(.seconds(20)), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
        nanosleep(&pause, nil)
    }
    return condition()
}
