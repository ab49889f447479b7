/// The parts of an absolute URL that the outbound code needs: scheme, host and port, and the URL
/// without its userinfo (credentials never reach errors or logs).
struct OutboundURL: Sendable, Equatable {
    /// Lowercased (`https`).
    let scheme: String
    /// Lowercased host with its port as written (`hooks.example:8443`, `[::1]:80`, `example.org`).
    let hostAndPort: String
    /// The URL without `user:password@`.
    let redacted: String

    init?(_ url: String) {
        let bytes = Array(url.utf8)
        var index = 0
        while index + 2 < bytes.count,
            !(bytes[index] == UInt8(ascii: ":") && bytes[index + 1] == UInt8(ascii: "/") && bytes[index + 2] == UInt8(ascii: "/"))
        {
            index += 1
        }
        guard index > 0, index + 2 < bytes.count else { return nil }
        let authorityStart = index + 3
        var authorityEnd = authorityStart
        while authorityEnd < bytes.count, ![UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#")].contains(bytes[authorityEnd]) {
            authorityEnd += 1
        }
        var hostStart = authorityStart
        if let at = bytes[authorityStart..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) { hostStart = at + 1 }
        self.scheme = String(decoding: bytes[0..<index], as: UTF8.self).lowercasedASCII
        self.hostAndPort = String(decoding: bytes[hostStart..<authorityEnd], as: UTF8.self).lowercasedASCII
        self.redacted = String(decoding: bytes[0..<authorityStart] + bytes[hostStart...], as: UTF8.self)
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
