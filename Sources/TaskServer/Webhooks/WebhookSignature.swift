import CCrypto

/// Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
///
/// The HMAC is OpenSSL's (libcrypto, through the CCrypto shim); nothing here hashes by hand.
enum WebhookSignature {
    /// The key bytes of a secret: the base64 after `whsec_` (padding optional), or the UTF-8 bytes
    /// of any other secret. Nil for a `whsec_` secret whose base64 is invalid.
    static func key(fromSecret secret: String) -> [UInt8]? {
        if let encoded = Self.encodedKey(of: secret) { return Base64.decode(encoded) }
        return Array(secret.utf8)
    }

    /// The base64 of a Standard Webhooks secret, after its `whsec_`; nil for a raw secret.
    static func encodedKey(of secret: String) -> Substring? {
        secret.hasPrefix("whsec_") ? secret.dropFirst(6) : nil
    }

    /// Why `secret` is not a usable webhook secret (nil when it is): `whsec_` followed by base64 of
    /// 1…64 bytes, or any other non-empty text of at most 256 characters (raw key bytes). The
    /// configuration's `--webhook-secret` and a job's `webhook.secret` are checked with it.
    static func secretProblem(_ secret: String) -> String? {
        if let encoded = Self.encodedKey(of: secret) {
            guard let length = Base64.decodedLength(encoded.utf8), (1...64).contains(length) else {
                return "a secret starting with \"whsec_\" must continue with base64 that decodes to 1 to 64 bytes"
            }
            return nil
        }
        // (Characters are counted only when the UTF-8 form is longer, as JobDecoder counts them.)
        if secret.isEmpty || !(secret.utf8.count <= 256 || secret.count <= 256) {
            return "must be a non-empty string of at most 256 characters"
        }
        return nil
    }

    /// The `webhook-signature` header value for one attempt.
    static func sign(id: String, timestamp: Int64, body: [UInt8], key: [UInt8]) -> String {
        var message = Array(id.utf8)
        message.append(UInt8(ascii: "."))
        message.append(contentsOf: String(timestamp).utf8)
        message.append(UInt8(ascii: "."))
        message.append(contentsOf: body)
        return "v1," + Base64.encode(Self.hmacSHA256(key: key, message: message))
    }

    /// HMAC-SHA256 of `message` keyed with `key` (32 bytes).
    static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = key.withUnsafeBytes { keyBytes in
            message.withUnsafeBufferPointer { data in
                out.withUnsafeMutableBufferPointer { digest in
                    ts_hmac_sha256(
                        keyBytes.baseAddress,
                        Int32(keyBytes.count),
                        data.baseAddress,
                        data.count,
                        digest.baseAddress
                    )
                }
            }
        }
        precondition(ok == 1, "HMAC-SHA256 failed in libcrypto")
        return out
    }
}

/// Standard base64 (RFC 4648 §4), as Standard Webhooks uses it.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// `bytes` as padded base64.
    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            for shift in [18, 12, 6, 0] { out.append(Self.alphabet[Int(value >> UInt32(shift) & 63)]) }
            index += 3
        }
        let rest = bytes.count - index
        if rest > 0 {
            var value = UInt32(bytes[index]) << 16
            if rest == 2 { value |= UInt32(bytes[index + 1]) << 8 }
            out.append(Self.alphabet[Int(value >> 18 & 63)])
            out.append(Self.alphabet[Int(value >> 12 & 63)])
            out.append(rest == 2 ? Self.alphabet[Int(value >> 6 & 63)] : UInt8(ascii: "="))
            out.append(UInt8(ascii: "="))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of standard base64 text, padding optional; nil when malformed.
    static func decode(_ text: Substring) -> [UInt8]? {
        guard let length = Self.decodedLength(text.utf8) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(length)
        var buffer: UInt32 = 0
        var bits = 0
        // Valid, so every byte is a symbol up to the padding.
        for byte in text.utf8 {
            guard let symbol = Self.value(of: byte) else { break }
            buffer = buffer << 6 | UInt32(symbol)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        return out
    }

    /// The number of bytes standard base64 `text` (padding optional) decodes to, or `nil` if it is
    /// not base64: the one definition of valid base64 here, which `decode` checks first.
    static func decodedLength(_ text: Substring.UTF8View) -> Int? {
        var symbols = 0
        var padding = 0
        for byte in text {
            if Self.value(of: byte) != nil {
                if padding > 0 { return nil }
                symbols += 1
            } else if byte == UInt8(ascii: "=") {
                padding += 1
                if padding > 2 { return nil }
            } else {
                return nil
            }
        }
        if symbols % 4 == 1 { return nil }
        if padding > 0, (symbols + padding) % 4 != 0 { return nil }
        return symbols * 3 / 4
    }

    /// The 6-bit value of a base64 symbol; nil for any other byte (`=` included).
    private static func value(of byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): return 62
        case UInt8(ascii: "/"): return 63
        default: return nil
        }
    }
}
