import TaskGraph

// MARK: - Parser

/// The reader behind `YAMLDocument.parse`: structure here, scalars in `YAMLParser+Scalars.swift`.
struct YAMLParser {
    /// A position in the input, to return to after a look-ahead or to report an error at.
    struct Mark {
        var offset: Int
        var line: Int
        var lineStart: Int
    }

    let text: UnsafeBufferPointer<UInt8>
    var pos = 0
    /// The 0-based line of `pos`.
    var line = 0
    /// The offset of the first byte of the current line.
    var lineStart = 0

    init(text: UnsafeBufferPointer<UInt8>) { self.text = text }

    // MARK: Positions

    var atEnd: Bool { self.pos >= self.text.count }

    /// The byte at `pos + offset`, or 0 past the end (the input holds no NUL: `validate` rejects it).
    func peek(_ offset: Int = 0) -> UInt8 {
        let index = self.pos + offset
        return index < self.text.count ? self.text[index] : 0
    }

    var column: Int { self.pos - self.lineStart }

    var mark: Mark { Mark(offset: self.pos, line: self.line, lineStart: self.lineStart) }

    mutating func reset(to mark: Mark) {
        self.pos = mark.offset
        self.line = mark.line
        self.lineStart = mark.lineStart
    }

    /// Steps over the LF at `pos`.
    mutating func newline() {
        self.pos += 1
        self.line += 1
        self.lineStart = self.pos
    }

    mutating func skipSpaces() {
        while self.peek() == UInt8(ascii: " ") { self.pos += 1 }
    }

    func error(_ message: String, at mark: Mark? = nil) -> YAMLParseError {
        let mark = mark ?? self.mark
        return YAMLParseError(
            message: message,
            offset: mark.offset,
            line: mark.line + 1,
            column: mark.offset - mark.lineStart + 1
        )
    }

    /// The character at `pos` for a message (ASCII shown as itself).
    func describeCurrent() -> String {
        let c = self.peek()
        if self.atEnd { return "end of input" }
        if c == UInt8(ascii: "\n") { return "end of line" }
        if c >= 0x20, c < 0x7F { return "'\(Character(Unicode.Scalar(c)))'" }
        return "a non-ASCII character"
    }

    static func isBlankOrEnd(_ c: UInt8) -> Bool {
        c == UInt8(ascii: " ") || c == UInt8(ascii: "\n") || c == UInt8(ascii: "\t") || c == 0
    }

    static func isFlowIndicator(_ c: UInt8) -> Bool {
        c == UInt8(ascii: ",") || c == UInt8(ascii: "[") || c == UInt8(ascii: "]") || c == UInt8(ascii: "{")
            || c == UInt8(ascii: "}")
    }

    var atSequenceEntry: Bool { self.peek() == UInt8(ascii: "-") && Self.isBlankOrEnd(self.peek(1)) }

    /// Whether a `#` at `pos` starts a comment: at the start of a line or after a space.
    var commentAllowed: Bool { self.pos == self.lineStart || self.text[self.pos - 1] == UInt8(ascii: " ") }

    func checkDepth(_ depth: Int) throws(YAMLParseError) {
        if depth > YAMLDocument.maxDepth {
            throw self.error("collections nested deeper than \(YAMLDocument.maxDepth) levels")
        }
    }

    func tabError() -> YAMLParseError {
        self.error("tab character outside a quoted or block scalar (YAML indents with spaces)")
    }

    // MARK: Document

    mutating func parseDocument() throws(YAMLParseError) -> JSONValue {
        try self.validate()
        if self.text.count >= 3, self.text[0] == 0xEF, self.text[1] == 0xBB, self.text[2] == 0xBF {
            self.pos = 3  // a byte order mark
            self.lineStart = 3
        }
        try self.skipBlankLines()
        if self.atEnd { return .null }
        let value = try self.parseBlockNode(parentIndent: -1, depth: 0)
        try self.skipBlankLines()
        if !self.atEnd {
            let message =
                self.column > 0 ? "unexpected indentation" : "unexpected content after the document's root node"
            throw self.error(message)
        }
        return value
    }

