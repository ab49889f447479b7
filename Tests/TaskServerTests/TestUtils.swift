import InMemoryLogging
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

#if canImport(Glibc)
import Glibc
#endif

// MARK: - A server under test

/// An in-process `Application` listening on 127.0.0.1 at a free port, with a tiny HTTP/1.1 client
/// that talks to it over real sockets.
final class TestServer: Sendable {
    let app: Application
    let port: Int

    private init(app: Application, port: Int) {
        self.app = app
        self.port = port
    }

    /// Starts a server; `configure` adjusts the configuration (host and port are set already).
    static func start(
        logger: Logger = Logger(label: "taskserver-tests") { _ in SwiftLogNoOpLogHandler() },
        clock: any ServerClock = SystemClock(),
        _ configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> TestServer {
        var configuration = ServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        // A server under ThreadSanitizer beside a whole module's tests can take longer than the
        // 10 s head timeout to read a request that arrived at once, and would close its connection.
        configuration.httpTimeouts.head = configuration.httpTimeouts.head * TestTiming.slowdown
        configuration.httpTimeouts.body = configuration.httpTimeouts.body * TestTiming.slowdown
        configure(&configuration)
        let app = try Application(configuration: configuration, clock: clock, logger: logger)
        let port = try await app.start()
        return TestServer(app: app, port: port)
    }

    func stop() async {
        await self.app.shutdown()
    }

    // MARK: Requests (a fresh connection each)

    /// Sends one request on a new connection and reads its response.
    func request(
        _ method: String,
        _ target: String,
        headers: [(String, String)] = [],
        body: [UInt8]? = nil
    ) async throws -> HTTPResponse {
        let bytes = HTTPRequestBytes.make(method, target, headers: headers, body: body)
        let port = self.port
        return try await Blocking.run {
            let connection = try SocketConnection(port: port)
            defer { connection.close() }
            try connection.send(bytes)
            guard let response = try connection.readResponse(isHead: method == "HEAD") else { throw SocketError.closed }
            return response
        }
    }

    func get(_ target: String, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await self.request("GET", target, headers: headers)
    }

    func delete(_ target: String, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await self.request("DELETE", target, headers: headers)
    }

    /// POSTs `json` as `application/json`.
    func post(_ target: String, json: JSONValue, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await self.request(
            "POST",
            target,
            headers: [("Content-Type", "application/json")] + headers,
            body: json.jsonBytes
        )
    }

    /// PUTs `json` as `application/json`.
    func put(_ target: String, json: JSONValue) async throws -> HTTPResponse {
        try await self.request("PUT", target, headers: [("Content-Type", "application/json")], body: json.jsonBytes)
    }

    /// PATCHes with `json` as `application/json`.
    func patch(_ target: String, json: String) async throws -> HTTPResponse {
        try await self.request("PATCH", target, headers: [("Content-Type", "application/json")], body: Array(json.utf8))
    }

    /// POSTs raw text with the given content type (none when nil).
    func post(
        _ target: String,
        text: String,
        contentType: String? = "application/json",
        headers: [(String, String)] = []
    ) async throws -> HTTPResponse {
        let typeHeader = contentType.map { [("Content-Type", $0)] } ?? []
        return try await self.request("POST", target, headers: typeHeader + headers, body: Array(text.utf8))
    }

    /// POSTs with no body (cancel endpoints).
    func post(_ target: String, headers: [(String, String)] = []) async throws -> HTTPResponse {
        try await self.request("POST", target, headers: headers, body: [])
    }

    // MARK: Job helpers

    /// Submits `job` and returns the body of the `201`.
    func submit(
        _ job: JSONValue,
        waitMs: Int? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> JSONValue {
        let target = waitMs.map { "/v1/jobs?waitMs=\($0)" } ?? "/v1/jobs"
        let response = try await self.post(target, json: job)
        #expect(response.status == 201, "submit: \(response)", sourceLocation: sourceLocation)
        return response.json
    }

    /// Submits `job` and returns its id.
    func submitID(
        _ job: JSONValue,
        waitMs: Int? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> String {
        let body = try await self.submit(job, waitMs: waitMs, sourceLocation: sourceLocation)
        return try #require(body["id"]?.stringValue, sourceLocation: sourceLocation)
    }

    /// The job, long-polled until it ends (or 20 s pass).
    func finished(_ id: String) async throws -> JSONValue {
        try await self.get("/v1/jobs/\(id)?waitMs=20000").json
    }

    /// Long-polls the job's events until one satisfies `predicate`; returns it (nil after 20 s).
    func waitForEvent(_ id: String, _ predicate: (JSONValue) -> Bool) async throws -> JSONValue? {
        var after = 0
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let items =
                try await self.get("/v1/jobs/\(id)/events?after=\(after)&waitMs=5000").json["items"]?.arrayValue ?? []
            for event in items {
                if predicate(event) { return event }
                after = max(after, event["seq"]?.intValue ?? after)
            }
        }
        return nil
    }

    /// Waits for the `task.started` event of `taskID`.
    func waitUntilStarted(_ id: String, task taskID: String) async throws {
        let event = try await self.waitForEvent(id) { $0["type"] == "task.started" && $0["taskId"] == .string(taskID) }
        #expect(event != nil, "task \(taskID) of job \(id) never started")
    }

    /// Opens a raw connection and runs `body` with it on a blocking thread.
    func raw<T: Sendable>(
        receiveTimeout: Int = 20,
        _ body: @escaping @Sendable (SocketConnection) throws -> T
    ) async throws -> T {
        let port = self.port
        return try await Blocking.run {
            let connection = try SocketConnection(port: port, receiveTimeoutSeconds: receiveTimeout)
            defer { connection.close() }
            return try body(connection)
        }
    }

    /// Whether the server still answers `GET /healthz` with 200 on a new connection.
    func isHealthy() async throws -> Bool {
        let response = try await self.get("/healthz")
        return response.status == 200 && response.json == ["status": "ok"]
    }
}

/// Runs `body` with a started server and stops the server afterwards, even when `body` throws.
func withServer<T>(
    clock: any ServerClock = SystemClock(),
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (TestServer) async throws -> T
) async throws -> T {
    let server = try await TestServer.start(clock: clock, configure)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

/// The job stores a test can run a server on.
enum StoreKind: String, CaseIterable, CustomTestStringConvertible {
    case memory, sqlite, postgres
    var testDescription: String { self.rawValue }
}

/// `withServer` on a fresh store of `kind` (a new SQLite file, a new PostgreSQL schema).
func withServer<T>(
    on kind: StoreKind,
    _ configure: @escaping (inout ServerConfiguration) -> Void = { _ in },
    _ body: (TestServer) async throws -> T
) async throws -> T {
    switch kind {
    case .memory:
        return try await withServer(configure, body)
    case .sqlite:
        let path = try SQLiteStoreTests.temporaryDirectory() + "/taskserver.sqlite"
        return try await withServer(
            {
                $0.dataPath = path
                configure(&$0)
            },
            body
        )
    case .postgres:
        let settings = try TestPostgres.freshSchema()
        defer { TestPostgres.drop(settings) }
        return try await withServer(
            {
                $0.database = settings
                configure(&$0)
            },
            body
        )
    }
}

// MARK: - Blocking work off the cooperative pool

/// Socket I/O blocks, so it runs on a thread pool of its own, never on Swift's cooperative threads
/// (two of them on a two-core machine).
enum Blocking {
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 96)
        pool.start()
        return pool
    }()

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await self.pool.runIfActive(body)
    }
}

