import NIOCore
import NIOHTTP1
import TaskCore
import TaskGraph

/// An HTTP request as the router's handlers see it: head, whole body, path parameters.
public struct Request: Sendable {
    public var method: HTTPMethod
    /// The raw request target (`/v1/jobs?limit=5`).
    public var uri: String
    /// The percent-decoded path segments (`["v1", "jobs", "j1"]`).
    public var segments: [String]
    /// The decoded path segments joined back (`/v1/jobs/j1`).
    public var path: String { "/" + self.segments.joined(separator: "/") }
    /// Query parameters, the first value of each.
    public var query: [String: String]
    /// Every value of each query parameter, in order (`?label=a:1&label=b:2`).
    public var queryValues: [String: [String]] = [:]
    public var headers: HTTPHeaders
    public var body: ByteBuffer?
    /// Path parameters by name (`id`, `taskId`), percent-decoded.
    public var parameters: [String: String] = [:]
    /// The template of the route the path matched (`/v1/jobs/{id}`), nil when none did.
    public var route: String?
    /// The request's id (echoed as `X-Request-Id`, logged with every line of the request).
    public var requestID: String
    /// Cancelled when the client's connection closes: a long wait on the client's behalf (a
    /// worker's claim) is withdrawn then, rather than handed work nobody will read.
    public var connectionClosed: CancellationToken = .none
    /// The connection's event loop, as an executor: where a handler continues work that should not
    /// run on whichever thread completed what it waited for (the store's completion thread is one,
    /// serving every commit's waiters in turn).
    public var executor: any Executor = .immediate
    /// The request's span (issue #46), when tracing is on and the request is traced.
    var span: OTLPSpan?
    /// The request span's context: what a job it submits descends from.
    public var trace: SpanContext? { self.span?.own }

    /// The named path parameter (always present on a matched route).
    public func parameter(_ name: String) -> String { self.parameters[name] ?? "" }
}

/// A response: status, headers and a body of bytes.
public struct Response: Sendable {
    public var status: HTTPResponseStatus
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// A body written over time instead of `body` (server-sent events); ends the connection.
    public var stream: ResponseStream?
    /// Called when the response never reached its client: the connection closed before it could be
    /// written, or writing it failed. Whatever it handed out (a claim's leases) can then be given
    /// back. Runs on the connection's event loop.
    public var onUndelivered: (@Sendable () -> Void)?

    public init(status: HTTPResponseStatus, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response (`application/json`).
    public static func json(
        _ value: JSONValue,
        status: HTTPResponseStatus = .ok,
        headers: HTTPHeaders = HTTPHeaders()
    ) -> Response {
        .json(bytes: value.jsonBytes, status: status, headers: headers)
    }

    /// A JSON response of bytes already encoded (by a `JSONWriter`).
    public static func json(
        bytes: [UInt8],
        status: HTTPResponseStatus = .ok,
        headers: HTTPHeaders = HTTPHeaders()
    ) -> Response {
        var headers = headers
        if headers.contains(name: "content-type") {
            headers.replaceOrAdd(name: "content-type", value: "application/json")
        } else {
            headers.add(name: "content-type", value: "application/json")
        }
        return Response(status: status, headers: headers, body: bytes)
    }

    /// A streamed response: `stream` writes the body once the head is sent.
    public static func streaming(
        contentType: String,
        headers: HTTPHeaders = HTTPHeaders(),
        _ stream: ResponseStream
    ) -> Response {
        var headers = headers
        headers.replaceOrAdd(name: "content-type", value: contentType)
        var response = Response(status: .ok, headers: headers)
        response.stream = stream
        return response
    }

    /// A text response.
    public static func text(
        _ text: String,
        contentType: String = "text/plain; charset=utf-8",
        status: HTTPResponseStatus = .ok
    ) -> Response {
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: contentType)
        return Response(status: status, headers: headers, body: Array(text.utf8))
    }
}

/// An error answered as an RFC 9457 `application/problem+json` body (SPEC §3.9).
///
/// Handlers throw it for every input error; any other error is a bug and is answered with a
/// generic 500 problem whose detail never carries internal text.
public struct HTTPProblem: Error, Sendable {
    public var status: HTTPResponseStatus
    /// The stable machine-readable code (`job.notFound`).
    public var code: String
    /// Human text about this occurrence.
    public var detail: String
    public var errors: [ValidationProblem]
    public var headers: HTTPHeaders

    public init(
        _ status: HTTPResponseStatus,
        code: String,
        detail: String,
        errors: [ValidationProblem] = [],
        headers: HTTPHeaders = HTTPHeaders()
    ) {
        self.status = status
        self.code = code
        self.detail = detail
        self.errors = errors
        self.headers = headers
    }

