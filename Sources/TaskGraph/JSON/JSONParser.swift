// A strict (RFC 8259), byte-level JSON parser that builds `JSONValue`s.
//
// The parser is iterative: containers live on an explicit stack, so hostile nesting costs heap, not
// call stack, and the depth limit is a plain counter check. Values are built by moving them out of
// that stack into their arrays, without extra retain/release traffic. Strings without escapes are
// made straight from the input bytes after validating them as UTF-8.
//
// One file of ~800 lines on purpose: the scanner, the container stack and the string and number
// readers share one hot loop over one byte buffer, and splitting them would put `internal` state
// and calls across files where the optimizer now inlines them (the parser is a tenth of a POST).

// MARK: - Public API

/// Parses JSON text into a `JSONValue`.
///
/// The grammar is strict RFC 8259: exactly one value with optional surrounding whitespace (space,
/// tab, CR, LF); no comments, trailing commas, `NaN`/`Infinity`, leading zeros or single quotes.
/// Strings must be well-formed UTF-8 with no raw control characters and no lone surrogate escapes.
/// Duplicate keys in one object are rejected, since `JSONObject` keys are unique.
///
/// Integer literals that fit in `Int` become `.int`; every other number becomes a correctly rounded
/// `.double`; a number too large for `Double` is an error.
public struct JSONParser {
    /// Resource limits that bound the work and memory a hostile document can cause.
    public struct Limits: Sendable {
        /// The deepest nesting of arrays and objects allowed (`[[1]]` has depth 2).
        public var maxDepth: Int
        /// The largest input accepted, in bytes.
        public var maxBytes: Int
        /// The longest string accepted, in bytes of UTF-8 after decoding escapes.
        public var maxStringBytes: Int

        /// Creates limits; the defaults suit request bodies.
        public init(maxDepth: Int = 256, maxBytes: Int = 16 << 20, maxStringBytes: Int = 16 << 20) {
            self.maxDepth = maxDepth
            self.maxBytes = maxBytes
            self.maxStringBytes = maxStringBytes
        }
    }

    /// Parses one JSON document from UTF-8 bytes.
    public static func parse(
        _ bytes: UnsafeBufferPointer<UInt8>,
        limits: Limits = Limits()
    ) throws(JSONParseError) -> JSONValue {
        try Self.parseBuffer(bytes, limits: limits).get()
    }

    /// Parses one JSON document from UTF-8 bytes.
    public static func parse(
        _ bytes: UnsafeRawBufferPointer,
        limits: Limits = Limits()
    ) throws(JSONParseError) -> JSONValue {
        let result = bytes.withMemoryRebound(to: UInt8.self) { Self.parseBuffer($0, limits: limits) }
        return try result.get()
    }

    /// Parses one JSON document from UTF-8 bytes.
    public static func parse(_ bytes: [UInt8], limits: Limits = Limits()) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { Self.parseBuffer($0, limits: limits) }.get()
    }

    /// Parses one JSON document from UTF-8 bytes.
    public static func parse(_ bytes: ArraySlice<UInt8>, limits: Limits = Limits()) throws(JSONParseError) -> JSONValue
    {
        try bytes.withUnsafeBufferPointer { Self.parseBuffer($0, limits: limits) }.get()
    }

    /// Parses one JSON document from a string's UTF-8.
    public static func parse(_ text: String, limits: Limits = Limits()) throws(JSONParseError) -> JSONValue {
        if let result = text.utf8.withContiguousStorageIfAvailable({ Self.parseBuffer($0, limits: limits) }) {
            return try result.get()
        }
        var copy = text
        return try copy.withUTF8 { Self.parseBuffer($0, limits: limits) }.get()
    }

    /// Parses one JSON document from any collection of UTF-8 bytes (for example Foundation's `Data`).
    ///
    /// Contiguous collections are parsed in place; others are copied into an array first.
    @inlinable
    public static func parse(
        _ bytes: some Collection<UInt8>,
        limits: Limits = Limits()
    ) throws(JSONParseError) -> JSONValue {
        if let result = bytes.withContiguousStorageIfAvailable({ Self.parseBuffer($0, limits: limits) }) {
            return try result.get()
        }
        return try Self.parse(Array(bytes), limits: limits)
    }

    /// The single entry point of the parser proper; returns a `Result` so that it can run inside the
    /// many `rethrows` buffer accessors without losing the typed error.
    @usableFromInline
    static func parseBuffer(_ buffer: UnsafeBufferPointer<UInt8>, limits: Limits) -> Result<JSONValue, JSONParseError> {
        guard buffer.count <= limits.maxBytes else {
            return .failure(
                JSONParseError(message: "input larger than \(limits.maxBytes) bytes", offset: 0, line: 1, column: 1)
            )
        }
        guard let base = buffer.baseAddress, buffer.count > 0 else {
            return .failure(JSONParseError(message: "unexpected end of input", offset: 0, line: 1, column: 1))
        }
        var parser = JSONByteParser(base: base, count: buffer.count, limits: limits)
        do throws(JSONParseError) {
            return .success(try parser.parseDocument())
        } catch {
            return .failure(error)
        }
    }
}

