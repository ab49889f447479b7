import TaskGraph

// Scalars of the YAML subset: plain, quoted and block scalars, and how plain ones resolve.

extension YAMLParser {
    // MARK: Scalars

    /// Whether a plain scalar can start at `pos` (it cannot start with an indicator).
    func canStartPlain(flow: Bool) -> Bool {
        let c = self.peek()
        switch c {
        case 0, UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"):
            return false
        case UInt8(ascii: "-"):
            return !Self.isBlankOrEnd(self.peek(1))
        case UInt8(ascii: "?"), UInt8(ascii: ":"):
            return !flow && !Self.isBlankOrEnd(self.peek(1))
        case UInt8(ascii: ","), UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "{"), UInt8(ascii: "}"),
            UInt8(ascii: "#"), UInt8(ascii: "&"), UInt8(ascii: "*"), UInt8(ascii: "!"), UInt8(ascii: "|"),
            UInt8(ascii: ">"), UInt8(ascii: "'"), UInt8(ascii: "\""), UInt8(ascii: "%"), UInt8(ascii: "@"),
            UInt8(ascii: "`"):
            return false
        default:
            return true
        }
    }

    /// A plain scalar at `pos`, as PyYAML scans it: it ends before `: ` (or `:` and the line end),
    /// ` #`, and in flow context before `,[]{}?`; with `multiLine`, it goes on over lines indented
    /// at least `minIndent`, a line end folding to a space and each empty line giving a newline.
    mutating func scanPlain(flow: Bool, minIndent: Int, multiLine: Bool) throws(YAMLParseError) -> [UInt8] {
        var out: [UInt8] = []
        var pendingSpaces = 0
        var pendingBreaks = 0  // -1: one line end folded to a space
        while true {
            let runStart = self.pos
            while true {
                let c = self.peek()
                if c == UInt8(ascii: " ") || c == UInt8(ascii: "\n") || c == 0 { break }
                if c == UInt8(ascii: "\t") { throw self.tabError() }
                if c == UInt8(ascii: ":") {
                    let next = self.peek(1)
                    if Self.isBlankOrEnd(next) || (flow && Self.isFlowIndicator(next)) { break }
                } else if flow && (Self.isFlowIndicator(c) || c == UInt8(ascii: "?")) {
                    break
                }
                self.pos += 1
            }
            if self.pos == runStart { break }
            if pendingBreaks == -1 {
                out.append(UInt8(ascii: " "))
            } else if pendingBreaks > 0 {
                out.append(contentsOf: repeatElement(UInt8(ascii: "\n"), count: pendingBreaks))
            } else if pendingSpaces > 0 {
                out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: pendingSpaces))
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: self.text[runStart..<self.pos]))
            pendingSpaces = 0
            pendingBreaks = 0

            let blankStart = self.mark
            self.skipSpaces()
            let c = self.peek()
            if c == UInt8(ascii: "\t") { throw self.tabError() }
            if c == UInt8(ascii: "#") || c == 0 { break }
            if c != UInt8(ascii: "\n") {
                pendingSpaces = self.pos - blankStart.offset
                continue
            }
            if !multiLine { break }
            var breaks = 0
            while true {
                self.newline()
                self.skipSpaces()
                if self.peek() == UInt8(ascii: "\n") {
                    breaks += 1
                } else {
                    break
                }
            }
            let next = self.peek()
            if next == 0 || next == UInt8(ascii: "#") {
                self.reset(to: blankStart)
                break
            }
            if next == UInt8(ascii: "\t") { throw self.tabError() }
            if self.column == 0 { try self.checkNoDocumentMarker() }
            if self.column < minIndent {
                if flow { throw self.error("a line inside a flow collection must be indented more than its parent") }
                self.reset(to: blankStart)
                break
            }
            pendingBreaks = breaks == 0 ? -1 : breaks
        }
        return out
    }

    /// A single- or double-quoted scalar at `pos`. Line ends fold as in plain scalars; lines after
    /// the first must be indented more than `parentIndent`.
    mutating func scanQuoted(parentIndent: Int) throws(YAMLParseError) -> String {
        let start = self.mark
        let quote = self.peek()
        let double = quote == UInt8(ascii: "\"")
        self.pos += 1
        var out: [UInt8] = []
        while true {
            let c = self.peek()
            switch c {
            case 0:
                throw self.error("unterminated quoted scalar", at: start)
            case quote:
                if !double, self.peek(1) == quote {
                    out.append(quote)
                    self.pos += 2
                } else {
                    self.pos += 1
                    return String(decoding: out, as: UTF8.self)
                }
            case UInt8(ascii: "\\") where double:
                if self.peek(1) == UInt8(ascii: "\n") {
                    self.pos += 1
                    try self.foldQuotedLineEnd(into: &out, escaped: true, parentIndent: parentIndent)
                } else {
                    try self.scanEscape(into: &out)
                }
            case UInt8(ascii: " "), UInt8(ascii: "\t"):
                let whiteStart = self.pos
                while self.peek() == UInt8(ascii: " ") || self.peek() == UInt8(ascii: "\t") { self.pos += 1 }
                // White space before a line end is dropped.
                if self.peek() != UInt8(ascii: "\n") {
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: self.text[whiteStart..<self.pos]))
                }
            case UInt8(ascii: "\n"):
                try self.foldQuotedLineEnd(into: &out, escaped: false, parentIndent: parentIndent)
            default:
                out.append(c)
                self.pos += 1
            }
        }
    }

    /// At a line end inside a quoted scalar: one line end becomes a space (nothing if escaped), each
    /// following empty line a newline; the next line's leading white space is dropped.
    mutating func foldQuotedLineEnd(into out: inout [UInt8], escaped: Bool, parentIndent: Int) throws(YAMLParseError) {
        var breaks = 0
        while true {
            self.newline()
            self.skipSpaces()
            let indent = self.column
            while self.peek() == UInt8(ascii: " ") || self.peek() == UInt8(ascii: "\t") { self.pos += 1 }
            if self.peek() == UInt8(ascii: "\n") {
                breaks += 1
                continue
            }
            if self.atEnd { return }  // the caller reports the missing quote
            if indent == 0 {
                let here = self.mark
                self.pos = self.lineStart
                try self.checkNoDocumentMarker()
                self.reset(to: here)
            }
            if indent <= parentIndent {
                throw self.error("a line of a quoted scalar must be indented more than its parent")
            }
            break
        }
        if breaks > 0 {
            out.append(contentsOf: repeatElement(UInt8(ascii: "\n"), count: breaks))
        } else if !escaped {
            out.append(UInt8(ascii: " "))
        }
    }

    /// The escape sequence at `pos` (a backslash) in a double-quoted scalar.
    mutating func scanEscape(into out: inout [UInt8]) throws(YAMLParseError) {
        let start = self.mark
        let c = self.peek(1)
        self.pos += 2
        let simple: Unicode.Scalar?
        switch c {
        case UInt8(ascii: "0"): simple = "\u{0}"
        case UInt8(ascii: "a"): simple = "\u{7}"
        case UInt8(ascii: "b"): simple = "\u{8}"
        case UInt8(ascii: "t"), UInt8(ascii: "\t"): simple = "\t"
        case UInt8(ascii: "n"): simple = "\n"
        case UInt8(ascii: "v"): simple = "\u{B}"
        case UInt8(ascii: "f"): simple = "\u{C}"
        case UInt8(ascii: "r"): simple = "\r"
        case UInt8(ascii: "e"): simple = "\u{1B}"
        case UInt8(ascii: " "): simple = " "
        case UInt8(ascii: "\""): simple = "\""
        case UInt8(ascii: "/"): simple = "/"
        case UInt8(ascii: "\\"): simple = "\\"
        case UInt8(ascii: "N"): simple = "\u{85}"
        case UInt8(ascii: "_"): simple = "\u{A0}"
        case UInt8(ascii: "L"): simple = "\u{2028}"
        case UInt8(ascii: "P"): simple = "\u{2029}"
        case UInt8(ascii: "x"), UInt8(ascii: "u"), UInt8(ascii: "U"): simple = nil
        default:
            throw self.error("unknown escape sequence in a double-quoted scalar", at: start)
        }
        var scalar: Unicode.Scalar
        if let simple {
            scalar = simple
        } else {
            let count = c == UInt8(ascii: "x") ? 2 : c == UInt8(ascii: "u") ? 4 : 8
            var value: UInt32 = 0
            for _ in 0..<count {
                let d = self.peek()
                let digit: UInt8
                switch d {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = d - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = d - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = d - UInt8(ascii: "A") + 10
                default: throw self.error("expected \(count) hexadecimal digits in the escape sequence", at: start)
                }
                value = value << 4 | UInt32(digit)
                self.pos += 1
            }
            guard let decoded = Unicode.Scalar(value) else {
                throw self.error(
                    "the escape sequence is no Unicode scalar value (write a character beyond U+FFFF as one \\U escape)",
                    at: start
                )
            }
            scalar = decoded
        }
        out.append(contentsOf: String(Character(scalar)).utf8)
    }

    /// A literal (`|`) or folded (`>`) block scalar at `pos`, folded and chomped as PyYAML does.
    /// Its lines are indented as its first non-empty line, which must be indented more than
    /// `parentIndent`.
    mutating func scanBlockScalar(parentIndent: Int) throws(YAMLParseError) -> String {
        let folded = self.peek() == UInt8(ascii: ">")
        self.pos += 1
        var chomping = 0  // -1 strip, 0 clip, +1 keep
        while true {
            let c = self.peek()
            if (c == UInt8(ascii: "-") || c == UInt8(ascii: "+")) && chomping == 0 {
                chomping = c == UInt8(ascii: "-") ? -1 : 1
                self.pos += 1
            } else if c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") {
                throw self.error("explicit indentation indicators of block scalars are not supported")
            } else {
                break
            }
        }
        let afterHeader = self.peek()
        guard afterHeader == UInt8(ascii: " ") || afterHeader == UInt8(ascii: "\n") || afterHeader == 0 else {
            throw self.error("expected a line end after the block scalar indicator, found \(self.describeCurrent())")
        }
        try self.expectLineEnd()
        if self.atEnd { return "" }
        self.newline()

        // Leading empty lines, and the indentation of the first non-empty line.
        let minIndent = max(parentIndent + 1, 1)
        var breaks = 0
        var maxEmptyIndent = 0
        while true {
            self.skipSpaces()
            guard self.peek() == UInt8(ascii: "\n") else { break }
            maxEmptyIndent = max(maxEmptyIndent, self.column)
            breaks += 1
            self.newline()
        }
        guard !self.atEnd, self.column >= minIndent else {
            // No content: the line belongs to the parent.
            return chomping == 1 ? String(repeating: "\n", count: breaks) : ""
        }
        let indent = self.column
        if maxEmptyIndent > indent {
            throw self.error("a leading empty line of a block scalar has more spaces than its first line")
        }

        var out: [UInt8] = []
        var lineBreak = false
        while self.column == indent, !self.atEnd {
            out.append(contentsOf: repeatElement(UInt8(ascii: "\n"), count: breaks))
            let leadingNonSpace = self.peek() != UInt8(ascii: " ") && self.peek() != UInt8(ascii: "\t")
            let lineContent = self.pos
            while self.peek() != UInt8(ascii: "\n"), !self.atEnd { self.pos += 1 }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: self.text[lineContent..<self.pos]))
            lineBreak = self.peek() == UInt8(ascii: "\n")
            if lineBreak { self.newline() }
            breaks = 0
            while true {
                while self.column < indent, self.peek() == UInt8(ascii: " ") { self.pos += 1 }
                guard self.peek() == UInt8(ascii: "\n") else { break }
                breaks += 1
                self.newline()
            }
            guard self.column == indent, !self.atEnd else { break }
            if folded, lineBreak, leadingNonSpace, self.peek() != UInt8(ascii: " "), self.peek() != UInt8(ascii: "\t") {
                if breaks == 0 { out.append(UInt8(ascii: " ")) }
            } else if lineBreak {
                out.append(UInt8(ascii: "\n"))
            }
        }
        if chomping != -1, lineBreak { out.append(UInt8(ascii: "\n")) }
        if chomping == 1 { out.append(contentsOf: repeatElement(UInt8(ascii: "\n"), count: breaks)) }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: Resolution

    /// The JSON value of a plain scalar.
    func resolve(_ raw: [UInt8], at start: Mark) throws(YAMLParseError) -> JSONValue {
        let text = String(decoding: raw, as: UTF8.self)
        if raw.count <= 5 {
            switch text {
            case "~", "null", "Null", "NULL":
                return .null
            case "true", "True", "TRUE":
                return .bool(true)
            case "false", "False", "FALSE":
                return .bool(false)
            case "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF":
                throw self.error("'\(text)' is a boolean in YAML 1.1 but a string in YAML 1.2: quote it", at: start)
            case "<<", "=":
                throw self.error("'\(text)' has a special meaning in YAML 1.1: quote it", at: start)
            default:
                break
            }
        }
        if let first = raw.first,
            first == UInt8(ascii: "-") || first == UInt8(ascii: "+") || first == UInt8(ascii: ".")
                || (first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9"))
        {
            if PlainNumber.isDecimalInteger(raw) {
                guard let value = Int(text) else {
                    throw self.error("the integer \(text) is out of range", at: start)
                }
                return .int(value)
            }
            if PlainNumber.isDecimalFraction(raw) {
                guard let value = Double(text), value.isFinite else {
                    throw self.error("the number \(text) is out of range", at: start)
                }
                return .double(value)
            }
            if PlainNumber.isOtherNumber(raw) {
                throw self.error(
                    "'\(text)' is a number in YAML 1.1 or 1.2 in a form not read here (only decimal integers and "
                        + "fractions such as 1.5 or 1.5e+3): quote it or write it so",
                    at: start
                )
            }
        }
        if PlainNumber.isTimestamp(raw) {
            throw self.error("'\(text)' is a timestamp in YAML 1.1: quote it", at: start)
        }
        return .string(text)
    }

    /// A plain mapping key as a JSON key: strings as they are, other scalars in the form JSON
    /// serializers give them (`200` → "200", `true` → "true", `null` → "null").
    func keyString(_ raw: [UInt8], at start: Mark) throws(YAMLParseError) -> String {
        switch try self.resolve(raw, at: start) {
        case .string(let s): return s
        case .int(let i): return String(i)
        case .bool(let b): return b ? "true" : "false"
        case .null: return "null"
        default:
            throw self.error("a number with a fraction cannot be a mapping key: quote the key", at: start)
        }
    }
}

