extension DecodeState {
    // MARK: Scalars

    /// Whether `text` has at most `limit` characters (counted only when its UTF-8 form is longer).
    static func fits(_ text: String, _ limit: Int) -> Bool {
        text.utf8.count <= limit || text.count <= limit
    }

    // MARK: Job fields

    /// The job's `labels` (see the file comment of JobDecoder.swift for the rules).
    mutating func decodeLabels(_ value: JSONValue) -> [String: String] {
        guard case .object(let object) = value else {
            self.report(pointer: "/labels", "must be an object")
            return [:]
        }
        if object.count > 64 {
            self.report(pointer: "/labels", "must have at most 64 labels")
        }
        var labels: [String: String] = [:]
        labels.reserveCapacity(object.count)
        for member in object.members {
            let key = member.key
            let nameOK = !key.utf8.isEmpty && key.utf8.count <= 63 && key.utf8.allSatisfy { byte in
                TemplateSyntax.isNameByte(byte) || byte == UInt8(ascii: ".")
            }
            if !nameOK {
                self.report(
                    pointer: "/labels/" + JSONValue.escapePointerToken(key),
                    "invalid label name \(TemplateExpression.quoted(key)): use 1 to 63 letters, digits, '_', '.' or '-'")
                continue
            }
            guard case .string(let text) = member.value else {
                self.report(pointer: "/labels/" + key, "must be a string")
                continue
            }
            if !DecodeState.fits(text, 200) {
                self.report(pointer: "/labels/" + key, "must be at most 200 characters")
                continue
            }
            labels[key] = text
        }
        return labels
    }

    /// The job's `webhook` (SPEC §4).
    mutating func decodeWebhook(_ value: JSONValue, at pointer: String) -> WebhookSpec? {
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object")
            return nil
        }
        let before = self.problemCount
        var spec = WebhookSpec(url: "")
        var sawURL = false
        var unknown = false
        for member in object.members {
            switch member.key {
            case "url", "secret", "events", "headers", "retry": break
            default: unknown = true
            }
        }
        if unknown {
            self.reportUnknownFields(object, at: pointer, known: DecodeState.webhookFields, isKnown: { DecodeState.webhookFields.contains($0) })
        }
        if let url = object["url"] {
            sawURL = true
            if case .string(let text) = url {
                if text.utf8.count > 2048 {
                    self.report(pointer, "url", "must be at most 2048 characters")
                } else if !DecodeState.isHTTPURL(text) {
                    self.report(pointer, "url", "must be an absolute http or https URL with a host")
                }
                spec.url = text
            } else {
                self.report(pointer, "url", "must be a string")
            }
        }
        if !sawURL { self.report(pointer, "url", "required") }

        if let secret = object["secret"] {
            if case .string(let text) = secret {
                if let problem = JobDecoder.webhookSecretProblem(text) { self.report(pointer, "secret", problem) }
                spec.secret = text
            } else {
                self.report(pointer, "secret", "must be a string")
            }
        }

        if let events = object["events"] {
            if case .array(let items) = events {
                if items.isEmpty { self.report(pointer, "events", "must not be empty") }
                var patterns: [String] = []
                for (index, item) in items.enumerated() {
                    guard case .string(let text) = item else {
                        self.report(pointer: pointer + "/events/" + String(index), "must be a string")
                        continue
                    }
                    if !DecodeState.isEventPattern(text) {
                        self.report(
                            pointer: pointer + "/events/" + String(index),
                            "unknown event type \(TemplateExpression.quoted(text)); expected one of "
                                + DecodeState.eventTypes.joined(separator: ", ") + ", or a pattern such as \"job.*\"")
                    }
                    patterns.append(text)
                }
                spec.events = patterns
            } else {
                self.report(pointer, "events", "must be an array of event types")
            }
        }