/// Why a document was rejected, and where.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, for example `unexpected character 'x'` or `duplicate key "a"`.
    public var message: String
    /// The byte offset of the problem from the start of the input.
    public var offset: Int
    /// The 1-based line of the problem (lines end at LF).
    public var line: Int
    /// The 1-based column of the problem, counted in bytes.
    public var column: Int

    /// Creates an error at a given position.
    public init(message: String, offset: Int, line: Int, column: Int) {
        self.message = message
        self.offset = offset
        self.line = line
        self.column = column
    }

    /// The position and message, for example `line 3, column 7: unexpected character 'x'`.
    public var description: String { "line \(self.line), column \(self.column): \(self.message)" }
}

// MARK: - Byte parser

private enum ASCII {
    static let quote = UInt8(ascii: "\"")
    static let backslash = UInt8(ascii: "\\")
    static let slash = UInt8(ascii: "/")
    static let comma = UInt8(ascii: ",")
    static let colon = UInt8(ascii: ":")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
    static let minus = UInt8(ascii: "-")
    static let plus = UInt8(ascii: "+")
    static let dot = UInt8(ascii: ".")
    static let zero = UInt8(ascii: "0")
    static let nine = UInt8(ascii: "9")
    static let lowerE = UInt8(ascii: "e")
    static let upperE = UInt8(ascii: "E")
    static let space = UInt8(ascii: " ")
    static let tab = UInt8(ascii: "\t")
    static let lineFeed = UInt8(ascii: "\n")
    static let carriageReturn = UInt8(ascii: "\r")
}

/// One open array or object.
private struct Frame {
    /// Where the container's elements start on the value stack (arrays) or member stack (objects).
    var start: Int
    var isObject: Bool
    /// Whether the object has grown large enough to track its keys in a hash set (on `keySets`).
    var hasKeySet: Bool
}

/// Objects up to this many members check for duplicate keys by scanning; larger ones use a set.
private let linearKeyScanLimit = 12

private struct JSONByteParser: ~Copyable {
    let base: UnsafePointer<UInt8>
    let end: Int
    let limits: JSONParser.Limits
    var pos = 0
    var values = MoveStack<JSONValue>()
    var members = MoveStack<JSONObject.Member>()
    /// One `keyTag` per entry of `members`, to skip most string comparisons in the duplicate check.
    var memberTags = MoveStack<UInt64>()
    /// Whether the last string parsed had no escapes and only ASCII bytes.
    var lastStringIsPlainASCII = false
    var frames = MoveStack<Frame>()
    var keySets: [Set<String>] = []
    /// Reused buffer for strings that contain escapes.
    var scratch: [UInt8] = []

    init(base: UnsafePointer<UInt8>, count: Int, limits: JSONParser.Limits) {
        self.base = base
        self.end = count
        self.limits = limits
    }