// MARK: - Numbers and timestamps

/// The number and timestamp forms of plain scalars in YAML 1.1 (as PyYAML's resolver matches them)
/// and the YAML 1.2 core schema, matched by hand.
enum PlainNumber {
    /// A byte cursor; a copy is a saved position.
    struct Cursor {
        let bytes: [UInt8]
        var index = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { self.index == self.bytes.count }

        func peek() -> UInt8 { self.index < self.bytes.count ? self.bytes[self.index] : 0 }

        mutating func skip(_ c: UInt8) -> Bool {
            guard self.peek() == c else { return false }
            self.index += 1
            return true
        }

        mutating func skipSign() {
            if self.peek() == UInt8(ascii: "+") || self.peek() == UInt8(ascii: "-") { self.index += 1 }
        }

        /// Skips bytes while `predicate` holds, at most `limit`; returns how many.
        mutating func skip(upTo limit: Int = .max, while predicate: (UInt8) -> Bool) -> Int {
            var count = 0
            while count < limit, !self.atEnd, predicate(self.bytes[self.index]) {
                self.index += 1
                count += 1
            }
            return count
        }

        /// `[eE][-+][0-9]+` (the sign optional unless `signRequired`), or nothing: false when an
        /// exponent starts but is malformed.
        mutating func optionalExponent(signRequired: Bool) -> Bool {
            guard self.skip(UInt8(ascii: "e")) || self.skip(UInt8(ascii: "E")) else { return true }
            let c = self.peek()
            if c == UInt8(ascii: "+") || c == UInt8(ascii: "-") {
                self.index += 1
            } else if signRequired {
                return false
            }
            return self.skip(while: isDigit) > 0
        }

