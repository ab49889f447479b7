// Templates (SPEC §1.3): `${expr}` inside strings of `params` and a node's `input`.
//
// Grammar (hand-written parser over UTF-8 bytes, no regular expressions):
//
//     template   := ( literal | "$${" | "${" ws* expression ws* "}" )*
//     expression := "input" path
//                 | "job" [ field("input" | "id" | "name") ] path
//                 | "tasks" taskID [ field("result" | "error" | "state") ] path
//     taskID     := "." ( name-char | "/" | "[" digit+ "]" )+      e.g. tasks.step-1, tasks.delete[3], tasks.dyn/step
//                 | "[" quoted "]"                                e.g. tasks["root.steps.0"]
//     field      := "." name | "[" quoted "]"
//     path       := ( "." name | "[" digit+ "]" | "[" quoted "]" )*
//     name       := ( ASCII letter | digit | "_" | "-" )+
//     quoted     := '"' … '"' | "'" … "'"        (escapes: \" \' \\)
//
// `$${` is the two literal characters `${`, after which parsing continues normally (so `$${input}` renders
// as the text `${input}`). A `$` not followed by `{` is literal. Unknown roots and unknown `job`/`tasks`
// fields are syntax errors, so typos are reported when the job is submitted, not when the node runs.

/// The template parser: a cursor over the UTF-8 bytes of one template string.
struct TemplateSyntax {
    private static let dollar = UInt8(ascii: "$")
    private static let openBrace = UInt8(ascii: "{")
    private static let closeBrace = UInt8(ascii: "}")
    private static let dot = UInt8(ascii: ".")
    private static let openBracket = UInt8(ascii: "[")
    private static let closeBracket = UInt8(ascii: "]")
    private static let doubleQuote = UInt8(ascii: "\"")
    private static let singleQuote = UInt8(ascii: "'")
    private static let backslash = UInt8(ascii: "\\")
    private static let slash = UInt8(ascii: "/")
    private static let minus = UInt8(ascii: "-")

    /// Longest expression text quoted in a syntax error message.
    private static let maxQuotedLength = 80

    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    /// Where the `${` of the expression being parsed starts.
    private var expressionStart = 0

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    // MARK: Character classes