    /// Rejects what YAML forbids or this parser does not read: invalid UTF-8, CR, control characters
    /// and the characters YAML 1.1 treats as line breaks (NEL, LS, PS).
    func validate() throws(YAMLParseError) {
        var i = 0
        var line = 0
        var lineStart = 0
        let n = self.text.count
        func fail(_ message: String) -> YAMLParseError {
            YAMLParseError(message: message, offset: i, line: line + 1, column: i - lineStart + 1)
        }
        while i < n {
            let b = self.text[i]
            if b < 0x80 {
                if b == UInt8(ascii: "\n") {
                    line += 1
                    lineStart = i + 1
                } else if b == UInt8(ascii: "\r") {
                    throw fail("carriage return: only LF line ends are supported")
                } else if (b < 0x20 && b != UInt8(ascii: "\t")) || b == 0x7F {
                    throw fail("control character U+\(Self.hex(UInt32(b))) is not allowed")
                }
                i += 1
                continue
            }
            let length: Int
            let minimum: UInt32
            var scalar: UInt32
            switch b {
            case 0xC2...0xDF: (length, minimum, scalar) = (2, 0x80, UInt32(b & 0x1F))
            case 0xE0...0xEF: (length, minimum, scalar) = (3, 0x800, UInt32(b & 0x0F))
            case 0xF0...0xF4: (length, minimum, scalar) = (4, 0x10000, UInt32(b & 0x07))
            default: throw fail("invalid UTF-8")
            }
            guard i + length <= n else { throw fail("invalid UTF-8") }
            for k in 1..<length {
                let continuation = self.text[i + k]
                guard continuation & 0xC0 == 0x80 else { throw fail("invalid UTF-8") }
                scalar = scalar << 6 | UInt32(continuation & 0x3F)
            }
            guard scalar >= minimum, scalar <= 0x10FFFF, !(0xD800...0xDFFF).contains(scalar) else {
                throw fail("invalid UTF-8")
            }
            if (0x80...0x9F).contains(scalar) || scalar == 0x2028 || scalar == 0x2029 || scalar == 0xFFFE
                || scalar == 0xFFFF
            {
                throw fail(
                    "character U+\(Self.hex(scalar)) is not allowed (a control character or a YAML 1.1 line break)"
                )
            }
            i += length
        }
    }

    static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    // MARK: Lines

    /// Skips empty lines, comment lines and indentation up to the next content (or the end). Called
    /// at a line end or in the indentation of a line.
    mutating func skipBlankLines() throws(YAMLParseError) {
        while true {
            self.skipSpaces()
            switch self.peek() {
            case UInt8(ascii: "\t"):
                throw self.tabError()
            case UInt8(ascii: "#"):
                while self.peek() != UInt8(ascii: "\n"), !self.atEnd { self.pos += 1 }
            case UInt8(ascii: "\n"):
                self.newline()
            default:
                if self.column == 0 { try self.checkNoDocumentMarker() }
                return
            }
        }
    }

    /// At the start of a line: rejects `---`, `...` and `%` directives.
    func checkNoDocumentMarker() throws(YAMLParseError) {
        let c = self.peek()
        if (c == UInt8(ascii: "-") || c == UInt8(ascii: ".")) && self.peek(1) == c && self.peek(2) == c
            && Self.isBlankOrEnd(self.peek(3))
        {
            throw self.error("document markers ('---', '...') are not supported: the input must be one document")
        }
        if c == UInt8(ascii: "%") { throw self.error("directives ('%') are not supported") }
    }

    /// After a node that ends its line: spaces, an optional comment, then the line end (or the end).
    mutating func expectLineEnd() throws(YAMLParseError) {
        self.skipSpaces()
        switch self.peek() {
        case UInt8(ascii: "\n"), 0:
            return
        case UInt8(ascii: "#"):
            guard self.commentAllowed else { throw self.error("a comment needs a space before '#'") }
            while self.peek() != UInt8(ascii: "\n"), !self.atEnd { self.pos += 1 }
        case UInt8(ascii: "\t"):
            throw self.tabError()
        case UInt8(ascii: ":") where Self.isBlankOrEnd(self.peek(1)):
            throw self.error(
                "mapping values are not allowed here (quote a scalar containing ': '; start a mapping on its own line)"
            )
        default:
            throw self.error("unexpected \(self.describeCurrent()) after a complete value")
        }
    }

    // MARK: Block collections