        /// `(:[0-5]?[0-9])+`, the sexagesimal part of YAML 1.1 numbers.
        mutating func sexagesimalGroups() -> Bool {
            var groups = 0
            while self.skip(UInt8(ascii: ":")) {
                let first = self.peek()
                guard isDigit(first) else { return false }
                self.index += 1
                if first <= UInt8(ascii: "5"), isDigit(self.peek()) { self.index += 1 }
                groups += 1
            }
            return groups > 0
        }

        /// `.inf`, `.Inf` or `.INF` (`nan` for `.nan`, `.NaN`, `.NAN`) to the end.
        mutating func special(_ lower: StaticString, _ capitalized: StaticString, _ upper: StaticString) -> Bool {
            guard self.skip(UInt8(ascii: ".")) else { return false }
            let rest = Array(self.bytes[self.index...])
            for spelling in [lower, capitalized, upper] {
                let candidate = UnsafeBufferPointer(start: spelling.utf8Start, count: spelling.utf8CodeUnitCount)
                if rest.elementsEqual(candidate) { return true }
            }
            return false
        }
    }

    static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }
    static func isDigitOrUnderscore(_ c: UInt8) -> Bool { isDigit(c) || c == UInt8(ascii: "_") }
    static func isHexDigit(_ c: UInt8) -> Bool {
        isDigit(c) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f"))
            || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "F"))
    }
    static func isHexDigitOrUnderscore(_ c: UInt8) -> Bool { isHexDigit(c) || c == UInt8(ascii: "_") }

    /// `[-+]?(0|[1-9][0-9]*)`: an integer in both YAML 1.1 and 1.2, of the same value.
    static func isDecimalInteger(_ raw: [UInt8]) -> Bool {
        var c = Cursor(raw)
        c.skipSign()
        if c.skip(UInt8(ascii: "0")) { return c.atEnd }
        return c.skip(while: isDigit) > 0 && c.atEnd
    }

    /// `[-+]?[0-9]+\.[0-9]*([eE][-+][0-9]+)?`: a float in both YAML 1.1 and 1.2.
    static func isDecimalFraction(_ raw: [UInt8]) -> Bool {
        var c = Cursor(raw)
        c.skipSign()
        guard c.skip(while: isDigit) > 0, c.skip(UInt8(ascii: ".")) else { return false }
        _ = c.skip(while: isDigit)
        return c.optionalExponent(signRequired: true) && c.atEnd
    }

    /// Any other int or float of YAML 1.1 (PyYAML) or of the YAML 1.2 core schema.
    static func isOtherNumber(_ raw: [UInt8]) -> Bool {
        self.isYAML11Integer(raw) || self.isYAML11Float(raw) || self.isYAML12Integer(raw) || self.isYAML12Float(raw)
    }

    static func isYAML11Integer(_ raw: [UInt8]) -> Bool {
        var signed = Cursor(raw)
        signed.skipSign()
        var c = signed
        if c.skip(UInt8(ascii: "0")) {
            if c.atEnd { return true }
            var binary = c
            if binary.skip(UInt8(ascii: "b")), binary.skip(while: { $0 == 0x30 || $0 == 0x31 || $0 == 0x5F }) > 0,
                binary.atEnd
            {
                return true
            }
            var hex = c
            if hex.skip(UInt8(ascii: "x")), hex.skip(while: isHexDigitOrUnderscore) > 0, hex.atEnd { return true }
            var octal = c
            if octal.skip(while: { ($0 >= 0x30 && $0 <= 0x37) || $0 == 0x5F }) > 0, octal.atEnd { return true }
            return false
        }
        guard c.peek() >= UInt8(ascii: "1"), c.peek() <= UInt8(ascii: "9") else { return false }
        _ = c.skip(while: isDigitOrUnderscore)
        if c.atEnd { return true }
        return c.sexagesimalGroups() && c.atEnd
    }

    static func isYAML11Float(_ raw: [UInt8]) -> Bool {
        // [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?
        var signed = Cursor(raw)
        signed.skipSign()
        var c = signed
        if isDigit(c.peek()) {
            _ = c.skip(while: isDigitOrUnderscore)
            if c.skip(UInt8(ascii: ".")) {
                _ = c.skip(while: isDigitOrUnderscore)
                if c.optionalExponent(signRequired: true) && c.atEnd { return true }
            } else if c.sexagesimalGroups(), c.skip(UInt8(ascii: ".")) {
                // [-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*
                _ = c.skip(while: isDigitOrUnderscore)
                if c.atEnd { return true }
            }
        }
        // \.[0-9][0-9_]*([eE][-+][0-9]+)?  (no sign)
        var fraction = Cursor(raw)
        if fraction.skip(UInt8(ascii: ".")), isDigit(fraction.peek()) {
            _ = fraction.skip(while: isDigitOrUnderscore)
            if fraction.optionalExponent(signRequired: true) && fraction.atEnd { return true }
        }
        var infinity = signed
        if infinity.special("inf", "Inf", "INF") { return true }
        var nan = Cursor(raw)
        return nan.special("nan", "NaN", "NAN")
    }

    static func isYAML12Integer(_ raw: [UInt8]) -> Bool {
        var decimal = Cursor(raw)
        decimal.skipSign()
        if decimal.skip(while: isDigit) > 0, decimal.atEnd { return true }
        var c = Cursor(raw)
        guard c.skip(UInt8(ascii: "0")) else { return false }
        if c.skip(UInt8(ascii: "o")) { return c.skip(while: { $0 >= 0x30 && $0 <= 0x37 }) > 0 && c.atEnd }
        if c.skip(UInt8(ascii: "x")) { return c.skip(while: isHexDigit) > 0 && c.atEnd }
        return false
    }

    static func isYAML12Float(_ raw: [UInt8]) -> Bool {
        // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
        var signed = Cursor(raw)
        signed.skipSign()
        var c = signed
        if c.skip(UInt8(ascii: ".")) {
            if c.skip(while: isDigit) > 0, c.optionalExponent(signRequired: false), c.atEnd { return true }
        } else if c.skip(while: isDigit) > 0 {
            if c.skip(UInt8(ascii: ".")) { _ = c.skip(while: isDigit) }
            if c.optionalExponent(signRequired: false), c.atEnd { return true }
        }
        var infinity = signed
        if infinity.special("inf", "Inf", "INF") { return true }
        var nan = Cursor(raw)
        return nan.special("nan", "NaN", "NAN")
    }

    /// PyYAML's timestamp: `YYYY-MM-DD`, or `YYYY-M-D` with a time (`T`/`t` or spaces,
    /// `H:MM:SS`, optional fraction, optional `Z` or `±H[:MM]` zone).
    static func isTimestamp(_ raw: [UInt8]) -> Bool {
        var c = Cursor(raw)
        guard c.skip(upTo: 4, while: isDigit) == 4, c.skip(UInt8(ascii: "-")) else { return false }
        let month = c.skip(upTo: 2, while: isDigit)
        guard month >= 1, c.skip(UInt8(ascii: "-")) else { return false }
        let day = c.skip(upTo: 2, while: isDigit)
        guard day >= 1 else { return false }
        if c.atEnd { return month == 2 && day == 2 }
        if !c.skip(UInt8(ascii: "T")), !c.skip(UInt8(ascii: "t")) {
            guard c.skip(while: { $0 == 0x20 || $0 == 0x09 }) > 0 else { return false }
        }
        guard c.skip(upTo: 2, while: isDigit) >= 1, c.skip(UInt8(ascii: ":")), c.skip(upTo: 2, while: isDigit) == 2,
            c.skip(UInt8(ascii: ":")), c.skip(upTo: 2, while: isDigit) == 2
        else { return false }
        if c.skip(UInt8(ascii: ".")) { _ = c.skip(while: isDigit) }
        _ = c.skip(while: { $0 == 0x20 || $0 == 0x09 })
        if c.atEnd { return true }
        if c.skip(UInt8(ascii: "Z")) { return c.atEnd }
        guard c.peek() == UInt8(ascii: "+") || c.peek() == UInt8(ascii: "-") else { return false }
        c.skipSign()
        guard c.skip(upTo: 2, while: isDigit) >= 1 else { return false }
        if c.skip(UInt8(ascii: ":")) {
            guard c.skip(upTo: 2, while: isDigit) == 2 else { return false }
        }
        return c.atEnd
    }
}