    // MARK: Structure

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        outer: while true {
            // A value starts here (after optional whitespace).
            self.skipWhitespace()
            guard self.pos < self.end else { throw self.error("unexpected end of input", at: self.end) }
            var value: JSONValue
            switch self.base[self.pos] {
            case ASCII.quote:
                value = .string(try self.parseString())
            case ASCII.openBrace:
                try self.checkDepth()
                self.pos += 1
                self.skipWhitespace()
                if self.pos < self.end && self.base[self.pos] == ASCII.closeBrace {
                    self.pos += 1
                    value = .object(JSONObject())
                } else {
                    self.frames.push(Frame(start: self.members.count, isObject: true, hasKeySet: false))
                    try self.parseKeyAndColon()
                    continue outer
                }
            case ASCII.openBracket:
                try self.checkDepth()
                self.pos += 1
                self.skipWhitespace()
                if self.pos < self.end && self.base[self.pos] == ASCII.closeBracket {
                    self.pos += 1
                    value = .array([])
                } else {
                    self.frames.push(Frame(start: self.values.count, isObject: false, hasKeySet: false))
                    continue outer
                }
            case UInt8(ascii: "t"):
                try self.expectLiteral(0x6575_7274, length: 4)  // "true", little-endian
                value = .bool(true)
            case UInt8(ascii: "f"):
                try self.expectLiteral(0x6573_6C61, length: 5, skipFirst: true)  // "alse" after "f"
                value = .bool(false)
            case UInt8(ascii: "n"):
                try self.expectLiteral(0x6C6C_756E, length: 4)  // "null"
                value = .null
            case ASCII.minus, ASCII.zero...ASCII.nine:
                value = try self.parseNumber()
            default:
                throw self.unexpected(at: self.pos)
            }

            // Hand the finished value to its container, closing every container that ends here.
            while true {
                guard self.frames.count > 0 else {
                    self.skipWhitespace()
                    guard self.pos == self.end else {
                        throw self.error("trailing characters after the value", at: self.pos)
                    }
                    return value
                }
                let frame = self.frames.last.pointee
                self.skipWhitespace()
                guard self.pos < self.end else { throw self.error("unexpected end of input", at: self.end) }
                let next = self.base[self.pos]
                if frame.isObject {
                    self.members.last.pointee.value = value
                    if next == ASCII.comma {
                        self.pos += 1
                        try self.parseKeyAndColon()
                        continue outer
                    }
                    guard next == ASCII.closeBrace else { throw self.unexpected(at: self.pos) }
                    self.pos += 1
                    self.memberTags.discardLast(self.members.count - frame.start)
                    value = .object(JSONObject(self.members.removeLast(self.members.count - frame.start)))
                    if frame.hasKeySet { self.keySets.removeLast() }
                    _ = self.frames.removeLast()
                } else {
                    self.values.push(value)
                    if next == ASCII.comma {
                        self.pos += 1
                        continue outer
                    }
                    guard next == ASCII.closeBracket else { throw self.unexpected(at: self.pos) }
                    self.pos += 1
                    value = .array(self.values.removeLast(self.values.count - frame.start))
                    _ = self.frames.removeLast()
                }
            }
        }
    }

    @inline(__always)
    func checkDepth() throws(JSONParseError) {
        if self.frames.count >= self.limits.maxDepth {
            throw self.error("nesting deeper than \(self.limits.maxDepth)", at: self.pos)
        }
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while self.pos < self.end {
            let byte = self.base[self.pos]
            guard byte <= ASCII.space,
                byte == ASCII.space || byte == ASCII.lineFeed || byte == ASCII.carriageReturn || byte == ASCII.tab
            else { return }
            self.pos += 1
        }
    }

    /// Parses `"key" :` inside the innermost (object) frame and pushes the member with a placeholder value.
    mutating func parseKeyAndColon() throws(JSONParseError) {
        self.skipWhitespace()
        guard self.pos < self.end else { throw self.error("unexpected end of input", at: self.end) }
        guard self.base[self.pos] == ASCII.quote else { throw self.unexpected(at: self.pos) }
        let keyOffset = self.pos
        let key = try self.parseString()
        let tag = self.keyTag(from: keyOffset + 1, to: self.pos - 1)
        try self.checkDuplicate(key, tag: tag, at: keyOffset)
        self.skipWhitespace()
        guard self.pos < self.end else { throw self.error("unexpected end of input", at: self.end) }
        guard self.base[self.pos] == ASCII.colon else { throw self.unexpected(at: self.pos) }
        self.pos += 1
        self.members.push((key: key, value: .null))
        self.memberTags.push(tag)
    }

    /// A summary of the key just parsed from `base[from..<to]`: for short plain-ASCII keys, the length
    /// and first seven bytes (odd); otherwise 0, meaning "compare the strings". Two ASCII strings are
    /// equal exactly when their bytes are, so keys with different nonzero tags differ. Non-ASCII keys
    /// need a real comparison: "\u{212A}" (KELVIN SIGN) is canonically equivalent to "K".
    @inline(__always)
    func keyTag(from: Int, to: Int) -> UInt64 {
        let length = to - from
        guard self.lastStringIsPlainASCII, length < 128 else { return 0 }
        var prefix: UInt64 = 0
        if length >= 8 {
            prefix =
                UInt64(littleEndian: UnsafeRawPointer(self.base + from).loadUnaligned(as: UInt64.self))
                & 0x00FF_FFFF_FFFF_FFFF
        } else {
            for index in 0..<length { prefix |= UInt64(self.base[from + index]) << (8 * UInt64(index)) }
        }
        return prefix << 8 | UInt64(length) << 1 | 1
    }

    /// Rejects a key already present in the innermost object. Keys compare as Swift strings (canonical
    /// equivalence), the same way `JSONObject` looks them up, so no two members can shadow each other.
    mutating func checkDuplicate(_ key: String, tag: UInt64, at offset: Int) throws(JSONParseError) {
        let frame = self.frames.last.pointee
        if frame.hasKeySet {
            if !self.keySets[self.keySets.count - 1].insert(key).inserted { throw self.duplicate(key, at: offset) }
            return
        }
        let count = self.members.count - frame.start
        if count < linearKeyScanLimit {
            for index in frame.start..<self.members.count {
                let otherTag = self.memberTags.pointer(at: index).pointee
                if tag != 0 && otherTag != 0 && tag != otherTag { continue }
                if self.members.pointer(at: index).pointee.key == key { throw self.duplicate(key, at: offset) }
            }
            return
        }
        var set = Set<String>(minimumCapacity: count * 2)
        for index in frame.start..<self.members.count {
            set.insert(self.members.pointer(at: index).pointee.key)
        }
        if !set.insert(key).inserted { throw self.duplicate(key, at: offset) }
        self.keySets.append(set)
        self.frames.last.pointee.hasKeySet = true
    }

    func duplicate(_ key: String, at offset: Int) -> JSONParseError {
        var shown = key
        if shown.unicodeScalars.count > 64 { shown = String(shown.unicodeScalars.prefix(64)) + "…" }
        return self.error("duplicate key \(JSONValue.string(shown).jsonString)", at: offset)
    }

    /// Matches `true`, `false` or `null` at `pos`; `pattern` holds the four bytes after `skipFirst`.
    @inline(__always)
    mutating func expectLiteral(_ pattern: UInt32, length: Int, skipFirst: Bool = false) throws(JSONParseError) {
        let first = skipFirst ? self.pos + 1 : self.pos
        if first + 4 <= self.end,
            UInt32(littleEndian: UnsafeRawPointer(self.base + first).loadUnaligned(as: UInt32.self)) == pattern
        {
            self.pos += length
            return
        }
        // Slow path: find the first byte that differs, for the error position.
        var expected = pattern
        var offset = first
        for _ in 0..<4 {
            guard offset < self.end else { throw self.error("unexpected end of input", at: self.end) }
            if self.base[offset] != UInt8(truncatingIfNeeded: expected) { throw self.unexpected(at: offset) }
            expected >>= 8
            offset += 1
        }
        self.pos += length  // Unreachable in practice: the fast path matched.
    }

    // MARK: Strings

    /// Parses the string whose opening quote is at `pos`.
    mutating func parseString() throws(JSONParseError) -> String {
        let quoteOffset = self.pos
        let start = self.pos + 1
        var (stop, nonASCII) = self.scanStringRun(from: start)
        guard stop < self.end else { throw self.error("unexpected end of input", at: self.end) }
        let byte = self.base[stop]
        if byte == ASCII.quote {
            let length = stop - start
            if length > self.limits.maxStringBytes { throw self.stringTooLong(at: quoteOffset) }
            let bytes = UnsafeBufferPointer(start: self.base + start, count: length)
            self.pos = stop + 1
            if !nonASCII {
                self.lastStringIsPlainASCII = true
                return String(decoding: bytes, as: UTF8.self)
            }
            self.lastStringIsPlainASCII = false
            // Validated here, with error positions; `String(validating:)` is slower than both steps.
            try self.validateUTF8(from: start, to: stop)
            return String(decoding: bytes, as: UTF8.self)
        }
        self.lastStringIsPlainASCII = false
        if byte != ASCII.backslash { throw self.controlCharacter(at: stop) }

        // Slow path: decode escapes into the scratch buffer, validating each raw run as we go.
        self.scratch.removeAll(keepingCapacity: true)
        var runStart = start
        while true {
            if nonASCII { try self.validateUTF8(from: runStart, to: stop) }
            self.scratch.append(contentsOf: UnsafeBufferPointer(start: self.base + runStart, count: stop - runStart))
            guard stop < self.end else { throw self.error("unexpected end of input", at: self.end) }
            let byte = self.base[stop]
            if byte == ASCII.quote {
                if self.scratch.count > self.limits.maxStringBytes { throw self.stringTooLong(at: quoteOffset) }
                self.pos = stop + 1
                return String(decoding: self.scratch, as: UTF8.self)
            }
            if byte != ASCII.backslash { throw self.controlCharacter(at: stop) }
            runStart = try self.decodeEscape(at: stop)
            if self.scratch.count > self.limits.maxStringBytes { throw self.stringTooLong(at: quoteOffset) }
            (stop, nonASCII) = self.scanStringRun(from: runStart)
        }
    }

    /// Finds the first quote, backslash or control byte at or after `start` (or `end`), and whether any
    /// byte before it is non-ASCII. Scans eight bytes at a time.
    @inline(__always)
    func scanStringRun(from start: Int) -> (stop: Int, nonASCII: Bool) {
        var index = start
        var high: UInt64 = 0
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        while index + 8 <= self.end {
            let word = UnsafeRawPointer(self.base + index).loadUnaligned(as: UInt64.self)
            let quotes = word ^ (ones &* UInt64(ASCII.quote))
            let backslashes = word ^ (ones &* UInt64(ASCII.backslash))
            // Any zero byte in `quotes`/`backslashes`, or any byte below 0x20 in `word`, stops the run.
            let stops =
                ((quotes &- ones) & ~quotes) | ((backslashes &- ones) & ~backslashes) | ((word &- ones &* 0x20) & ~word)
            if stops & highBits != 0 { break }
            high |= word
            index += 8
        }
        while index < self.end {
            let byte = self.base[index]
            if byte == ASCII.quote || byte == ASCII.backslash || byte < 0x20 { break }
            high |= UInt64(byte)
            index += 1
        }
        return (index, high & highBits != 0)
    }

    /// Decodes the escape whose backslash is at `offset` into `scratch`; returns the offset after it.
    mutating func decodeEscape(at offset: Int) throws(JSONParseError) -> Int {
        guard offset + 1 < self.end else { throw self.error("unexpected end of input", at: self.end) }
        let decoded: UInt8
        switch self.base[offset + 1] {
        case ASCII.quote: decoded = ASCII.quote
        case ASCII.backslash: decoded = ASCII.backslash
        case ASCII.slash: decoded = ASCII.slash
        case UInt8(ascii: "b"): decoded = 0x08
        case UInt8(ascii: "f"): decoded = 0x0C
        case UInt8(ascii: "n"): decoded = 0x0A
        case UInt8(ascii: "r"): decoded = 0x0D
        case UInt8(ascii: "t"): decoded = 0x09
        case UInt8(ascii: "u"):
            let unit = try self.hexQuad(escapeAt: offset)
            var scalar = UInt32(unit)
            var next = offset + 6
            if unit & 0xFC00 == 0xD800 {
                // A high surrogate must be followed directly by an escaped low surrogate.
                guard next + 1 < self.end, self.base[next] == ASCII.backslash, self.base[next + 1] == UInt8(ascii: "u")
                else {
                    throw self.error("lone surrogate", at: offset)
                }
                let low = try self.hexQuad(escapeAt: next)
                guard low & 0xFC00 == 0xDC00 else { throw self.error("lone surrogate", at: offset) }
                scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                next += 6
            } else if unit & 0xFC00 == 0xDC00 {
                throw self.error("lone surrogate", at: offset)
            }
            self.appendUTF8(scalar)
            return next
        default:
            throw self.error("invalid escape", at: offset)
        }
        self.scratch.append(decoded)
        return offset + 2
    }

    /// Reads the four hex digits of the `\u` escape whose backslash is at `offset`.
    func hexQuad(escapeAt offset: Int) throws(JSONParseError) -> UInt16 {
        var value: UInt16 = 0
        for index in (offset + 2)..<(offset + 6) {
            guard index < self.end else { throw self.error("unexpected end of input", at: self.end) }
            let byte = self.base[index]
            let digit: UInt8
            switch byte {
            case ASCII.zero...ASCII.nine: digit = byte &- ASCII.zero
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte &- UInt8(ascii: "a") &+ 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte &- UInt8(ascii: "A") &+ 10
            default: throw self.error("invalid \\u escape", at: offset)
            }
            value = value << 4 | UInt16(digit)
        }
        return value
    }

    mutating func appendUTF8(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80:
            self.scratch.append(UInt8(scalar))
        case 0x80..<0x800:
            self.scratch.append(UInt8(0xC0 | scalar >> 6))
            self.scratch.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            self.scratch.append(UInt8(0xE0 | scalar >> 12))
            self.scratch.append(UInt8(0x80 | (scalar >> 6) & 0x3F))
            self.scratch.append(UInt8(0x80 | scalar & 0x3F))
        default:
            self.scratch.append(UInt8(0xF0 | scalar >> 18))
            self.scratch.append(UInt8(0x80 | (scalar >> 12) & 0x3F))
            self.scratch.append(UInt8(0x80 | (scalar >> 6) & 0x3F))
            self.scratch.append(UInt8(0x80 | scalar & 0x3F))
        }
    }

    /// Checks `base[from..<to]` is well-formed UTF-8 (Unicode table 3-7: no overlongs, no encoded
    /// surrogates, nothing above U+10FFFF, no truncated sequences). Errors point at the lead byte.
    func validateUTF8(from: Int, to: Int) throws(JSONParseError) {
        var index = from
        while index < to {
            let lead = self.base[index]
            if lead < 0x80 {
                index += 1
                continue
            }
            let trailing: Int
            let secondRange: ClosedRange<UInt8>
            switch lead {
            case 0xC2...0xDF: (trailing, secondRange) = (1, 0x80...0xBF)
            case 0xE0: (trailing, secondRange) = (2, 0xA0...0xBF)
            case 0xE1...0xEC, 0xEE...0xEF: (trailing, secondRange) = (2, 0x80...0xBF)
            case 0xED: (trailing, secondRange) = (2, 0x80...0x9F)
            case 0xF0: (trailing, secondRange) = (3, 0x90...0xBF)
            case 0xF1...0xF3: (trailing, secondRange) = (3, 0x80...0xBF)
            case 0xF4: (trailing, secondRange) = (3, 0x80...0x8F)
            default: throw self.error("invalid UTF-8", at: index)
            }
            guard index + trailing < to, secondRange.contains(self.base[index + 1]) else {
                throw self.error("invalid UTF-8", at: index)
            }
            if trailing >= 2 {
                guard self.base[index + 2] & 0xC0 == 0x80 else { throw self.error("invalid UTF-8", at: index) }
                if trailing == 3 {
                    guard self.base[index + 3] & 0xC0 == 0x80 else { throw self.error("invalid UTF-8", at: index) }
                }
            }
            index += trailing + 1
        }
    }

    func controlCharacter(at offset: Int) -> JSONParseError {
        let byte = self.base[offset]
        let hex = String(byte, radix: 16, uppercase: true)
        return self.error("unescaped control character U+\(byte < 0x10 ? "000" : "00")\(hex) in string", at: offset)
    }

    func stringTooLong(at offset: Int) -> JSONParseError {
        self.error("string longer than \(self.limits.maxStringBytes) bytes", at: offset)
    }

    // MARK: Numbers

    /// Exact powers of ten for the fast path (every one is exactly representable as a `Double`).
    private static let powersOfTen: [Double] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ]

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = self.pos
        var index = self.pos
        let negative = self.base[index] == ASCII.minus
        if negative { index += 1 }

        // Integer part. `mantissa` collects up to 19 significant digits of integer and fraction.
        var mantissa: UInt64 = 0
        var digitCount = 0
        guard index < self.end else { throw self.error("unexpected end of input", at: self.end) }
        var byte = self.base[index]
        if byte == ASCII.zero {
            index += 1
            if index < self.end, self.base[index] >= ASCII.zero, self.base[index] <= ASCII.nine {
                throw self.error("leading zeros are not allowed", at: start)
            }
        } else if byte > ASCII.zero, byte <= ASCII.nine {
            repeat {
                mantissa = mantissa &* 10 &+ UInt64(byte &- ASCII.zero)
                digitCount += 1
                index += 1
                guard index < self.end else { break }
                byte = self.base[index]
            } while byte >= ASCII.zero && byte <= ASCII.nine
        } else {
            throw self.unexpected(at: index)
        }

        var isInteger = true
        var fractionDigits = 0
        if index < self.end, self.base[index] == ASCII.dot {
            isInteger = false
            index += 1
            guard index < self.end else { throw self.error("unexpected end of input", at: self.end) }
            byte = self.base[index]
            guard byte >= ASCII.zero, byte <= ASCII.nine else { throw self.unexpected(at: index) }
            repeat {
                if digitCount > 0 || byte != ASCII.zero {
                    mantissa = mantissa &* 10 &+ UInt64(byte &- ASCII.zero)
                    digitCount += 1
                }
                fractionDigits += 1
                index += 1
                guard index < self.end else { break }
                byte = self.base[index]
            } while byte >= ASCII.zero && byte <= ASCII.nine
        }

        var exponent = 0
        if index < self.end, self.base[index] | 0x20 == ASCII.lowerE {
            isInteger = false
            index += 1
            guard index < self.end else { throw self.error("unexpected end of input", at: self.end) }
            var exponentNegative = false
            if self.base[index] == ASCII.minus || self.base[index] == ASCII.plus {
                exponentNegative = self.base[index] == ASCII.minus
                index += 1
                guard index < self.end else { throw self.error("unexpected end of input", at: self.end) }
            }
            byte = self.base[index]
            guard byte >= ASCII.zero, byte <= ASCII.nine else { throw self.unexpected(at: index) }
            repeat {
                if exponent < 100_000 { exponent = exponent * 10 + Int(byte &- ASCII.zero) }
                index += 1
                guard index < self.end else { break }
                byte = self.base[index]
            } while byte >= ASCII.zero && byte <= ASCII.nine
            if exponentNegative { exponent = -exponent }
        }
        self.pos = index

        if isInteger && digitCount <= 19 {
            // Up to 19 digits cannot overflow UInt64; Int's range is checked here.
            if negative {
                if mantissa <= UInt64(Int.max) + 1 { return .int(Int(truncatingIfNeeded: 0 &- mantissa)) }
            } else if mantissa <= UInt64(Int.max) {
                return .int(Int(mantissa))
            }
        }
        // Clinger's fast path: an exact mantissa times an exact power of ten rounds correctly.
        let decimalExponent = exponent - fractionDigits
        if digitCount <= 19, mantissa <= 1 << 53, decimalExponent >= -22, decimalExponent <= 22 {
            var value = Double(mantissa)
            if decimalExponent >= 0 {
                value *= Self.powersOfTen[decimalExponent]
            } else {
                value /= Self.powersOfTen[-decimalExponent]
            }
            return .double(negative ? -value : value)
        }
        // The text matched the JSON grammar, which the standard library's parser also accepts.
        let text = String(decoding: UnsafeBufferPointer(start: self.base + start, count: index - start), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw self.error("number out of range", at: start) }
        return .double(value)
    }

    // MARK: Errors

    func unexpected(at offset: Int) -> JSONParseError {
        guard offset < self.end else { return self.error("unexpected end of input", at: self.end) }
        let byte = self.base[offset]
        if byte >= 0x20 && byte < 0x7F {
            return self.error("unexpected character '\(Character(Unicode.Scalar(byte)))'", at: offset)
        }
        let hex = String(byte, radix: 16, uppercase: true)
        return self.error("unexpected byte 0x\(byte < 0x10 ? "0" : "")\(hex)", at: offset)
    }

    /// Builds an error, computing line and column by scanning the input up to `offset` (errors are rare).
    func error(_ message: String, at offset: Int) -> JSONParseError {
        var line = 1
        var lineStart = 0
        var index = 0
        while index < offset {
            if self.base[index] == ASCII.lineFeed {
                line += 1
                lineStart = index + 1
            }
            index += 1
        }
        return JSONParseError(message: message, offset: offset, line: line, column: offset - lineStart + 1)
    }
}