// MARK: - HTTP messages

/// A parsed HTTP/1.1 response.
struct HTTPResponse: Sendable, CustomStringConvertible {
    var version: String
    var status: Int
    var reason: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    /// The first value of header `name` (case-insensitive).
    func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return self.headers.first { $0.name.lowercased() == lower }?.value
    }

    /// Every value of header `name`.
    func headerValues(_ name: String) -> [String] {
        let lower = name.lowercased()
        return self.headers.filter { $0.name.lowercased() == lower }.map(\.value)
    }

    var text: String { String(decoding: self.body, as: UTF8.self) }

    /// The body parsed as JSON (a string that says so when it is not JSON, so assertions fail readably).
    var json: JSONValue {
        (try? JSONParser.parse(self.body)) ?? .string("<not JSON: \(self.text.prefix(300))>")
    }

    var contentType: String? { self.header("content-type") }

    var description: String { "HTTP \(self.status) \(self.reason) \(self.contentType ?? "-") \(self.text.prefix(600))" }
}

enum HTTPRequestBytes {
    /// A request with `Host` and, when there is a body, `Content-Length`.
    static func make(
        _ method: String,
        _ target: String,
        headers: [(String, String)] = [],
        body: [UInt8]? = nil
    ) -> [UInt8] {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + (body ?? [])
    }
}

