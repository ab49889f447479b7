import TaskGraph

// A strict reader for the YAML subset of `openapi.yaml`, so the server can also serve the contract
// as JSON (`GET /openapi.json`) without a YAML dependency or a generated copy.
//
// Supported: one document of block mappings and block sequences (by indentation, including `- `
// items that hold mappings or sequences and sequences at their key's indentation), flow sequences
// and flow mappings (nested, over several lines), plain scalars (over several lines), single- and
// double-quoted scalars with all their escapes, literal `|` and folded `>` block scalars with
// `-`/`+` chomping, and comments.
//
// Plain scalars resolve as YAML 1.1 (PyYAML) and the YAML 1.2 core schema agree: `null`/`~`,
// `true`/`false` (three spellings each), decimal integers and decimal fractions; anything else is a
// string. A plain scalar the two versions read differently, or as a value JSON cannot hold, is an
// error that asks for quotes: `yes`/`no`/`on`/`off`, `1e3`, `0x1F`, `010`, `1_000`, `1:30`, `.inf`,
// `2024-01-01`, `<<`. Mapping keys become JSON strings: `200:` gives `"200"`, `true:` `"true"`,
// `null:` `"null"`.
//
// Rejected with an error (line and column): anchors, aliases, tags, directives, document markers,
// explicit `?` keys, collections as keys, flow mapping entries without `: value`, single-pair
// mappings in flow sequences, explicit block indentation indicators, duplicate keys (also `200` and
// `'200'`), lines of flow collections or quoted scalars not indented past their parent, tabs
// outside quoted and block scalars, CR line ends, control characters and invalid UTF-8.

/// Why a YAML document was rejected, and where.
struct YAMLParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, for example `duplicate key "type"`.
    var message: String
    /// The byte offset of the problem from the start of the input.
    var offset: Int
    /// The 1-based line of the problem (lines end at LF).
    var line: Int
    /// The 1-based column of the problem, counted in bytes.
    var column: Int

    /// The position and message, for example `line 3, column 7: duplicate key "type"`.
    var description: String { "line \(self.line), column \(self.column): \(self.message)" }
}

enum YAMLDocument {
    /// The deepest nesting of collections accepted (`openapi.yaml` nests 16 deep).
    static let maxDepth = 64

    /// Parses one YAML document (UTF-8) of the supported subset into JSON.
    static func parse(_ bytes: [UInt8]) throws(YAMLParseError) -> JSONValue {
        let result: Result<JSONValue, YAMLParseError> = bytes.withUnsafeBufferPointer { buffer in
            var parser = YAMLParser(text: buffer)
            return Result { () throws(YAMLParseError) -> JSONValue in try parser.parseDocument() }
        }
        return try result.get()
    }
}
