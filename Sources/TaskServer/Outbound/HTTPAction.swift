import Dispatch
import TaskCore
import TaskGraph

/// The `http` action (SPEC §1.2): one HTTP request per attempt, made with libcurl.
///
/// Params (string params are templates, rendered before the attempt):
/// - `url` (required): absolute `http` or `https` URL.
/// - `method`: `GET` (default), `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE` or `OPTIONS`.
/// - `headers`: object of header name → value (numbers and booleans are sent as their JSON text).
/// - `body`: a string is sent as is (`text/plain; charset=utf-8` unless `headers` set a content
///   type); any other JSON value is sent as compact JSON (`application/json`); absent or `null`:
///   no body.
/// - `timeoutMs`: 1…3 600 000, default 30 000, for the whole exchange.
/// - `expectStatus`: list of codes (`404`) or classes (`"2xx"`); default `["2xx"]`.
///
/// Result: `{"status", "headers", "body"}`. Header names are lowercased (repeated fields are joined
/// with `", "`); a body whose content type is JSON (`application/json`, `…+json`) and parses is the
/// JSON value, any other body is a string (invalid UTF-8 replaced).
///
/// Errors, all retryable through the task's `retry`: `http.status` (a status outside
/// `expectStatus`; `details.status`, `details.body` = the first 1 KiB of the body as text),
/// `http.timeout`, `http.connect` (DNS, refused or unreachable, or an address the outbound policy
/// refuses: `details.reason = "policy"`) and `http.error` (TLS, protocol, a response body over the
/// limit, …). Redirects are not followed. Cancellation aborts the transfer at once.
public struct HTTPAction: Action {
    static let parameters: Set<String> = ["method", "url", "headers", "body", "timeoutMs", "expectStatus"]
    static let methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    /// Headers the client computes from the body itself.
    static let reservedHeaders: Set<String> = ["content-length", "transfer-encoding"]
    public static let defaultTimeoutMilliseconds = 30_000
    public static let maxTimeoutMilliseconds = 3_600_000
    /// The most of a non-matching response's body kept in `details.body`.
    static let bodyExcerptBytes = 1024

    let client: CurlClient
    /// Client spans and `traceparent` (issue #46), when tracing is on.
    let tracing: ServerTracing?

    /// An `http` action whose requests go through `client`.
    public init(client: CurlClient) {
        self.client = client
        self.tracing = nil
    }

    /// An `http` action whose requests go through `client`, traced by `tracing`.
    init(client: CurlClient, tracing: ServerTracing?) {
        self.client = client
        self.tracing = tracing
    }

    public var name: String { "http" }

    // MARK: - Static validation