    static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n")
            || byte == UInt8(ascii: "\r")
    }

    /// Whether `text` can be written as a `.name` path segment.
    static func isName(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(TemplateSyntax.isNameByte)
    }

    /// Whether `id` can be written as `tasks.<id>` (rather than `tasks["<id>"]`).
    static func isPlainTaskID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard let first = bytes.first, isNameByte(first) else { return false }
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if isNameByte(byte) || byte == slash {
                index += 1
            } else if byte == openBracket {
                var end = index + 1
                while end < bytes.count, isDigit(bytes[end]) { end += 1 }
                guard end > index + 1, end < bytes.count, bytes[end] == closeBracket else { return false }
                index = end + 1
            } else {
                return false
            }
        }
        return true
    }

    /// Whether `text` contains `${` (a UTF-8 scan; no allocation).
    static func containsOpener(_ text: String) -> Bool {
        if let found = text.utf8.withContiguousStorageIfAvailable({ TemplateSyntax.containsOpener(bytes: $0) }) {
            return found
        }
        var previousWasDollar = false
        for byte in text.utf8 {
            if previousWasDollar && byte == openBrace { return true }
            previousWasDollar = byte == dollar
        }
        return false
    }

    private static func containsOpener(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard bytes.count >= 2, let base = bytes.baseAddress else { return false }
        let count = bytes.count
        var index = 0
        // Eight bytes at a time: skip words that hold no `$` (SWAR zero-byte test on word ^ "$$$$$$$$").
        let raw = UnsafeRawPointer(base)
        while index + 8 <= count {
            let word = raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ 0x2424_2424_2424_2424
            if (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080 != 0 { break }
            index += 8
        }
        let last = count - 1
        while index < last {
            if base[index] == dollar && base[index + 1] == openBrace { return true }
            index += 1
        }
        return false
    }

    // MARK: Template

    mutating func parseTemplate() throws(TemplateError) -> Template.Form {
        var pieces: [Template.Piece] = []
        var literal = ""
        var literalStart = 0
        let count = self.bytes.count
        while self.position < count {
            guard self.bytes[self.position] == TemplateSyntax.dollar else {
                self.position += 1
                continue
            }
            let next = self.position + 1 < count ? self.bytes[self.position + 1] : 0
            if next == TemplateSyntax.openBrace {
                if self.position == 0 {
                    // The common case `${expr}` with nothing around it: no piece list needed.
                    let expression = try self.parseExpression()
                    if self.position == count { return .single(expression) }
                    pieces.append(.expression(expression))
                    literalStart = self.position
                    continue
                }
                literal += self.text(literalStart..<self.position)
                if !literal.isEmpty {
                    pieces.append(.literal(literal))
                    literal = ""
                }
                pieces.append(.expression(try self.parseExpression()))
                literalStart = self.position
            } else if next == TemplateSyntax.dollar, self.position + 2 < count,
                self.bytes[self.position + 2] == TemplateSyntax.openBrace
            {
                // `$${` → `${`: drop the first `$`, keep `${` as the start of the next literal run.
                literal += self.text(literalStart..<self.position)
                literalStart = self.position + 1
                self.position += 3
            } else {
                self.position += 1
            }
        }
        literal += self.text(literalStart..<count)
        if !literal.isEmpty { pieces.append(.literal(literal)) }

        if pieces.count == 1, case .expression(let expression) = pieces[0] { return .single(expression) }
        if pieces.isEmpty { return .literal("") }
        if pieces.count == 1, case .literal(let text) = pieces[0] { return .literal(text) }
        var capacity = 0
        for piece in pieces {
            switch piece {
            case .literal(let text): capacity += text.utf8.count
            case .expression: capacity += 16
            }
        }
        return .interpolated(pieces, capacity: capacity)
    }

    // MARK: Expression

    /// Parses `${ … }` starting at the `$`; leaves the cursor after the `}`.
    private mutating func parseExpression() throws(TemplateError) -> TemplateExpression {
        self.expressionStart = self.position
        self.position += 2
        self.skipWhitespace()
        guard let first = self.peek() else { throw self.unterminated() }
        if first == TemplateSyntax.closeBrace { throw self.invalid("the expression is empty") }
        let sourceStart = self.position

        let rootName = self.readName()
        var path: [TemplateExpression.PathSegment] = []
        let root: TemplateExpression.Root
        switch rootName {
        case "input":
            root = .input
        case "job":
            root = .job
            if let field = try self.parseField() {
                guard field == "input" || field == "id" || field == "name" else {
                    throw self.invalid(
                        "unknown job field \(TemplateExpression.quoted(field)) (expected input, id or name)"
                    )
                }
                path.reserveCapacity(4)
                path.append(.key(field))
            }
        case "tasks":
            root = .tasks(id: try self.parseTaskID())
            if let field = try self.parseField() {
                guard field == "result" || field == "error" || field == "state" else {
                    throw self.invalid(
                        "unknown task field \(TemplateExpression.quoted(field)) (expected result, error or state)"
                    )
                }
                path.reserveCapacity(4)
                path.append(.key(field))
            }
        case "":
            throw self.invalid("expected input, job or tasks, found \(self.describeCurrent())")
        default:
            throw self.invalid("unknown root \(TemplateExpression.quoted(rootName)) (expected input, job or tasks)")
        }
        try self.parsePath(into: &path)
        let sourceEnd = self.position

        self.skipWhitespace()
        guard let closing = self.peek() else { throw self.unterminated() }
        guard closing == TemplateSyntax.closeBrace else {
            throw self.invalid("unexpected \(self.describeCurrent()) (expected '.', '[' or '}')")
        }
        self.position += 1
        return TemplateExpression(root: root, path: path, source: self.text(sourceStart..<sourceEnd))
    }

    /// After `job` or `tasks.<id>`: an optional `.name` or `["name"]` field; `nil` when there is none.
    private mutating func parseField() throws(TemplateError) -> String? {
        guard let byte = self.peek() else { return nil }
        if byte == TemplateSyntax.dot {
            self.position += 1
            let name = self.readName()
            if name.isEmpty { throw self.invalid("expected a name after '.', found \(self.describeCurrent())") }
            return name
        }
        if byte == TemplateSyntax.openBracket, let quote = self.peek(offset: 1),
            quote == TemplateSyntax.doubleQuote || quote == TemplateSyntax.singleQuote
        {
            self.position += 1
            let name = try self.parseQuoted()
            try self.expectCloseBracket()
            return name
        }
        return nil
    }

    /// `.step-1`, `.delete[3]`, `.dyn/step` or `["my.id"]`, after `tasks`.
    private mutating func parseTaskID() throws(TemplateError) -> String {
        guard let byte = self.peek() else { throw self.unterminated() }
        if byte == TemplateSyntax.dot {
            self.position += 1
            let start = self.position
            guard let first = self.peek(), TemplateSyntax.isNameByte(first) else {
                throw self.invalid("expected a task id after 'tasks.', found \(self.describeCurrent())")
            }
            while let next = self.peek() {
                if TemplateSyntax.isNameByte(next) || next == TemplateSyntax.slash {
                    self.position += 1
                } else if next == TemplateSyntax.openBracket {
                    // `[digits]` belongs to the id (map instances: `delete[3]`); an outcome object has no indices.
                    var end = self.position + 1
                    while end < self.bytes.count, TemplateSyntax.isDigit(self.bytes[end]) { end += 1 }
                    guard end > self.position + 1, end < self.bytes.count,
                        self.bytes[end] == TemplateSyntax.closeBracket
                    else { break }
                    self.position = end + 1
                } else {
                    break
                }
            }
            return self.text(start..<self.position)
        }
        if byte == TemplateSyntax.openBracket {
            self.position += 1
            guard let quote = self.peek() else { throw self.unterminated() }
            guard quote == TemplateSyntax.doubleQuote || quote == TemplateSyntax.singleQuote else {
                throw self.invalid("expected a quoted task id after 'tasks[', found \(self.describeCurrent())")
            }
            let id = try self.parseQuoted()
            if id.isEmpty { throw self.invalid("the task id is empty") }
            try self.expectCloseBracket()
            return id
        }
        throw self.invalid(
            "expected a task id after 'tasks' (tasks.<id> or tasks[\"<id>\"]), found \(self.describeCurrent())"
        )
    }

    /// `.name`, `[0]`, `["key"]`, `['key']`, repeated; stops before anything else.
    private mutating func parsePath(into path: inout [TemplateExpression.PathSegment]) throws(TemplateError) {
        while let byte = self.peek() {
            guard byte == TemplateSyntax.dot || byte == TemplateSyntax.openBracket else { return }
            // Paths are short; reserving once avoids growing the array one segment at a time.
            if path.capacity < 4 { path.reserveCapacity(4) }
            if byte == TemplateSyntax.dot {
                self.position += 1
                let name = self.readName()
                if name.isEmpty { throw self.invalid("expected a name after '.', found \(self.describeCurrent())") }
                path.append(.key(name))
            } else if byte == TemplateSyntax.openBracket {
                self.position += 1
                guard let next = self.peek() else { throw self.unterminated() }
                if next == TemplateSyntax.doubleQuote || next == TemplateSyntax.singleQuote {
                    path.append(.key(try self.parseQuoted()))
                } else if TemplateSyntax.isDigit(next) {
                    path.append(.index(try self.parseIndex()))
                } else if next == TemplateSyntax.minus {
                    throw self.invalid("an array index must be a non-negative integer")
                } else {
                    throw self.invalid("expected an index or a quoted key after '[', found \(self.describeCurrent())")
                }
                try self.expectCloseBracket()
            }
        }
    }

    private mutating func parseIndex() throws(TemplateError) -> Int {
        let start = self.position
        var value = 0
        while let byte = self.peek(), TemplateSyntax.isDigit(byte) {
            if self.position - start >= 18 { throw self.invalid("the array index is too large") }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            self.position += 1
        }
        return value
    }

    /// A quoted key starting at the quote; leaves the cursor after the closing quote.
    private mutating func parseQuoted() throws(TemplateError) -> String {
        let quote = self.bytes[self.position]
        self.position += 1
        let start = self.position
        var unescaped: [UInt8]? = nil
        while true {
            guard let byte = self.peek() else {
                throw self.unterminated(
                    detail: "missing closing \(quote == TemplateSyntax.doubleQuote ? "'\"'" : "\"'\"") of a quoted key"
                )
            }
            if byte == quote {
                let key = unescaped.map { String(decoding: $0, as: UTF8.self) } ?? self.text(start..<self.position)
                self.position += 1
                return key
            }
            if byte == TemplateSyntax.backslash {
                if unescaped == nil { unescaped = Array(self.bytes[start..<self.position]) }
                guard let escaped = self.peek(offset: 1) else {
                    self.position += 1
                    throw self.unterminated(
                        detail:
                            "missing closing \(quote == TemplateSyntax.doubleQuote ? "'\"'" : "\"'\"") of a quoted key"
                    )
                }
                guard
                    escaped == TemplateSyntax.doubleQuote || escaped == TemplateSyntax.singleQuote
                        || escaped == TemplateSyntax.backslash
                else {
                    self.position += 1
                    throw self.invalid(
                        "unsupported escape '\\\(self.describeCurrent(quotes: false))' in a quoted key (use \\\", \\' or \\\\)"
                    )
                }
                unescaped?.append(escaped)
                self.position += 2
            } else {
                unescaped?.append(byte)
                self.position += 1
            }
        }
    }

    private mutating func expectCloseBracket() throws(TemplateError) {
        guard let byte = self.peek() else { throw self.unterminated() }
        guard byte == TemplateSyntax.closeBracket else {
            throw self.invalid("expected ']', found \(self.describeCurrent())")
        }
        self.position += 1
    }

    // MARK: Cursor helpers

    private func peek(offset: Int = 0) -> UInt8? {
        let index = self.position + offset
        return index < self.bytes.count ? self.bytes[index] : nil
    }

    private mutating func skipWhitespace() {
        while let byte = self.peek(), TemplateSyntax.isWhitespace(byte) { self.position += 1 }
    }

    private mutating func readName() -> String {
        let start = self.position
        while let byte = self.peek(), TemplateSyntax.isNameByte(byte) { self.position += 1 }
        return self.text(start..<self.position)
    }

    private func text(_ range: Range<Int>) -> String {
        guard !range.isEmpty else { return "" }
        return String(decoding: UnsafeBufferPointer(rebasing: self.bytes[range]), as: UTF8.self)
    }

    /// The character at the cursor, e.g. `'x'` (or `end of expression` at `}`).
    private func describeCurrent(quotes: Bool = true) -> String {
        guard let byte = self.peek() else { return "the end of the string" }
        if byte == TemplateSyntax.closeBrace && quotes { return "'}'" }
        var end = self.position + 1
        while end < self.bytes.count, self.bytes[end] & 0xC0 == 0x80 { end += 1 }
        let character = self.text(self.position..<end)
        return quotes ? "'" + character + "'" : character
    }

    // MARK: Errors

    /// The expression as written, from `${` through the next `}` at or after the cursor (or the end),
    /// shortened when long.
    private func quotedExpression(throughClosingBrace: Bool) -> String {
        var end = self.bytes.count
        if throughClosingBrace {
            var index = min(self.position, self.bytes.count)
            while index < self.bytes.count {
                if self.bytes[index] == TemplateSyntax.closeBrace {
                    end = index + 1
                    break
                }
                index += 1
            }
        }
        guard end - self.expressionStart > TemplateSyntax.maxQuotedLength else {
            return self.text(self.expressionStart..<end)
        }
        var cut = self.expressionStart + TemplateSyntax.maxQuotedLength
        while cut > self.expressionStart, self.bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
        return self.text(self.expressionStart..<cut) + "…"
    }

    private func invalid(_ detail: String) -> TemplateError {
        // Whatever was expected, running out of text means the `${` was never closed.
        if self.position >= self.bytes.count { return self.unterminated() }
        return .syntax("invalid template expression \(self.quotedExpression(throughClosingBrace: true)): \(detail)")
    }

    private func unterminated(detail: String = "missing closing '}'") -> TemplateError {
        .syntax("unterminated template expression \(self.quotedExpression(throughClosingBrace: false)): \(detail)")
    }
}
