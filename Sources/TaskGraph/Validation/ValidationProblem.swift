/// One problem found in a submitted job: where (an RFC 6901 JSON pointer into the document) and what.
public struct ValidationProblem: Sendable, Equatable, CustomStringConvertible {
    /// The RFC 6901 pointer of the offending value (`/graph/steps/2/params/ms`).
    public var pointer: String
    /// A sentence a person understands.
    public var message: String

    public init(pointer: String, message: String) {
        self.pointer = pointer
        self.message = message
    }

    public var description: String { "\(self.pointer.isEmpty ? "/" : self.pointer): \(self.message)" }
}

/// A job that failed validation, with every problem found (not only the first).
public struct ValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var problems: [ValidationProblem]
    /// Problems found beyond those listed (a reporter stops rendering messages at its cap, so a
    /// hostile document cannot make it format millions of them).
    public var unreported: Int

    public init(_ problems: [ValidationProblem], unreported: Int = 0) {
        self.problems = problems
        self.unreported = unreported
    }

    public var description: String { self.problems.map(\.description).joined(separator: "; ") }
}

/// RFC 6901 pointer building.
public enum JSONPointer {
    /// `base` extended by one reference token, escaped (`~` → `~0`, `/` → `~1`).
    public static func appending(_ base: String, _ token: String) -> String {
        if !token.contains("~") && !token.contains("/") { return base + "/" + token }
        return base + "/" + token.escapedPointerToken
    }

    /// `base` extended by an array index.
    public static func appending(_ base: String, _ index: Int) -> String {
        base + "/" + String(index)
    }
}

extension String {
    /// Escapes an RFC 6901 reference token: `~` → `~0`, `/` → `~1`.
    var escapedPointerToken: String {
        var out = ""
        out.reserveCapacity(self.utf8.count + 2)
        for character in self {
            switch character {
            case "~": out += "~0"
            case "/": out += "~1"
            default: out.append(character)
            }
        }
        return out
    }
}