    /// A node whose first character is at `pos` (not a space, line end or comment): a block
    /// sequence, a block mapping, or a scalar or flow collection.
    mutating func parseBlockNode(parentIndent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        if self.atSequenceEntry { return try self.parseBlockSequence(indent: self.column, depth: depth + 1) }
        let start = self.mark
        if try self.scanBlockKey() != nil {
            self.reset(to: start)
            return try self.parseBlockMapping(indent: self.column, depth: depth + 1)
        }
        return try self.parseInlineValue(parentIndent: parentIndent, depth: depth)
    }

    /// A block mapping whose keys are at column `indent`; `pos` is at its first key.
    mutating func parseBlockMapping(indent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        try self.checkDepth(depth)
        var members: [JSONObject.Member] = []
        var seen: Set<String> = []
        while true {
            let keyMark = self.mark
            guard let key = try self.scanBlockKey() else {
                if self.atSequenceEntry { throw self.error("expected a mapping key, found a sequence entry ('- ')") }
                try self.rejectUnsupportedIndicator(flow: false)
                throw self.error("expected a mapping key ('key: value') at this indentation")
            }
            guard seen.insert(key).inserted else { throw self.error("duplicate key \"\(key)\"", at: keyMark) }
            members.append((key: key, value: try self.parseMappingValue(indent: indent, depth: depth)))
            try self.skipBlankLines()
            if self.atEnd || self.column < indent { break }
            if self.column > indent {
                throw self.error("unexpected indentation (the keys of this mapping are at column \(indent + 1))")
            }
        }
        return .object(JSONObject(members))
    }

    /// A block sequence whose `-` entries are at column `indent`; `pos` is at its first `-`.
    mutating func parseBlockSequence(indent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        try self.checkDepth(depth)
        var items: [JSONValue] = []
        while true {
            self.pos += 1  // the '-'
            self.skipSpaces()
            if self.peek() == UInt8(ascii: "\t") { throw self.tabError() }
            if self.peek() == UInt8(ascii: "#") || self.peek() == UInt8(ascii: "\n") || self.atEnd {
                try self.expectLineEnd()
                try self.skipBlankLines()
                if !self.atEnd, self.column > indent {
                    items.append(try self.parseBlockNode(parentIndent: indent, depth: depth))
                } else {
                    items.append(.null)
                }
            } else {
                // On the entry's line: a scalar, a flow collection, or a compact mapping or sequence.
                items.append(try self.parseBlockNode(parentIndent: indent, depth: depth))
            }
            try self.skipBlankLines()
            if self.atEnd || self.column < indent { break }
            if self.column > indent {
                throw self.error("unexpected indentation (the entries of this sequence are at column \(indent + 1))")
            }
            // Anything else at this column is the next key of the mapping holding this sequence.
            guard self.atSequenceEntry else { break }
        }
        return .array(items)
    }

    /// The value after `key:` in a block mapping whose keys are at column `indent`.
    mutating func parseMappingValue(indent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        self.skipSpaces()
        let c = self.peek()
        if c == UInt8(ascii: "\t") { throw self.tabError() }
        guard c == UInt8(ascii: "#") || c == UInt8(ascii: "\n") || self.atEnd else {
            return try self.parseInlineValue(parentIndent: indent, depth: depth)
        }
        try self.expectLineEnd()
        try self.skipBlankLines()
        if self.atEnd { return .null }
        if self.column > indent { return try self.parseBlockNode(parentIndent: indent, depth: depth) }
        if self.column == indent, self.atSequenceEntry {
            // A sequence may sit at its key's indentation.
            return try self.parseBlockSequence(indent: indent, depth: depth + 1)
        }
        return .null
    }

    /// A mapping key on one line followed by `:` and a space or the line end. Returns the key as a
    /// JSON string and leaves `pos` after the `:`; returns nil, with `pos` unchanged, when the text
    /// at `pos` is no key.
    mutating func scanBlockKey() throws(YAMLParseError) -> String? {
        let start = self.mark
        let c = self.peek()
        var quoted: String? = nil
        var plain: [UInt8] = []
        if c == UInt8(ascii: "\"") || c == UInt8(ascii: "'") {
            // Indentation is checked when the scalar is read again as a value.
            quoted = try self.scanQuoted(parentIndent: -1)
            if self.line != start.line {
                self.reset(to: start)
                return nil
            }
        } else if self.canStartPlain(flow: false) {
            plain = try self.scanPlain(flow: false, minIndent: 0, multiLine: false)
        } else {
            return nil
        }
        self.skipSpaces()
        guard self.peek() == UInt8(ascii: ":"), Self.isBlankOrEnd(self.peek(1)) else {
            self.reset(to: start)
            return nil
        }
        self.pos += 1
        if let quoted { return quoted }
        return try self.keyString(plain, at: start)
    }