    /// The problem as a response.
    public var response: Response {
        var object = JSONObject()
        object["type"] = "about:blank"
        object["title"] = .string(self.status.reasonPhrase)
        object["status"] = .int(Int(self.status.code))
        object["detail"] = .string(self.detail)
        object["code"] = .string(self.code)
        if !self.errors.isEmpty {
            object["errors"] = .array(
                self.errors.map { ["pointer": .string($0.pointer), "message": .string($0.message)] }
            )
        }
        var headers = self.headers
        headers.replaceOrAdd(name: "content-type", value: "application/problem+json")
        // Every 503 is transient (draining, the store busy or away): say when to come back.
        if self.status == .serviceUnavailable, !headers.contains(name: "retry-after") {
            headers.add(name: "retry-after", value: "1")
        }
        return Response(status: self.status, headers: headers, body: JSONValue.object(object).jsonBytes)
    }

    // MARK: Common problems

    public static func notFound(_ code: String, _ detail: String) -> HTTPProblem {
        HTTPProblem(.notFound, code: code, detail: detail)
    }
    public static func conflict(_ code: String, _ detail: String) -> HTTPProblem {
        HTTPProblem(.conflict, code: code, detail: detail)
    }
    public static func badQuery(_ detail: String) -> HTTPProblem {
        HTTPProblem(.badRequest, code: "query.invalid", detail: detail)
    }
    public static let internalError = HTTPProblem(
        .internalServerError,
        code: "internal",
        detail: "the server failed to answer this request; it was logged with its request id"
    )
}

// MARK: - Query parameters

extension Request {
    /// An integer query parameter within `range`, or `nil` when absent; anything else is a 400.
    public func integerQuery(_ name: String, in range: ClosedRange<Int>) throws(HTTPProblem) -> Int? {
        guard let raw = self.query[name] else { return nil }
        guard let value = Int(raw), range.contains(value) else {
            throw .badQuery(
                "\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), got \"\(raw.prefix(40))\""
            )
        }
        return value
    }
}

/// Percent-decoding of URI components (RFC 3986); `nil` for malformed escapes or invalid UTF-8.
func percentDecode(_ text: Substring, plusAsSpace: Bool = false) -> String? {
    // Most segments have nothing to decode (and a Substring is valid UTF-8 already).
    if !text.utf8.contains(where: { $0 == UInt8(ascii: "%") || (plusAsSpace && $0 == UInt8(ascii: "+")) }) {
        return String(text)
    }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(text.utf8.count)
    var iterator = text.utf8.makeIterator()
    while let byte = iterator.next() {
        if byte == UInt8(ascii: "%") {
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        } else if plusAsSpace, byte == UInt8(ascii: "+") {
            bytes.append(UInt8(ascii: " "))
        } else {
            bytes.append(byte)
        }
    }
    return String(validating: bytes, as: UTF8.self)
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
    default: return nil
    }
}

/// The segments of a path split at `/`: without the empty one before the leading slash and the one
/// after a trailing slash (`/ui/` is `/ui`), but with empty ones between two slashes (`/a//b` has
/// three segments: an empty parameter is a value its handler judges, never a path of its own).
func pathSegments(_ parts: [String]) -> [String] {
    var parts = parts[...]
    if parts.first?.isEmpty == true { parts = parts.dropFirst() }
    if parts.last?.isEmpty == true { parts = parts.dropLast() }
    return Array(parts)
}

/// Splits `/a/b?x=1&y=2` into decoded path segments and query parameters (every value, in order).
func parseTarget(_ uri: String) -> (segments: [String], query: [String: [String]])? {
    // Most API calls: an origin-form path with no query and nothing to decode.
    if uri.utf8.first == UInt8(ascii: "/"),
        !uri.utf8.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "?") })
    {
        return (
            pathSegments(
                uri.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map {
                    String(Substring($0))
                }
            ), [:]
        )
    }
    var target = Substring(uri)
    // The absolute form (`GET http://host/path`) must be accepted too (RFC 9112 §3.2.2).
    for scheme in ["http://", "https://"]
    where target.utf8.first != UInt8(ascii: "/") && target.prefix(8).lowercased().hasPrefix(scheme) {
        target = target.dropFirst(scheme.count)
        target = target.firstIndex(of: "/").map { target[$0...] } ?? "/"
    }
    let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
    let rawPath = parts[0]
    var segments: [String] = []
    for raw in rawPath.split(separator: "/", omittingEmptySubsequences: false) {
        guard let segment = percentDecode(raw) else { return nil }
        segments.append(segment)
    }
    segments = pathSegments(segments)
    var query: [String: [String]] = [:]
    if parts.count > 1 {
        for pair in parts[1].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let key = percentDecode(kv[0], plusAsSpace: true) else { return nil }
            let value = kv.count > 1 ? percentDecode(kv[1], plusAsSpace: true) : ""
            guard let value else { return nil }
            query[key, default: []].append(value)
        }
    }
    return (segments, query)
}

/// An event loop as a TaskCore executor: work runs on the loop's thread, inline when called there.
struct EventLoopExecutor: Executor {
    let eventLoop: any EventLoop

    func execute(_ work: @escaping @Sendable () -> Void) {
        if self.eventLoop.inEventLoop { work() } else { self.eventLoop.execute(work) }
    }
}