enum SocketError: Error, CustomStringConvertible {
    case system(String, Int32)
    case timeout
    case closed
    case malformed(String)

    var description: String {
        switch self {
        case .system(let call, let code): return "\(call) failed: errno \(code)"
        case .timeout: return "timed out waiting for the server"
        case .closed: return "the server closed the connection"
        case .malformed(let text): return "malformed response: \(text)"
        }
    }
}

/// A blocking TCP connection to the server (used by one thread at a time).
final class SocketConnection: @unchecked Sendable {
    let fd: Int32
    private var buffer: [UInt8] = []
    private var isClosed = false

    init(port: Int, receiveTimeoutSeconds: Int = 20) throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw SocketError.system("socket", errno) }
        self.fd = fd
        // Scaled for slow runs (ThreadSanitizer): a read that times out is a failure, not a result.
        var timeout = timeval(tv_sec: receiveTimeoutSeconds * TestTiming.slowdown, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw SocketError.system("connect", code)
        }
    }

    deinit { self.close() }

    func close() {
        guard !self.isClosed else { return }
        self.isClosed = true
        Glibc.close(self.fd)
    }

    /// Sends every byte (throws when the peer has gone).
    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { raw in
                Glibc.send(self.fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 {
                if errno == EINTR { continue }
                throw SocketError.system("send", errno)
            }
            offset += sent
        }
    }

    func send(_ text: String) throws { try self.send(Array(text.utf8)) }

    /// Half-closes: the server reads end-of-file, the client can still read.
    func shutdownWrite() {
        shutdown(self.fd, Int32(SHUT_WR))
    }

    /// Reads more bytes into the buffer; false at end-of-file.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(self.fd, $0.baseAddress!, $0.count, 0) }
            if count > 0 {
                self.buffer += chunk[0..<count]
                return true
            }
            if count == 0 { return false }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: throw SocketError.timeout
            case ECONNRESET: return false
            default: throw SocketError.system("recv", errno)
            }
        }
    }

    /// Reads one response; nil when the server closed the connection before sending anything.
    func readResponse(isHead: Bool = false) throws -> HTTPResponse? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while true {
            if let end = Self.find(separator, in: self.buffer) {
                headEnd = end
                break
            }
            guard try self.fill() else {
                if self.buffer.isEmpty { return nil }
                throw SocketError.malformed(
                    "end of file inside the head: \(String(decoding: self.buffer, as: UTF8.self))"
                )
            }
        }
        let head = String(decoding: self.buffer[0..<headEnd!], as: UTF8.self)
        self.buffer.removeFirst(headEnd! + 4)
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 2, let status = Int(parts[1]) else { throw SocketError.malformed(statusLine) }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { throw SocketError.malformed(line) }
            let value = line[line.index(after: colon)...].drop { $0 == " " }
            headers.append((String(line[..<colon]), String(value)))
        }
        var response = HTTPResponse(
            version: parts[0],
            status: status,
            reason: parts.count > 2 ? parts[2] : "",
            headers: headers,
            body: []
        )
        if isHead || status == 204 || status == 304 || (100..<200).contains(status) { return response }
        if let lengthText = response.header("content-length") {
            guard let length = Int(lengthText) else { throw SocketError.malformed("content-length \(lengthText)") }
            while self.buffer.count < length {
                guard try self.fill() else { throw SocketError.malformed("end of file inside the body") }
            }
            response.body = Array(self.buffer[0..<length])
            self.buffer.removeFirst(length)
        } else {
            while try self.fill() {}
            response.body = self.buffer
            self.buffer = []
        }
        return response
    }

    /// Reads until `text` has arrived; returns everything read so far (and keeps it). Throws on a
    /// timeout, or when the connection ends first.
    func read(until text: String) throws -> String {
        let needle = Array(text.utf8)
        while Self.find(needle, in: self.buffer) == nil {
            guard try self.fill() else {
                throw SocketError.malformed(
                    "end of file before \(text): \(String(decoding: self.buffer, as: UTF8.self))"
                )
            }
        }
        return String(decoding: self.buffer, as: UTF8.self)
    }

    /// Reads until `text` has arrived and, after it, `terminator`; returns everything read so far.
    func read(until text: String, then terminator: String) throws -> String {
        let needle = Array(text.utf8)
        let end = Array(terminator.utf8)
        while true {
            if let start = Self.find(needle, in: self.buffer),
                Self.find(end, in: Array(self.buffer[(start + needle.count)...])) != nil
            {
                return String(decoding: self.buffer, as: UTF8.self)
            }
            guard try self.fill() else {
                throw SocketError.malformed(
                    "end of file before \(text): \(String(decoding: self.buffer, as: UTF8.self))"
                )
            }
        }
    }

    /// Reads until the server closes the connection; returns everything read (kept too).
    func readToEnd() throws -> String {
        while try self.fill() {}
        return String(decoding: self.buffer, as: UTF8.self)
    }

    /// Whether the server closes the connection (end-of-file or reset) within the receive timeout,
    /// discarding whatever else it sends.
    func waitForClose() -> Bool {
        do {
            while try self.fill() { self.buffer = [] }
            return true
        } catch {
            return false
        }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if Array(haystack[start..<start + needle.count]) == needle { return start }
        }
        return nil
    }
}