    public func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] {
        var checker = ParamChecker(params, at: pointer, allowed: Self.parameters)
        guard case .object = params else { return checker.problems }
        func report(_ path: String, _ message: String) {
            checker.problems.append(ValidationProblem(pointer: pointer + path, message: message))
        }
        if params["url"] == nil {
            report("/url", "required")
        } else if let url = checker.literal("url") {
            if let text = url.stringValue {
                if !HTTPSyntax.isHTTPURL(text) { report("/url", "must be an absolute http or https URL with a host") }
            } else {
                report("/url", "must be a string")
            }
        }
        if let method = checker.literal("method") {
            if Self.method(method) == nil {
                report("/method", "must be one of " + Self.methods.joined(separator: ", "))
            }
        }
        if let headers = checker.params["headers"], !(headers.stringValue.map { $0.contains("${") } ?? false) {
            for problem in Self.headerProblems(headers) { report("/headers" + problem.path, problem.message) }
        }
        checker.integer("timeoutMs", in: 1...Self.maxTimeoutMilliseconds)
        if let expect = checker.params["expectStatus"], !(expect.stringValue.map { $0.contains("${") } ?? false) {
            for problem in Self.expectProblems(expect) { report("/expectStatus" + problem.path, problem.message) }
        }
        return checker.problems
    }

    /// The method named by `value` (case-insensitive), or nil.
    static func method(_ value: JSONValue) -> String? {
        guard let text = value.stringValue else { return nil }
        let upper = text.uppercased()
        return Self.methods.contains(upper) ? upper : nil
    }

    /// Problems of a `headers` value (relative pointers); template strings pass.
    static func headerProblems(_ headers: JSONValue) -> [(path: String, message: String)] {
        guard case .object(let object) = headers else { return [("", "must be an object of header names to values")] }
        var problems: [(String, String)] = []
        var seen: [String: String] = [:]
        for (name, value) in object {
            let path = JSONPointer.appending("", name)
            guard HTTPSyntax.isHeaderName(name) else {
                problems.append(
                    (path, "invalid header name \"\(name.prefix(100))\": use letters, digits and !#$%&'*+-.^_`|~")
                )
                continue
            }
            let lower = name.lowercasedASCII
            if Self.reservedHeaders.contains(lower) {
                problems.append((path, "header \"\(name)\" is computed from the body and cannot be set"))
                continue
            }
            if let first = seen[lower] {
                problems.append(
                    (
                        path,
                        "duplicate header \"\(name)\" (header names are case-insensitive; first given as \"\(first)\")"
                    )
                )
                continue
            }
            seen[lower] = name
            switch value {
            case .string(let text):
                if text.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
                    problems.append((path, "must not contain CR, LF or NUL"))
                }
            case .int, .double, .bool:
                break
            default:
                problems.append((path, "must be a string, a number or a boolean"))
            }
        }
        return problems
    }

    /// Problems of an `expectStatus` value (relative pointers); template strings pass.
    static func expectProblems(_ value: JSONValue) -> [(path: String, message: String)] {
        guard case .array(let items) = value, !items.isEmpty else {
            return [("", "must be a non-empty array of status codes (200) or classes (\"2xx\")")]
        }
        var problems: [(String, String)] = []
        for (index, item) in items.enumerated() where StatusPattern(item) == nil {
            if let text = item.stringValue, text.contains("${") { continue }
            problems.append(("/\(index)", "must be a status code from 100 to 599 or a class \"1xx\" to \"5xx\""))
        }
        return problems
    }

    // MARK: - Running

    public func run(_ context: ActionContext) -> Future<JSONValue> {
        let request: OutboundRequest
        let expected: [StatusPattern]
        do {
            (request, expected) = try Self.request(from: context.params)
        } catch {
            return Future(error: error)
        }
        let method = request.method
        let url = request.url
        let sent: Future<OutboundResponse>
        if let attempt = context.trace as? TracedAttempt, let tracing = self.tracing {
            // The call is a span under the attempt's, and its receiver's spans descend from it.
            var traced = request
            let span = tracing.startClientSpan(&traced, under: attempt.span.own)
            sent = self.client.send(traced, cancellationToken: context.cancellationToken)
            sent.whenComplete { tracing.endClientSpan(span, $0) }
        } else {
            sent = self.client.send(request, cancellationToken: context.cancellationToken)
        }
        return sent.continueWithTask(on: .immediate) { finished in
            switch finished.outcome! {
            case .cancelled:
                return .cancelled()
            case .failure(let error):
                throw Self.taskError(error, method: method, url: url)
            case .success(let response):
                // Conversion parses the body: large bodies are converted off the client's thread.
                if response.body.count <= 64 << 10 {
                    return Future(
                        outcome: Outcome { try Self.result(response, expected: expected, method: method, url: url) }
                    )
                }
                let promise = Promise<JSONValue>()
                DispatchQueue.global().async {
                    promise.complete(
                        with: Outcome { try Self.result(response, expected: expected, method: method, url: url) }
                    )
                }
                return promise.future
            }
        }
    }

    /// The request described by rendered params, and the accepted statuses.
    static func request(from params: JSONValue) throws(TaskError) -> (OutboundRequest, [StatusPattern]) {
        func invalid(_ message: String) -> TaskError { TaskError(code: "params.invalid", message: message) }
        guard case .object = params else { throw invalid("params must be an object") }
        guard let url = params["url"]?.stringValue, HTTPSyntax.isHTTPURL(url) else {
            throw invalid(
                "params.url must be an absolute http or https URL with a host, got \(params["url"].map { "\($0)".prefix(200) } ?? "nothing")"
            )
        }
        var method = "GET"
        if let value = params["method"], !value.isNull {
            guard let parsed = Self.method(value) else {
                throw invalid("params.method must be one of \(Self.methods.joined(separator: ", ")), got \(value)")
            }
            method = parsed
        }
        var headers: [(name: String, value: String)] = []
        var hasContentType = false
        if let value = params["headers"], !value.isNull {
            if let problem = Self.headerProblems(value).first {
                throw invalid("params.headers\(problem.path.isEmpty ? "" : " " + problem.path): \(problem.message)")
            }
            for (name, field) in value.objectValue ?? JSONObject() {
                let text = field.stringValue ?? field.jsonString
                if name.lowercasedASCII == "content-type" { hasContentType = true }
                headers.append((name, text))
            }
        }
        var body: [UInt8]?
        switch params["body"] {
        case nil, .null?:
            break
        case .string(let text)?:
            body = Array(text.utf8)
            if !hasContentType { headers.append(("Content-Type", "text/plain; charset=utf-8")) }
        case let value?:
            body = value.jsonBytes
            if !hasContentType { headers.append(("Content-Type", "application/json")) }
        }
        let timeoutMs =
            try params.integerParam("timeoutMs", in: 1...Self.maxTimeoutMilliseconds) ?? Self.defaultTimeoutMilliseconds
        var expected = [StatusPattern.success]
        if let value = params["expectStatus"], !value.isNull {
            if let problem = Self.expectProblems(value).first {
                throw invalid("params.expectStatus\(problem.path): \(problem.message)")
            }
            expected = (value.arrayValue ?? []).compactMap(StatusPattern.init)
        }
        let request = OutboundRequest(
            method: method,
            url: url,
            headers: headers,
            body: body,
            timeout: .milliseconds(timeoutMs)
        )
        return (request, expected)
    }

    /// The action's result for `response`, or `http.status` when its status is not expected.
    static func result(
        _ response: OutboundResponse,
        expected: [StatusPattern],
        method: String,
        url: String
    ) throws(TaskError) -> JSONValue {
        guard expected.contains(where: { $0.matches(response.status) }) else {
            var excerpt = Array(response.body.prefix(Self.bodyExcerptBytes))
            // Cut at a character boundary: drop a trailing partial UTF-8 sequence.
            if response.body.count > excerpt.count {
                while let last = excerpt.last, last & 0xC0 == 0x80 { excerpt.removeLast() }
                if let last = excerpt.last, last >= 0xC0 { excerpt.removeLast() }
            }
            throw TaskError(
                code: "http.status",
                message: "\(method) \(Self.redacted(url)) answered \(response.status)",
                details: ["status": .int(response.status), "body": .string(String(decoding: excerpt, as: UTF8.self))]
            )
        }
        var headers = JSONObject()
        for (name, value) in response.headers {
            let lower = name.lowercasedASCII
            if let existing = headers[lower]?.stringValue {
                headers[lower] = .string(existing + ", " + value)
            } else {
                headers[lower] = .string(value)
            }
        }
        var body: JSONValue = .string(String(decoding: response.body, as: UTF8.self))
        if Self.isJSON(response.header("content-type")), let parsed = try? JSONParser.parse(response.body) {
            body = parsed
        }
        return ["status": .int(response.status), "headers": .object(headers), "body": body]
    }

    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let media = contentType.split(separator: ";").first.map { $0.trimmingSpaces.lowercased() } ?? ""
        return media == "application/json" || (media.hasPrefix("application/") && media.hasSuffix("+json"))
    }

    /// The task error for a failed exchange.
    static func taskError(_ error: any Error, method: String, url: String) -> TaskError {
        let target = "\(method) \(Self.redacted(url))"
        guard let error = error as? OutboundError else {
            return TaskError(code: "http.error", message: "\(target) failed: \(error)")
        }
        switch error.kind {
        case .timeout:
            return TaskError(code: "http.timeout", message: "\(target) timed out: \(error.message)")
        case .connect:
            return TaskError(code: "http.connect", message: "\(target) failed: \(error.message)")
        case .refusedByPolicy:
            return TaskError(
                code: "http.connect",
                message: "\(target) failed: \(error.message)",
                details: ["reason": "policy", "address": error.address.map(JSONValue.string) ?? .null]
            )
        case .responseTooLarge:
            return TaskError(
                code: "http.error",
                message: "\(target) failed: \(error.message)",
                details: ["reason": "responseTooLarge"]
            )
        default:
            return TaskError(code: "http.error", message: "\(target) failed: \(error.message)")
        }
    }

    /// `url` without its userinfo (credentials never reach errors or logs).
    static func redacted(_ url: String) -> String {
        OutboundURL(url)?.redacted ?? url
    }
}

/// One entry of `expectStatus`: a code (`404`) or a class (`"2xx"`).
struct StatusPattern: Sendable, Equatable {
    let low: Int
    let high: Int

    static let success = StatusPattern(low: 200, high: 299)

    init(low: Int, high: Int) {
        self.low = low
        self.high = high
    }

    /// From `200`, `"200"` or `"2xx"` (`"2XX"`); nil otherwise.
    init?(_ value: JSONValue) {
        if let code = value.intValue, (100...599).contains(code) {
            self.init(low: code, high: code)
            return
        }
        guard let text = value.stringValue, text.utf8.count == 3 else { return nil }
        let bytes = Array(text.utf8)
        guard (UInt8(ascii: "1")...UInt8(ascii: "5")).contains(bytes[0]) else { return nil }
        let first = Int(bytes[0] - UInt8(ascii: "0"))
        if bytes[1] == UInt8(ascii: "x") || bytes[1] == UInt8(ascii: "X"), bytes[2] == bytes[1] {
            self.init(low: first * 100, high: first * 100 + 99)
            return
        }
        guard let code = Int(text), (100...599).contains(code) else { return nil }
        self.init(low: code, high: code)
    }

    func matches(_ status: Int) -> Bool { (self.low...self.high).contains(status) }
}
