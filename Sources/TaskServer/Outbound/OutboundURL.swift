/// The parts of an absolute URL that the outbound code needs: scheme, host and port, and the URL
/// without its userinfo (credentials never reach errors or logs).
struct OutboundURL: Sendable, Equatable {
    /// Lowercased (`https`).
    let scheme: String
    /// Lowercased host with its port as written (`hooks.example:8443`, `[::1]:80`, `example.org`).
    let hostAndPort: String
    /// The URL without `user:password@`.
    let redacted: String

    /// The parts of `url` (found by `HTTPSyntax.URLAuthority`); nil without a "://" after a scheme.
    init?(_ url: String) {
        let bytes = Array(url.utf8)
        guard let authority = HTTPSyntax.URLAuthority(bytes) else { return nil }
        self.scheme = String(decoding: bytes[0..<authority.schemeEnd], as: UTF8.self).lowercasedASCII
        self.hostAndPort = String(decoding: bytes[authority.hostStart..<authority.end], as: UTF8.self).lowercasedASCII
        self.redacted = String(decoding: bytes[0..<authority.start] + bytes[authority.hostStart...], as: UTF8.self)
    }

    /// `scheme://host:port` with the scheme's default port made explicit: the endpoint key under
    /// which webhook deliveries share their concurrency limit.
    var origin: String {
        let hasPort: Bool
        if self.hostAndPort.hasPrefix("[") {
            hasPort = !self.hostAndPort.hasSuffix("]")
        } else {
            hasPort = self.hostAndPort.contains(":")
        }
        if hasPort { return self.scheme + "://" + self.hostAndPort }
        return self.scheme + "://" + self.hostAndPort + (self.scheme == "https" ? ":443" : ":80")
    }
}