// MARK: - JSON assertions

extension JSONValue {
    /// The value with every object's keys sorted, so comparisons ignore key order.
    var normalized: JSONValue {
        switch self {
        case .object(let object):
            return .object(
                JSONObject(object.members.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value.normalized) })
            )
        case .array(let items):
            return .array(items.map(\.normalized))
        default:
            return self
        }
    }

    /// The value with each timestamp (`createdAt`, `startedAt`, `finishedAt`, `time`) replaced by
    /// `"<time>"` once it has been checked to be RFC 3339 UTC with milliseconds.
    var withTimesMasked: JSONValue {
        switch self {
        case .object(let object):
            var out = JSONObject()
            for (key, value) in object {
                if ["createdAt", "startedAt", "finishedAt", "time", "timestamp"].contains(key),
                    let text = value.stringValue, isRFC3339Millis(text)
                {
                    out[key] = "<time>"
                } else {
                    out[key] = value.withTimesMasked
                }
            }
            return .object(out)
        case .array(let items):
            return .array(items.map(\.withTimesMasked))
        default:
            return self
        }
    }

    /// The keys of an object, sorted.
    var sortedKeys: [String] { self.objectValue?.keys.sorted() ?? [] }
}

/// `2025-01-31T12:00:00.000Z`.
func isRFC3339Millis(_ text: String) -> Bool {
    let bytes = Array(text.utf8)
    guard bytes.count == 24 else { return false }
    let pattern = Array("dddd-dd-ddTdd:dd:dd.dddZ".utf8)
    for (byte, expected) in zip(bytes, pattern) {
        if expected == UInt8(ascii: "d") {
            guard (0x30...0x39).contains(byte) else { return false }
        } else if byte != expected {
            return false
        }
    }
    return true
}

/// Expects `actual` to equal `expected`, ignoring key order and with timestamps masked.
func expectJSON(
    _ actual: JSONValue,
    _ expected: JSONValue,
    _ comment: Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let a = actual.withTimesMasked.normalized
    let b = expected.normalized
    #expect(
        a == b,
        "\(comment?.rawValue ?? "")\n  actual:   \(actual.jsonString)\n  expected: \(expected.jsonString)",
        sourceLocation: sourceLocation
    )
}

