import Foundation
import TaskCore
import TaskGraph
import TaskServer

/// A connection to a TaskServer's API, shared by `taskserver worker` and the terminal commands
/// (`submit`, `get`, `schedules`, …): JSON requests over the package's libcurl client, so that
/// connections are kept alive between requests, responses may come chunked, and the server may be
/// `https://` (verified against the system's certificate authorities, or the `--cacert` file's).
///
/// The client's address policy is `AddressPolicy.unrestricted`, on purpose: the outbound policy
/// guards the server's requests to URLs that jobs supply, while this client talks only to the
/// server its operator named — usually on loopback or a private network, which that policy may
/// refuse.
///
/// - Note: `send` blocks the calling thread until the answer (the worker's threads and the
///   terminal commands are plain threads, one request at a time each).
package final class ServerClient: Sendable {
    /// An answer of the server (any status).
    package struct Response: Sendable {
        package var status: Int
        package var headers: [(name: String, value: String)]
        package var body: [UInt8]

        package init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
            self.status = status
            self.headers = headers
            self.body = body
        }

        package func header(_ name: String) -> String? {
            self.headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        /// The body as JSON, members in the server's order (nil when it is not JSON).
        package var json: JSONValue? { try? JSONParser.parse(self.body, limits: ServerClient.responseLimits) }

        /// `Retry-After` in seconds, when the server sent one.
        package var retryAfter: Duration? {
            self.header("Retry-After").flatMap { Int($0) }.map { .seconds($0) }
        }
    }

    /// The server's URL as given, for messages.
    package let server: String
    private let base: String
    private let apiKey: String?
    private let http: CurlClient

    /// The largest answer accepted: a claim of 100 tasks carries each one's params and input.
    static let maxResponseBytes = 1 << 30
    package static let responseLimits = JSONParser.Limits(
        maxBytes: maxResponseBytes,
        maxStringBytes: maxResponseBytes
    )

    /// - Parameters:
    ///   - server: An `http://` or `https://` URL, optionally with a base path.
    ///   - caFile: A PEM file of certificate authorities to verify an `https://` server with.
    /// - Throws: `ServerClientError` when `server` is not such a URL.
    package init(server: String, apiKey: String?, caFile: String?) throws(ServerClientError) {
        guard let components = URLComponents(string: server), let host = components.host, !host.isEmpty,
            let scheme = components.scheme?.lowercased()
        else {
            throw ServerClientError("--server must be a URL like http://127.0.0.1:8080, got \"\(server.prefix(200))\"")
        }
        guard scheme == "http" || scheme == "https" else {
            throw ServerClientError("--server must be an http:// or https:// URL, got \"\(server.prefix(200))\"")
        }
        self.server = server
        var base = server
        while base.hasSuffix("/") { base.removeLast() }
        self.base = base
        self.apiKey = apiKey.flatMap { $0.isEmpty ? nil : $0 }
        // The client's thread inherits the signal mask of the thread that starts it: SIGTERM and
        // SIGINT are for the worker's own handler (WorkerSignals), never for libcurl's poll.
        let mask = WorkerSignals.block()
        defer { WorkerSignals.restore(mask) }
        self.http = CurlClient(
            configuration: CurlClient.Configuration(
                // The worker's claimer, heartbeater and completer: one request at a time each.
                maxConcurrentTransfers: 4,
                maxResponseBytes: Self.maxResponseBytes,
                policy: .unrestricted,
                userAgent: "taskserver/\(TaskServerVersion.current)",
                caFile: caFile
            )
        )
    }

    /// Sends `body` (JSON, when given) to the server's `path` and returns its answer, or throws
    /// when there is none: the server unreachable, no answer within `timeout`, or `cancellation`
    /// fired.
    @available(*, noasync)
    package func send(
        _ method: String,
        _ path: String,
        json body: [UInt8]? = nil,
        headers extra: [(name: String, value: String)] = [],
        timeout: Duration,
        cancellation: CancellationToken? = nil
    ) throws(ServerClientError) -> Response {
        var headers: [(name: String, value: String)] = [("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        if let apiKey = self.apiKey { headers.append(("Authorization", "Bearer \(apiKey)")) }
        headers += extra
        let request = OutboundRequest(
            method: method,
            url: self.base + path,
            headers: headers,
            body: body,
            timeout: timeout
        )
        do {
            let response = try self.http.send(request, cancellationToken: cancellation).wait()
            return Response(status: response.status, headers: response.headers, body: response.body)
        } catch let error as OutboundError {
            switch error.kind {
            case .connect:
                var reason = Substring(error.message)
                if reason.hasPrefix("cannot connect: ") { reason = reason.dropFirst("cannot connect: ".count) }
                throw ServerClientError(
                    "cannot connect to \(self.server): \(reason) (is the server running? set --server or TASKSERVER_URL)"
                )
            case .timeout:
                throw ServerClientError("\(self.server) did not answer within \(timeout)")
            default:
                throw ServerClientError("lost the connection to \(self.server): \(error.message)")
            }
        } catch {
            throw ServerClientError("the request was cancelled")
        }
    }

    /// POSTs `body` (JSON) to the server's `path`: `send("POST", …)`.
    @available(*, noasync)
    func post(
        _ path: String,
        json body: [UInt8],
        timeout: Duration,
        cancellation: CancellationToken? = nil
    ) throws(ServerClientError) -> Response {
        try self.send("POST", path, json: body, timeout: timeout, cancellation: cancellation)
    }

    /// Percent-encodes an id for a path segment.
    package static func escape(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? id
    }
}

/// A request that got no answer, or an answer the caller cannot go on with: what the worker logs,
/// or a command prints before it exits.
package struct ServerClientError: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }

    /// The server's answer as a readable error: `404 executor.notFound: no executor images`.
    package init(problem response: ServerClient.Response) {
        if let json = response.json, let code = json["code"]?.stringValue {
            let detail = json["detail"]?.stringValue ?? json["title"]?.stringValue ?? ""
            var text = "\(response.status) \(code): \(detail)"
            for error in (json["errors"]?.arrayValue ?? []).prefix(20) {
                text += "\n  \(error["pointer"]?.stringValue ?? "")  \(error["message"]?.stringValue ?? "")"
            }
            self.description = text
        } else {
            self.description =
                "the server answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self))"
        }
    }
}
