import Foundation
import Logging
import TaskCore
import TaskGraph
import TaskServer
import TestSupport
import Testing

@testable import TaskServerWorker

#if canImport(Glibc)
import Glibc
#endif

// MARK: - A real server

/// An in-process TaskServer on 127.0.0.1 at a free port, in memory, with the external executor
/// `images`; requests go through the package's CurlClient.
final class TestServer: Sendable {
    let app: Application
    let port: Int
    let http = CurlClient(configuration: CurlClient.Configuration(maxConcurrentTransfers: 8))

    var url: String { "http://127.0.0.1:\(self.port)" }

    private init(app: Application, port: Int) {
        self.app = app
        self.port = port
    }

    static func start() async throws -> TestServer {
        var configuration = ServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.externalExecutors = ["images"]
        let app = try Application(
            configuration: configuration,
            logger: Logger(label: "taskserver-worker-tests") { _ in SwiftLogNoOpLogHandler() }
        )
        return TestServer(app: app, port: try await app.start())
    }

    func stop() async {
        self.http.shutdown()
        await self.app.shutdown()
    }

    /// A request and its answer: the status and the body as it came (parse it with `JSONParser`
    /// to keep members in order).
    func request(_ method: String, _ path: String, json: JSONValue? = nil) async throws -> (status: Int, body: [UInt8])
    {
        let response = try await self.http.send(
            OutboundRequest(
                method: method,
                url: self.url + path,
                headers: json == nil ? [] : [("Content-Type", "application/json")],
                body: json?.jsonBytes,
                timeout: .seconds(90)
            )
        ).value
        return (response.status, response.body)
    }

    func json(_ method: String, _ path: String, _ body: JSONValue? = nil) async throws -> JSONValue {
        try JSONParser.parse(try await self.request(method, path, json: body).body)
    }

    /// Submits `job`; returns its id.
    func submit(_ job: JSONValue) async throws -> String {
        let answer = try await self.request("POST", "/v1/jobs", json: job)
        #expect(answer.status == 201, "\(String(decoding: answer.body, as: UTF8.self))")
        return try #require(try JSONParser.parse(answer.body)["id"]?.stringValue)
    }

    /// The job once it has ended (or after 20 s, scaled; at most the server's 60 s).
    func finished(_ id: String) async throws -> JSONValue {
        try await self.json("GET", "/v1/jobs/\(id)?waitMs=\(min(TestTiming.ms(20_000), 60_000))")
    }
}

/// Runs `body` with a started server, and stops it afterwards even when `body` throws.
func withServer<T>(_ body: (TestServer) async throws -> T) async throws -> T {
    let server = try await TestServer.start()
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

// MARK: - A worker

/// A `WorkerRuntime` running on a thread of its own, stopped as SIGTERM would stop it (a byte on
/// its signal pipe), without a signal.
final class RunningWorker: Sendable {
    let runtime: WorkerRuntime
    let exit: Future<Int32>
    private let signalWrite: Int32

    /// Starts a worker of `images` on `server` that runs `command` per task.
    init(
        server: String,
        executor: String = "images",
        command: [String],
        concurrency: Int = 1,
        maxOutputBytes: Int = 1_000_000,
        logger: Logger = Logger(label: "worker") { _ in SwiftLogNoOpLogHandler() }
    ) throws {
        let settings = WorkerSettings(
            executor: executor,
            actions: [],
            concurrency: concurrency,
            workerId: "test-worker",
            grace: .seconds(10),
            maxHeartbeatInterval: nil,
            maxOutputBytes: maxOutputBytes,
            commandName: command[0],
            executable: command[0],
            arguments: Array(command.dropFirst())
        )
        self.runtime = WorkerRuntime(
            settings: settings,
            client: try ServerClient(server: server, apiKey: nil, caFile: nil),
            logger: logger
        )
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw POSIXError(.EMFILE) }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        self.signalWrite = fds[1]
        let promise = Promise<Int32>()
        self.exit = promise.future
        let runtime = self.runtime
        let signalRead = fds[0]
        // The read end stays open: the runtime's signal thread may still be reading it when `run`
        // returns, and ends on the end of file once `stop` closes the write end (a descriptor
        // per worker, for the length of the test run).
        Thread.detachNewThread { promise.succeed(runtime.run(signals: signalRead)) }
    }

    /// "SIGTERM": stop claiming, let the commands finish; returns the exit status.
    func stop() async throws -> Int32 {
        var byte = UInt8(SIGTERM)
        _ = write(self.signalWrite, &byte, 1)
        let status = try await self.exit.value
        close(self.signalWrite)
        return status
    }
}

/// Runs blocking `work` on a new thread (never on Swift's cooperative pool) and returns its value.
func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    let promise = Promise<T>()
    Thread.detachNewThread {
        do { promise.succeed(try work()) } catch { promise.fail(error) }
    }
    return try await promise.future.value
}