// MARK: - Move-only stack

/// A growable stack that hands out its top elements by moving them into a new array, so building a
/// container costs one allocation and no reference-count traffic.
private struct MoveStack<Element>: ~Copyable {
    private var storage: UnsafeMutablePointer<Element>?
    private var capacity = 0
    private(set) var count = 0

    init() {}

    deinit {
        if let storage = self.storage {
            storage.deinitialize(count: self.count)
            storage.deallocate()
        }
    }

    @inline(__always)
    mutating func push(_ element: consuming Element) {
        if self.count == self.capacity { self.grow() }
        (self.storage.unsafelyUnwrapped + self.count).initialize(to: element)
        self.count += 1
    }

    @inline(never)
    private mutating func grow() {
        let newCapacity = Swift.max(16, self.capacity * 2)
        let newStorage = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        if let storage = self.storage {
            newStorage.moveInitialize(from: storage, count: self.count)
            storage.deallocate()
        }
        self.storage = newStorage
        self.capacity = newCapacity
    }

    /// The top element; the stack must not be empty.
    var last: UnsafeMutablePointer<Element> {
        precondition(self.count > 0)
        return self.storage.unsafelyUnwrapped + (self.count - 1)
    }

    /// The element at `index`, which must be below `count`.
    func pointer(at index: Int) -> UnsafeMutablePointer<Element> {
        precondition(index >= 0 && index < self.count)
        return self.storage.unsafelyUnwrapped + index
    }

    mutating func removeLast() -> Element {
        precondition(self.count > 0)
        self.count -= 1
        return (self.storage.unsafelyUnwrapped + self.count).move()
    }

    /// Destroys the top `n` elements.
    mutating func discardLast(_ n: Int) {
        precondition(n >= 0 && n <= self.count)
        self.count -= n
        if n > 0 { (self.storage.unsafelyUnwrapped + self.count).deinitialize(count: n) }
    }

    /// Moves the top `n` elements, bottom first, into a new array.
    mutating func removeLast(_ n: Int) -> [Element] {
        precondition(n >= 0 && n <= self.count)
        guard n > 0 else { return [] }
        let source = self.storage.unsafelyUnwrapped + (self.count - n)
        var result: [Element] = []
        result.reserveCapacity(n)
        for index in 0..<n { result.append((source + index).move()) }
        self.count -= n
        return result
    }
}
