// MARK: - Compact serialization

extension JSONValue {
    /// The value as compact JSON text (no insignificant whitespace), keys in their stored order.
    public var jsonString: String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        self.write(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The value as compact UTF-8 JSON bytes.
    public var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        self.write(into: &out)
        return out
    }

    /// Appends the compact JSON text of this value to `out`.
    ///
    /// Iterative over arrays and objects would complicate this for no gain: values that reach the
    /// serializer were built by the parser (depth-limited) or by our own code.
    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: JSONValue.writeNull(into: &out)
        case .bool(let b): JSONValue.writeLiteral(b ? "true" : "false", into: &out)
        case .int(let i): JSONValue.writeInt(i, into: &out)
        case .double(let d): JSONValue.writeDouble(d, into: &out)
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            var first = true
            for item in items {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            var first = true
            for member in object.members {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                JSONValue.writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeNull(into out: inout [UInt8]) {
        JSONValue.writeLiteral("null", into: &out)
    }

    /// Appends ASCII text that needs no escaping.
    static func writeLiteral(_ text: StaticString, into out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Appends the decimal digits of `value` (no `String` in between).
    static func writeInt(_ value: Int, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so `Int.min` has one too.
        var magnitude = value.magnitude
        if magnitude < 10 {
            out.append(0x30 + UInt8(magnitude))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            while magnitude > 0 {
                start -= 1
                digits[start] = 0x30 + UInt8(magnitude % 10)
                magnitude /= 10
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    static func writeDouble(_ d: Double, into out: inout [UInt8]) {
        guard d.isFinite else {
            // JSON has no NaN or infinity; the parser never produces them, so this only guards our own values.
            JSONValue.writeNull(into: &out)
            return
        }
        if abs(d) < 1e15, Double(Int(d)) == d {
            // Integral doubles print without a fraction ("3", not "3.0"): JSON has one number type.
            // (Tested through `Int(d)`, not `rounded()`, which calls libm and fails to link in a
            // program that imports neither Foundation nor Glibc.)
            out.append(contentsOf: String(Int(d)).utf8)
            return
        }
        // Swift's description is the shortest round-tripping form ("1e+20", "0.1"), which is valid JSON.
        out.append(contentsOf: d.description.utf8)
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var utf8 = s.utf8
        // Fast path: no byte needs escaping, so the bytes are copied as they are.
        let copied = utf8.withContiguousStorageIfAvailable { buffer -> Bool in
            if buffer.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) { return false }
            out.append(contentsOf: buffer)
            return true
        }
        if copied == true {
            out.append(UInt8(ascii: "\""))
            return
        }
        if copied == nil {
            var copy = s
            copy.makeContiguousUTF8()
            utf8 = copy.utf8
        }
        for byte in utf8 {
            switch byte {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, 0x6E])
            case 0x0D: out.append(contentsOf: [0x5C, 0x72])
            case 0x09: out.append(contentsOf: [0x5C, 0x74])
            case 0x08: out.append(contentsOf: [0x5C, 0x62])
            case 0x0C: out.append(contentsOf: [0x5C, 0x66])
            case 0..<0x20:
                out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30])
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension JSONValue: CustomStringConvertible {
    public var description: String { self.jsonString }
}
