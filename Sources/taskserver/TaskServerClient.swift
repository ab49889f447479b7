import Foundation
import TaskCore
import TaskServer

/// A small blocking HTTP/1.1 client for the terminal commands (`submit`, `status`, `cancel`,
/// `events`): one request per connection over a POSIX socket, `Connection: close`, the body read
/// to the end. Plain `http://` only; put TLS in front of the server for anything remote.
///
/// - Note: Blocking by design: the commands run one request at a time on the main thread, and
///   long-polls (`waitMs`) keep them from polling busily.
struct TaskServerClient {
    struct Response {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: Data

        func header(_ name: String) -> String? {
            self.headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        /// The body as a JSON object (nil when it is not one).
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: self.body)) as? [String: Any] }
    }

    let server: String
    let host: String
    let port: Int
    let basePath: String
    let apiKey: String?

    /// - Throws: `ClientError` when `server` is not an `http://host[:port]` URL.
    init(server: String, apiKey: String?) throws(ClientError) {
        guard let components = URLComponents(string: server), let host = components.host, !host.isEmpty else {
            throw ClientError("--server must be a URL like http://127.0.0.1:8080, got \"\(server.prefix(200))\"")
        }
        guard components.scheme == "http" else {
            throw ClientError(
                "--server: only http:// URLs are supported by the terminal client, got \"\(server.prefix(200))\""
            )
        }
        self.server = server
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = components.port ?? 80
        self.basePath = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        self.apiKey = apiKey.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Sends one request and returns the response, or throws a `ClientError` that says what went
    /// wrong at the connection level. `timeout` bounds each read and write (a long-poll passes its
    /// wait plus a margin).
    func send(
        _ method: String,
        _ path: String,
        body: Data? = nil,
        headers: [(String, String)] = [],
        timeout: Int = 30
    ) throws(ClientError) -> Response {
        let fd = try self.connect(timeout: timeout)
        defer { close(fd) }
        var head =
            "\(method) \(self.basePath)\(path) HTTP/1.1\r\nHost: \(self.host):\(self.port)\r\nConnection: close\r\n"
        head += "User-Agent: taskserver/\(TaskServerVersion.current)\r\nAccept: application/json\r\n"
        if let apiKey = self.apiKey { head += "Authorization: Bearer \(apiKey)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        head += "\r\n"
        var request = Data(head.utf8)
        if let body { request.append(body) }
        let sendError: String? = request.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> String? in
            var offset = 0
            while offset < raw.count {
                let sent = Foundation.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                // A socket with a send timeout is never restarted after a signal handler ran.
                if sent < 0 && errno == EINTR { continue }
                if sent <= 0 { return Self.errnoText() }
                offset += sent
            }
            return nil
        }
        if let sendError { throw ClientError("lost the connection to \(self.server) while sending: \(sendError)") }
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 { break }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    throw ClientError("\(self.server) did not answer within \(timeout) s")
                }
                throw ClientError("lost the connection to \(self.server): \(Self.errnoText())")
            }
            received.append(contentsOf: buffer[0..<count])
        }
        return try Self.parse(received, server: self.server)
    }

    private func connect(timeout: Int) throws(ClientError) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(self.host, String(self.port), &hints, &result)
        guard status == 0, let first = result else {
            throw ClientError("cannot resolve \(self.host): \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(result) }
        var lastError = ""
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let info = candidate {
            candidate = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            if fd < 0 { continue }
            var time = timeval(tv_sec: timeout, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
            if Foundation.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return fd }
            lastError = Self.errnoText()
            close(fd)
        }
        throw ClientError(
            "cannot connect to \(self.server): \(lastError) (is the server running? set --server or TASKSERVER_URL)"
        )
    }

    static func parse(_ data: Data, server: String) throws(ClientError) -> Response {
        let separator = Data("\r\n\r\n".utf8)
        guard let end = data.range(of: separator) else {
            throw ClientError("\(server) closed the connection without a complete HTTP response")
        }
        let lines = String(decoding: data[data.startIndex..<end.lowerBound], as: UTF8.self).components(
            separatedBy: "\r\n"
        )
        let statusParts = lines[0].split(separator: " ", maxSplits: 2)
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw ClientError("\(server) did not answer HTTP (\(lines[0].prefix(80)))")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append(
                (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            )
        }
        var body = Data(data[end.upperBound...])
        if let length = headers.first(where: { $0.name.lowercased() == "content-length" }).flatMap({ Int($0.value) }) {
            guard body.count >= length else {
                throw ClientError("\(server) closed the connection before the whole response arrived")
            }
            body = body.prefix(length)
        }
        return Response(status: status, headers: headers, body: body)
    }

    private static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// A failure the terminal commands report on stderr: connection trouble, or an error the server
/// answered (its problem+json `code` and `detail`).
struct ClientError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }

    /// The server's answer as a readable error: `404 job.notFound: no job abc`.
    init(problem response: TaskServerClient.Response) {
        if let json = response.json, let code = json["code"] as? String {
            var text = "\(response.status) \(code): \(json["detail"] as? String ?? json["title"] as? String ?? "")"
            if let errors = json["errors"] as? [[String: Any]] {
                for error in errors.prefix(20) {
                    text += "\n  \(error["pointer"] as? String ?? "")  \(error["message"] as? String ?? "")"
                }
            }
            self.description = text
        } else {
            self.description =
                "the server answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self))"
        }
    }
}