        if let headers = object["headers"] {
            if case .object(let members) = headers {
                var seen: [String: String] = [:]
                for member in members {
                    let name = member.key
                    let headerPointer = { pointer + "/headers/" + JSONValue.escapePointerToken(name) }
                    guard DecodeState.isHeaderName(name) else {
                        self.report(
                            pointer: headerPointer(),
                            "invalid header name \(TemplateExpression.quoted(name)): use letters, digits and !#$%&'*+-.^_`|~")
                        continue
                    }
                    let lower = DecodeState.asciiLowercased(name)
                    if DecodeState.reservedHeaders.contains(lower) {
                        self.report(pointer: headerPointer(), "header \(TemplateExpression.quoted(name)) is set by the server and cannot be overridden")
                        continue
                    }
                    if let first = seen[lower] {
                        self.report(
                            pointer: headerPointer(),
                            "duplicate header \(TemplateExpression.quoted(name)) (header names are case-insensitive; first given as \(TemplateExpression.quoted(first)))")
                        continue
                    }
                    seen[lower] = name
                    guard case .string(let text) = member.value else {
                        self.report(pointer: headerPointer(), "must be a string")
                        continue
                    }
                    if text.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
                        self.report(pointer: headerPointer(), "must not contain CR, LF or NUL")
                        continue
                    }
                    spec.headers[name] = text
                }
            } else {
                self.report(pointer, "headers", "must be an object")
            }
        }

        if let retry = object["retry"] {
            if let decoded = self.decodeRetry(retry, at: pointer + "/retry", rules: .webhook) { spec.retry = decoded }
        }
        return self.problemCount == before ? spec : nil
    }

    /// Whether `text` is an event type of SPEC §3.4 or a `*`-suffixed pattern matching at least one.
    static func isEventPattern(_ text: String) -> Bool {
        if DecodeState.eventTypes.contains(text) { return true }
        guard text.hasSuffix("*") else { return false }
        let prefix = text.dropLast()
        guard !prefix.contains("*") else { return false }
        return DecodeState.eventTypes.contains { $0.hasPrefix(prefix) }
    }

    /// Whether `name` is a non-empty HTTP token (RFC 9110 §5.6.2) of at most 256 bytes: what jobs
    /// may name as a header, and what the outbound client sends.
    public static func isHeaderName(_ name: String) -> Bool {
        guard !name.utf8.isEmpty, name.utf8.count <= 256 else { return false }
        return name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
                UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
                UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
                return true
            default:
                return false
            }
        }
    }

    static func asciiLowercased(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 >= 65 && $0 <= 90 }) else { return text }
        return String(decoding: text.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self)
    }

    /// The number of bytes standard base64 `text` (padding optional) decodes to, or `nil` if it is not base64.
    static func base64DecodedLength(_ text: Substring.UTF8View) -> Int? {
        var symbols = 0
        var padding = 0
        for byte in text {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding > 0 { return nil }
                symbols += 1
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 { return nil }
            default:
                return nil
            }
        }
        if symbols % 4 == 1 { return nil }
        if padding > 0, (symbols + padding) % 4 != 0 { return nil }
        return symbols * 3 / 4
    }

    /// Whether `text` is an absolute `http`/`https` URL with a host (and, if given, a port 1…65535),
    /// without spaces or control characters.
    static func isHTTPURL(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return false }
        var index = 0
        while index < bytes.count, bytes[index] != UInt8(ascii: ":") { index += 1 }
        let scheme = String(decoding: bytes[0..<index], as: UTF8.self)
        let lowerScheme = DecodeState.asciiLowercased(scheme)
        guard lowerScheme == "http" || lowerScheme == "https" else { return false }
        guard index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "/"), bytes[index + 2] == UInt8(ascii: "/") else {
            return false
        }
        let authorityStart = index + 3
        var authorityEnd = authorityStart
        while authorityEnd < bytes.count, bytes[authorityEnd] != UInt8(ascii: "/"), bytes[authorityEnd] != UInt8(ascii: "?"),
            bytes[authorityEnd] != UInt8(ascii: "#")
        {
            authorityEnd += 1
        }
        var hostStart = authorityStart
        if let at = bytes[authorityStart..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) { hostStart = at + 1 }
        var host = bytes[hostStart..<authorityEnd]
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
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "%"), 0x80...0xFF:
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
}