/// Expects an RFC 9457 problem: status, `application/problem+json`, and the exact body (when
/// `detail` is given) or at least `type`, `title`, `status` and `code`.
func expectProblem(
    _ response: HTTPResponse,
    _ status: Int,
    _ code: String,
    detail: String? = nil,
    errors: [JSONValue]? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(response.status == status, "\(response)", sourceLocation: sourceLocation)
    #expect(response.contentType == "application/problem+json", "\(response)", sourceLocation: sourceLocation)
    let body = response.json
    let title = HTTPResponseStatus(statusCode: status).reasonPhrase
    #expect(body["type"] == "about:blank", "\(response)", sourceLocation: sourceLocation)
    #expect(body["title"] == .string(title), "\(response)", sourceLocation: sourceLocation)
    #expect(body["status"] == .int(status), "\(response)", sourceLocation: sourceLocation)
    #expect(body["code"] == .string(code), "\(response)", sourceLocation: sourceLocation)
    #expect(body["detail"]?.stringValue?.isEmpty == false, "\(response)", sourceLocation: sourceLocation)
    if let detail {
        var expected = JSONObject()
        expected["type"] = .string("about:blank")
        expected["title"] = .string(title)
        expected["status"] = .int(status)
        expected["detail"] = .string(detail)
        expected["code"] = .string(code)
        if let errors { expected["errors"] = .array(errors) }
        expectJSON(body, .object(expected), sourceLocation: sourceLocation)
    } else if let errors {
        expectJSON(body["errors"] ?? .null, .array(errors), sourceLocation: sourceLocation)
    }
}

// MARK: - Fixtures

/// Parses JSON text. Fixtures are written as JSON text rather than `JSONValue` literals: large
/// nested literals of a type with six literal conformances take the type checker minutes.
func jsonValue(_ text: String) -> JSONValue {
    do {
        return try JSONParser.parse(text)
    } catch {
        fatalError("invalid fixture JSON (\(error)): \(text)")
    }
}

enum Jobs {
    /// One `value` task that succeeds with `value`.
    static func value(_ value: JSONValue, id: String = "v", executor: String? = nil) -> JSONValue {
        let executorField = executor.map { #", "executor": "\#($0)""# } ?? ""
        return jsonValue(
            #"{"graph": {"type": "task", "id": "\#(id)", "action": "value"\#(executorField), "params": {"value": \#(value.jsonString)}}}"#
        )
    }

    /// One `delay` task of `ms` milliseconds.
    static func delay(_ ms: Int, id: String = "wait") -> JSONValue {
        jsonValue(#"{"graph": {"type": "task", "id": "\#(id)", "action": "delay", "params": {"ms": \#(ms)}}}"#)
    }

    /// One `await` task.
    static func await(id: String = "approve") -> JSONValue {
        jsonValue(#"{"graph": {"type": "task", "id": "\#(id)", "action": "await"}}"#)
    }

    /// A task that fails with `code`.
    static func fail(code: String, message: String, id: String = "boom") -> JSONValue {
        jsonValue(
            #"{"graph": {"type": "task", "id": "\#(id)", "action": "fail", "params": {"code": "\#(code)", "message": "\#(message)"}}}"#
        )
    }

    /// `job` with top-level `fields` set.
    static func with(_ job: JSONValue, _ fields: JSONObject) -> JSONValue {
        var object = job.objectValue ?? JSONObject()
        for (key, value) in fields { object[key] = value }
        return .object(object)
    }
}

// MARK: - Clock

/// Milliseconds elapsed while `body` runs.
func elapsedMilliseconds<T>(_ body: () async throws -> T) async rethrows -> (T, Int) {
    let start = ContinuousClock.now
    let value = try await body()
    let elapsed = ContinuousClock.now - start
    return (value, Int(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000))
}

extension InMemoryLogHandler {
    /// A logger at `level` whose lines this handler keeps (copies of the handler share its store).
    func logger(level: Logger.Level) -> Logger {
        var logger = Logger(label: "taskserver-tests") { _ in self }
        logger.logLevel = level
        return logger
    }
}

extension Application {
    /// Waits until every write queued in the repository so far is committed (a SQLite file then
    /// holds exactly what a SIGKILL would leave).
    func flushRepository() async throws {
        if let sqlite = self.repository as? SQLiteJobRepository { try await sqlite.flush().value }
    }
}