    /// A scalar or flow collection starting at `pos`, which must end its line (a block scalar ends
    /// at the first line indented too little).
    mutating func parseInlineValue(parentIndent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        let start = self.mark
        let value: JSONValue
        switch self.peek() {
        case UInt8(ascii: "|"), UInt8(ascii: ">"):
            return .string(try self.scanBlockScalar(parentIndent: parentIndent))
        case UInt8(ascii: "["), UInt8(ascii: "{"):
            value = try self.parseFlowCollection(parentIndent: parentIndent, depth: depth + 1)
            self.skipSpaces()
            if self.peek() == UInt8(ascii: ":") {
                throw self.error("a flow collection cannot be a mapping key (only scalars can)")
            }
        case UInt8(ascii: "\""), UInt8(ascii: "'"):
            value = .string(try self.scanQuoted(parentIndent: parentIndent))
        default:
            try self.rejectUnsupportedIndicator(flow: false)
            guard self.canStartPlain(flow: false) else {
                throw self.error("unexpected \(self.describeCurrent()) at the start of a value")
            }
            let raw = try self.scanPlain(flow: false, minIndent: parentIndent + 1, multiLine: true)
            value = try self.resolve(raw, at: start)
        }
        try self.expectLineEnd()
        return value
    }

    /// Throws for an indicator at `pos` that starts something this parser does not support.
    func rejectUnsupportedIndicator(flow: Bool) throws(YAMLParseError) {
        let next = self.peek(1)
        switch self.peek() {
        case UInt8(ascii: "&"): throw self.error("anchors ('&') are not supported")
        case UInt8(ascii: "*"): throw self.error("aliases ('*') are not supported")
        case UInt8(ascii: "!"): throw self.error("tags ('!') are not supported")
        case UInt8(ascii: "%"): throw self.error("directives ('%') are not supported")
        case UInt8(ascii: "@"), UInt8(ascii: "`"):
            throw self.error("'@' and '`' are reserved and cannot start a plain scalar (quote the scalar)")
        case UInt8(ascii: "?") where flow || Self.isBlankOrEnd(next):
            throw self.error("explicit keys ('?') are not supported")
        case UInt8(ascii: ":") where flow || Self.isBlankOrEnd(next):
            throw self.error("a mapping key is missing before ':'")
        case UInt8(ascii: "-") where Self.isBlankOrEnd(next):
            throw self.error(
                flow
                    ? "block sequences are not allowed inside flow collections"
                    : "a block sequence cannot start on the line of its key (start it on the next line)"
            )
        case UInt8(ascii: "|") where flow, UInt8(ascii: ">") where flow:
            throw self.error("block scalars are not allowed inside flow collections")
        default:
            return
        }
    }

    // MARK: Flow collections

