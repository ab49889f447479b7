import TaskGraph

// HTTP syntax the server checks: header names, `http`/`https` URLs, ASCII case. Jobs' webhooks,
// the `http` action, the outbound client and the configuration all check with these.

/// Checks of HTTP syntax, shared by everything that accepts or sends HTTP.
enum HTTPSyntax {
    /// Whether `name` is a non-empty HTTP token (RFC 9110 §5.6.2) of at most 256 bytes: what jobs
    /// may name as a header, and what the outbound client sends.
    static func isHeaderName(_ name: String) -> Bool {
        guard !name.utf8.isEmpty, name.utf8.count <= 256 else { return false }
        return name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
                UInt8(ascii: "'"),
                UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"),
                UInt8(ascii: "_"),
                UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
                return true
            default:
                return false
            }
        }
    }

    /// Whether `text` is an absolute `http`/`https` URL with a host (and, if given, a port 1…65535),
    /// without spaces or control characters.
    static func isHTTPURL(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return false }
        // (The scheme ends at the first "://"; an http or https scheme has no ':' of its own, so that
        // is also its first ':'.)
        guard let authority = URLAuthority(bytes) else { return false }
        let scheme = String(decoding: bytes[0..<authority.schemeEnd], as: UTF8.self)
        let lowerScheme = scheme.lowercasedASCII
        guard lowerScheme == "http" || lowerScheme == "https" else { return false }
        var host = bytes[authority.hostStart..<authority.end]
        var port: ArraySlice<UInt8>?
        if host.first == UInt8(ascii: "[") {
            guard let close = host.firstIndex(of: UInt8(ascii: "]")), close > host.startIndex + 1 else { return false }
            let after = host[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { return false }
                port = after.dropFirst()
            }
            host = host[host.startIndex...close]
        } else {
            if let colon = host.firstIndex(of: UInt8(ascii: ":")) {
                port = host[(colon + 1)...]
                host = host[..<colon]
            }
            guard !host.isEmpty else { return false }
            for byte in host {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "%"),
                    0x80...0xFF:
                    continue
                default:
                    return false
                }
            }
        }
        if let port {
            guard !port.isEmpty, port.count <= 5 else { return false }
            var value = 0
            for byte in port {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return false }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            guard value >= 1, value <= 65_535 else { return false }
        }
        return true
    }

    /// Where the parts of an absolute URL are, `scheme://[userinfo@]host[:port]` followed by `/`, `?`,
    /// `#` or the end: the server's one URL authority parser. `isHTTPURL` checks what it finds and
    /// `OutboundURL` keeps it.
    struct URLAuthority {
        /// The end of the scheme: the index of the first "://".
        let schemeEnd: Int
        /// Where the authority starts, after "://".
        let start: Int
        /// Where the authority ends: the index of the first '/', '?' or '#' after `start`, or the end.
        let end: Int
        /// Where the host (and its port) starts: after the authority's last '@', else `start`.
        let hostStart: Int

        /// The parts of the URL in `bytes`; nil without a "://" after a non-empty scheme.
        init?(_ bytes: [UInt8]) {
            var index = 0
            while index + 2 < bytes.count,
                !(bytes[index] == UInt8(ascii: ":") && bytes[index + 1] == UInt8(ascii: "/")
                    && bytes[index + 2] == UInt8(ascii: "/"))
            {
                index += 1
            }
            guard index > 0, index + 2 < bytes.count else { return nil }
            let authorityStart = index + 3
            var authorityEnd = authorityStart
            while authorityEnd < bytes.count, bytes[authorityEnd] != UInt8(ascii: "/"),
                bytes[authorityEnd] != UInt8(ascii: "?"),
                bytes[authorityEnd] != UInt8(ascii: "#")
            {
                authorityEnd += 1
            }
            var hostStart = authorityStart
            if let at = bytes[authorityStart..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) { hostStart = at + 1 }
            self.schemeEnd = index
            self.start = authorityStart
            self.end = authorityEnd
            self.hostStart = hostStart
        }
    }
}

extension String {
    /// The string with ASCII letters lowercased and every other character as is (header names are
    /// ASCII tokens); `self`, not a copy, when it has no capital letter.
    var lowercasedASCII: String {
        if !self.utf8.contains(where: { $0.lowercasedASCII != $0 }) { return self }
        return String(decoding: self.utf8.map(\.lowercasedASCII), as: UTF8.self)
    }
}
