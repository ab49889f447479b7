import ArgumentParser
import Dispatch
import Foundation
import Logging
import TaskServer

@main
struct TaskServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "taskserver",
        abstract: "Runs job graphs over HTTP: series, parallel branches, continuations, fan-outs.",
        discussion: """
            Start the server with `taskserver serve`, then drive it with curl:
              curl -s localhost:8080/v1/jobs -H 'content-type: application/json' \\
                -d '{"graph":{"type":"task","action":"value","params":{"value":42}}}'

            From a terminal: taskserver submit job.json --watch | status ID | events ID --follow | cancel ID
            (server from TASKSERVER_URL, API key from TASKSERVER_API_KEY).

            Every flag of `serve` can also be set through the environment variable shown in its help.
            """,
        version: TaskServerVersion.current,
        subcommands: [Serve.self, Submit.self, Status.self, Cancel.self, Events.self, Healthcheck.self, Version.self],
        defaultSubcommand: Serve.self
    )
}

enum TaskServerVersion {
    static let current = "0.1.0"
}

struct Version: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the version.")
    func run() {
        print("taskserver \(TaskServerVersion.current)")
    }
}

struct Healthcheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Exit 0 when the server answers GET /healthz, 1 otherwise (for Docker HEALTHCHECK).")

    @Option(help: "The health URL (env TASKSERVER_HEALTH_URL).")
    var url: String = ProcessInfo.processInfo.environment["TASKSERVER_HEALTH_URL"]
        ?? "http://127.0.0.1:\(ProcessInfo.processInfo.environment["TASKSERVER_PORT"] ?? "8080")/healthz"

    func run() async throws {
        guard let ok = try? await probe(self.url), ok else { throw ExitCode(1) }
    }
}

/// GETs `url` over a plain socket (no client library needed) and checks for a 200.
func probe(_ url: String) async throws -> Bool {
    guard let components = URLComponents(string: url), let host = components.host else { return false }
    let port = components.port ?? 80
    let path = components.path.isEmpty ? "/" : components.path
    return await withCheckedContinuation { continuation in
        DispatchQueue.global().async {
            continuation.resume(returning: blockingGet(host: host, port: port, path: path))
        }
    }
}

private func blockingGet(host: String, port: Int, path: String) -> Bool {
    var hints = addrinfo()
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var result: UnsafeMutablePointer<addrinfo>?
    guard getaddrinfo(host, String(port), &hints, &result) == 0, let info = result else { return false }
    defer { freeaddrinfo(result) }
    let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 3, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    guard connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else { return false }
    let request = "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n"
    guard request.withCString({ send(fd, $0, strlen($0), 0) }) > 0 else { return false }
    var buffer = [UInt8](repeating: 0, count: 64)
    let count = recv(fd, &buffer, buffer.count, 0)
    guard count > 12 else { return false }
    return String(decoding: buffer[0..<count], as: UTF8.self).hasPrefix("HTTP/1.1 200")
}
