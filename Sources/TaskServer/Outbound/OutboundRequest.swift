/// One outbound HTTP request, as `CurlClient.send` takes it.
public struct OutboundRequest: Sendable {
    /// The method, sent as given (`GET`, `POST`, …).
    public var method: String
    /// An absolute `http` or `https` URL.
    public var url: String
    /// Header fields in order; a field with an empty value is sent empty (not removed).
    public var headers: [(name: String, value: String)]
    /// The body, sent as is (nil: none).
    public var body: [UInt8]?
    /// The whole exchange's limit, counted from `send` (time queued behind the client's
    /// concurrency bound included).
    public var timeout: Duration
    /// Whether to follow redirects (at most 5, http and https only). Off by default.
    public var followRedirects: Bool
    /// The largest response body accepted (nil: the client's configured default).
    public var maxResponseBytes: Int?

    public init(
        method: String = "GET",
        url: String,
        headers: [(name: String, value: String)] = [],
        body: [UInt8]? = nil,
        timeout: Duration = .seconds(30),
        followRedirects: Bool = false,
        maxResponseBytes: Int? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.followRedirects = followRedirects
        self.maxResponseBytes = maxResponseBytes
    }
}

/// The answer to an `OutboundRequest` (any status: interpreting it is the caller's business).
public struct OutboundResponse: Sendable {
    /// The HTTP status code of the final response.
    public var status: Int
    /// The final response's header fields in the order received, names as the server wrote them.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// From `send` to the last byte.
    public var duration: Duration

    public init(
        status: Int,
        headers: [(name: String, value: String)] = [],
        body: [UInt8] = [],
        duration: Duration = .zero
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.duration = duration
    }

    /// The first value of header `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        self.headers.first { $0.name.lowercasedASCII == name.lowercasedASCII }?.value
    }
}

/// Why an outbound request produced no response.
///
/// Compared by `kind` only; `message` is for people (it never contains secrets, but may contain
/// the URL's host and an address).
public struct OutboundError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of failure; a struct with static members so that kinds can be added.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        let name: String

        /// No complete response within the request's timeout.
        public static let timeout = Kind(name: "timeout")
        /// The host name did not resolve, or no connection could be made (refused, unreachable).
        public static let connect = Kind(name: "connect")
        /// Every address of the host is refused by the outbound address policy; no connection was attempted.
        public static let refusedByPolicy = Kind(name: "refusedByPolicy")
        /// The response body exceeded the limit; the transfer was aborted.
        public static let responseTooLarge = Kind(name: "responseTooLarge")
        /// The request itself is unusable (malformed URL, unsupported scheme, bad header).
        public static let invalidRequest = Kind(name: "invalidRequest")
        /// The client was shut down before the request finished.
        public static let shutdown = Kind(name: "shutdown")
        /// Anything else: TLS, protocol errors, a connection reset mid-response, …
        public static let other = Kind(name: "other")

        public var description: String { self.name }
    }

    public var kind: Kind
    public var message: String
    /// The refused address (for `refusedByPolicy`).
    public var address: String?
    /// libcurl's `CURLcode`, when the failure came from libcurl.
    public var curlCode: Int?

    public init(_ kind: Kind, _ message: String, address: String? = nil, curlCode: Int? = nil) {
        self.kind = kind
        self.message = message
        self.address = address
        self.curlCode = curlCode
    }

    public static func == (lhs: OutboundError, rhs: OutboundError) -> Bool { lhs.kind == rhs.kind }

    public var description: String { self.message }
}