    /// A flow sequence `[…]` or flow mapping `{…}` at `pos`. Lines after the first must be
    /// indented more than `parentIndent`.
    mutating func parseFlowCollection(parentIndent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        try self.checkDepth(depth)
        let start = self.mark
        if self.peek() == UInt8(ascii: "[") {
            self.pos += 1
            var items: [JSONValue] = []
            while true {
                try self.skipFlowSpace(parentIndent: parentIndent)
                if self.peek() == UInt8(ascii: "]") {
                    self.pos += 1
                    break
                }
                if self.atEnd { throw self.error("unterminated flow sequence", at: start) }
                items.append(try self.parseFlowNode(parentIndent: parentIndent, depth: depth))
                try self.skipFlowSpace(parentIndent: parentIndent)
                switch self.peek() {
                case UInt8(ascii: ","):
                    self.pos += 1
                case UInt8(ascii: "]"):
                    self.pos += 1
                    return .array(items)
                case UInt8(ascii: ":"):
                    throw self.error(
                        "single-pair mappings inside flow sequences are not supported (use '{key: value}')"
                    )
                case 0:
                    throw self.error("unterminated flow sequence", at: start)
                default:
                    throw self.error("expected ',' or ']' in a flow sequence, found \(self.describeCurrent())")
                }
            }
            return .array(items)
        }
        self.pos += 1  // the '{'
        var members: [JSONObject.Member] = []
        var seen: Set<String> = []
        while true {
            try self.skipFlowSpace(parentIndent: parentIndent)
            if self.peek() == UInt8(ascii: "}") {
                self.pos += 1
                break
            }
            if self.atEnd { throw self.error("unterminated flow mapping", at: start) }
            let keyMark = self.mark
            let key: String
            let c = self.peek()
            if c == UInt8(ascii: "\"") || c == UInt8(ascii: "'") {
                key = try self.scanQuoted(parentIndent: parentIndent)
                if self.line != keyMark.line { throw self.error("a mapping key must be on one line", at: keyMark) }
            } else if self.canStartPlain(flow: true) {
                let raw = try self.scanPlain(flow: true, minIndent: parentIndent + 1, multiLine: false)
                key = try self.keyString(raw, at: keyMark)
            } else {
                try self.rejectUnsupportedIndicator(flow: true)
                if c == UInt8(ascii: "[") || c == UInt8(ascii: "{") {
                    throw self.error("a flow collection cannot be a mapping key (only scalars can)")
                }
                throw self.error("expected a key in a flow mapping, found \(self.describeCurrent())")
            }
            guard seen.insert(key).inserted else { throw self.error("duplicate key \"\(key)\"", at: keyMark) }
            self.skipSpaces()
            guard self.peek() == UInt8(ascii: ":") else {
                throw self.error("expected ':' after the key \"\(key)\" (on the key's line) in a flow mapping")
            }
            self.pos += 1
            try self.skipFlowSpace(parentIndent: parentIndent)
            if self.peek() == UInt8(ascii: ",") || self.peek() == UInt8(ascii: "}") {
                throw self.error("expected a value after ':' in a flow mapping (write null explicitly)")
            }
            if self.atEnd { throw self.error("unterminated flow mapping", at: start) }
            members.append((key: key, value: try self.parseFlowNode(parentIndent: parentIndent, depth: depth)))
            try self.skipFlowSpace(parentIndent: parentIndent)
            switch self.peek() {
            case UInt8(ascii: ","):
                self.pos += 1
            case UInt8(ascii: "}"):
                self.pos += 1
                return .object(JSONObject(members))
            case 0:
                throw self.error("unterminated flow mapping", at: start)
            default:
                throw self.error("expected ',' or '}' in a flow mapping, found \(self.describeCurrent())")
            }
        }
        return .object(JSONObject(members))
    }

    /// A node inside a flow collection.
    mutating func parseFlowNode(parentIndent: Int, depth: Int) throws(YAMLParseError) -> JSONValue {
        let start = self.mark
        switch self.peek() {
        case UInt8(ascii: "["), UInt8(ascii: "{"):
            return try self.parseFlowCollection(parentIndent: parentIndent, depth: depth + 1)
        case UInt8(ascii: "\""), UInt8(ascii: "'"):
            return .string(try self.scanQuoted(parentIndent: parentIndent))
        default:
            try self.rejectUnsupportedIndicator(flow: true)
            guard self.canStartPlain(flow: true) else {
                throw self.error("unexpected \(self.describeCurrent()) in a flow collection")
            }
            let raw = try self.scanPlain(flow: true, minIndent: parentIndent + 1, multiLine: true)
            return try self.resolve(raw, at: start)
        }
    }

    /// Skips spaces, line ends and comments inside a flow collection.
    mutating func skipFlowSpace(parentIndent: Int) throws(YAMLParseError) {
        while true {
            switch self.peek() {
            case UInt8(ascii: " "):
                self.pos += 1
            case UInt8(ascii: "\t"):
                throw self.tabError()
            case UInt8(ascii: "#"):
                guard self.commentAllowed else { throw self.error("a comment needs a space before '#'") }
                while self.peek() != UInt8(ascii: "\n"), !self.atEnd { self.pos += 1 }
            case UInt8(ascii: "\n"):
                self.newline()
                self.skipSpaces()
                let c = self.peek()
                if c != UInt8(ascii: "\n"), c != UInt8(ascii: "#"), c != UInt8(ascii: "\t"), c != 0 {
                    if self.column == 0 { try self.checkNoDocumentMarker() }
                    if self.column <= parentIndent {
                        throw self.error("a line inside a flow collection must be indented more than its parent")
                    }
                }
            default:
                return
            }
        }
    }
}
