import TaskGraph
import Testing

@testable import TaskServer

/// The YAML subset reader behind `GET /openapi.json`: each construct it reads (results as PyYAML's
/// `safe_load` gives them, then `json.dumps`), and each it rejects.
struct YAMLDocumentTests {
    static func parse(_ text: String) throws(YAMLParseError) -> JSONValue {
        try YAMLDocument.parse(Array(text.utf8))
    }

    /// Checks the value and its JSON text (which also compares key order and ints against doubles).
    static func expectParses(_ text: String, _ expected: JSONValue, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let value = try self.parse(text)
            #expect(value == expected, sourceLocation: sourceLocation)
            #expect(value.jsonString == expected.jsonString, sourceLocation: sourceLocation)
        } catch {
            Issue.record("rejected: \(error)", sourceLocation: sourceLocation)
        }
    }

    // MARK: - The served document

    @Test func parsesTheEmbeddedOpenAPIDocument() throws {
        let document = try YAMLDocument.parse(PackageResources.openapi_yaml)
        #expect(document["openapi"]?.stringValue?.hasPrefix("3.1.") == true)
        #expect(document.objectValue?.keys.first == "openapi")
        let paths = try #require(document["paths"]?.objectValue)
        #expect(!paths.isEmpty)
        #expect(paths.keys.allSatisfy { $0.hasPrefix("/") })
        // Response codes are keys, so strings.
        for (_, pathItem) in paths {
            for (_, operation) in try #require(pathItem.objectValue) {
                guard let responses = operation["responses"]?.objectValue else { continue }
                #expect(responses.keys.allSatisfy { $0 == "default" || Int($0) != nil })
            }
        }
    }

    // MARK: - Block collections

    @Test func readsBlockMappingsInSourceOrder() {
        Self.expectParses(
            "zeta: 1\nalpha: two\nmid:\n  y: x\n  x: [1, 2]\n",
            ["zeta": 1, "alpha": "two", "mid": ["y": "x", "x": [1, 2]]]
        )
        Self.expectParses("a b: spaced\nk : before colon\n", ["a b": "spaced", "k": "before colon"])
        Self.expectParses("  a: 1\n  b: 2\n", ["a": 1, "b": 2])  // indented root
        Self.expectParses("a:\n  b:\n    c:\n      d: deep\n", ["a": ["b": ["c": ["d": "deep"]]]])
    }

    @Test func readsBlockSequences() {
        Self.expectParses("- a\n- b\n", ["a", "b"])
        Self.expectParses("- - a\n  - b\n- c\n", [["a", "b"], "c"])
        Self.expectParses("- - - a\n    - b\n  - c\n", [[["a", "b"], "c"]])
        Self.expectParses("-\n  - x\n-\n  k: v\n", [["x"], ["k": "v"]])
        Self.expectParses("- [a, b]\n- {a: 1}\n- 'x'\n", [["a", "b"], ["a": 1], "x"])
    }

    @Test func readsSequenceEntriesHoldingMappings() {
        Self.expectParses(
            "items:\n  - name: x\n    type: string\n  -   name: y\n      more: 1\n  - k: v\n",
            ["items": [["name": "x", "type": "string"], ["name": "y", "more": 1], ["k": "v"]]]
        )
        Self.expectParses(
            "- name: x\n  description: |\n    text\n  list:\n  - 1\n",
            [["name": "x", "description": "text\n", "list": [1]]]
        )
    }

    @Test func readsSequencesAtTheirKeysIndentation() {
        Self.expectParses(
            "a:\n- 1\n- 2\nb:\n- x: 1\n  y: 2\nc: end\n",
            ["a": [1, 2], "b": [["x": 1, "y": 2]], "c": "end"]
        )
    }

    @Test func readsEmptyValuesAsNull() {
        Self.expectParses(
            "a:\nb: ~\nc: null\nd:\n  # comment\ne: x\n",
            ["a": nil, "b": nil, "c": nil, "d": nil, "e": "x"]
        )
        Self.expectParses("- \n-\n- 1\n", [nil, nil, 1])
        Self.expectParses("a:", ["a": nil])
    }

    // MARK: - Flow collections

    @Test func readsFlowCollections() {
        Self.expectParses(
            #"a: [x, 'y', "z", [1, 2], {k: v, 'q': [true, null]}]"#,
            ["a": ["x", "y", "z", [1, 2], ["k": "v", "q": [true, nil]]]]
        )
        Self.expectParses("b: {a: 1, b: [x], c: {d: e}}\n", ["b": ["a": 1, "b": ["x"], "c": ["d": "e"]]])
        Self.expectParses("c: []\nd: {}\n", ["c": [], "d": .object(JSONObject())])
        Self.expectParses("e: [a, b,]\nf: {x: 1,}\n", ["e": ["a", "b"], "f": ["x": 1]])  // trailing commas
        Self.expectParses(#"g: {"k":"v","n":[1,2]}"#, ["g": ["k": "v", "n": [1, 2]]])  // JSON-like
        Self.expectParses("h: [a b, c:d, http://x/y]\n", ["h": ["a b", "c:d", "http://x/y"]])
        Self.expectParses(
            "i: [[1, [2, [3]]], {b: {c: [d, {e: f}]}}]\n",
            ["i": [[1, [2, [3]]], ["b": ["c": ["d", ["e": "f"]]]]]]
        )
        Self.expectParses("j: {2: x, true: y, ~: z}\n", ["j": ["2": "x", "true": "y", "null": "z"]])
    }

    @Test func readsFlowCollectionsOverSeveralLines() {
        Self.expectParses("a: [x,\n  y, # comment\n  {k: v,\n   w: z}]\n", ["a": ["x", "y", ["k": "v", "w": "z"]]])
        Self.expectParses("b: {\n  p: 1,\n  q: 2\n  }\n", ["b": ["p": 1, "q": 2]])
        Self.expectParses("c: [one\n  two, three]\n", ["c": ["one two", "three"]])
    }

    // MARK: - Scalars

    @Test func readsPlainScalars() {
        Self.expectParses(
            "a: hello world\nb: http://x.y/z?q=1#frag\nc: a#b\nd: key:value\ne: -dash\nf: ?q\ng: :colon\n"
                + "h: x # comment\ni: ${var}\nj: n*x*\n",
            [
                "a": "hello world", "b": "http://x.y/z?q=1#frag", "c": "a#b", "d": "key:value", "e": "-dash", "f": "?q",
                "g": ":colon", "h": "x", "i": "${var}", "j": "n*x*",
            ]
        )
        Self.expectParses("a: x   \nb: 'y'   \nc: [1]  \n", ["a": "x", "b": "y", "c": [1]])
        Self.expectParses("a: café — ×\n'ключ': \"значение\"\n", ["a": "café — ×", "ключ": "значение"])
    }

    @Test func foldsMultiLinePlainScalars() {
        Self.expectParses(
            "a: one\n  two\n\n  three\n\n\n  four\nb:\n  x\n  y\nc: first\n  - not a seq\n  # comment ends it\nd: z\n",
            ["a": "one two\nthree\n\nfour", "b": "x y", "c": "first - not a seq", "d": "z"]
        )
        Self.expectParses("- one\n  two\n- k: v\n    w\n", ["one two", ["k": "v w"]])
    }

    @Test func readsSingleQuotedScalars() {
        Self.expectParses(
            "a: 'it''s'\nb: 'multi\n  line\n\n  para'\nc: '#not comment'\nd: ''\ne: '  spaced  '\nf: 'say \"hi\" \\n'\n",
            [
                "a": "it's", "b": "multi line\npara", "c": "#not comment", "d": "", "e": "  spaced  ",
                "f": #"say "hi" \n"#,
            ]
        )
        Self.expectParses("'c: d': e\n'200': ok\n'true': t\n", ["c: d": "e", "200": "ok", "true": "t"])
    }

    @Test func readsDoubleQuotedScalarsWithEveryEscape() {
        Self.expectParses(
            #"a: "tab\tnew\nq\"b\\s\/""#,
            ["a": "tab\tnew\nq\"b\\s/"]
        )
        Self.expectParses(
            #"b: "\x41\u00e9\U0001F600\0\a\b\v\f\r\e\ \N\_\L\P\"# + "\t\"",  // the last is backslash-tab
            ["b": "Aé😀\u{0}\u{7}\u{8}\u{B}\u{C}\r\u{1B} \u{85}\u{A0}\u{2028}\u{2029}\t"]
        )
        Self.expectParses(#"c: "it's""#, ["c": "it's"])
    }

    @Test func foldsMultiLineQuotedScalars() {
        Self.expectParses("c: \"fold\n  ed\n\n  x\"\n", ["c": "fold ed\nx"])
        Self.expectParses("d: \"esc\\\n  aped  \\\n   join\"\n", ["d": "escaped  join"])  // escaped line ends
        Self.expectParses("e: \"trail   \n  x\"\n", ["e": "trail x"])
    }

    @Test func readsLiteralBlockScalars() {
        Self.expectParses(
            "a: |\n  line1\n    indented\n\n  line3\nb: |-\n  strip\n\n\nc: |+\n  keep\n\n\nd: |\n  clip\n\n\ne: x\n",
            ["a": "line1\n  indented\n\nline3\n", "b": "strip", "c": "keep\n\n\n", "d": "clip\n", "e": "x"]
        )
        Self.expectParses("a: |\n  # not a comment\n  x # y\n", ["a": "# not a comment\nx # y\n"])
        Self.expectParses("a: | # comment\n  text\n# trailing comment\nb: 1\n", ["a": "text\n", "b": 1])
        Self.expectParses("a: |\n\n  x\n  y\n", ["a": "\nx\ny\n"])  // leading empty line
        Self.expectParses("a: |\n  x\n     \n  y\n", ["a": "x\n   \ny\n"])  // a line of spaces beyond the indentation
        Self.expectParses("a: |\n  text", ["a": "text"])  // no line end at the end of the input
        Self.expectParses("a: |\nb: >+\n\nc: |-\nd: 1\n", ["a": "", "b": "\n", "c": "", "d": 1])  // empty
        Self.expectParses("- |\n  a\n  b\n- k: |\n    e\n", ["a\nb\n", ["k": "e\n"]])
    }

    @Test func readsFoldedBlockScalars() {
        Self.expectParses(
            "a: >\n  para one\n  cont\n\n    code\n    code2\n\n  back\n  here\nb: >\n\n  lead blank\n",
            ["a": "para one cont\n\n  code\n  code2\n\nback here\n", "b": "\nlead blank\n"]
        )
        Self.expectParses(
            "a: >-\n  x\n  y\nb: >+\n  k\n\nc: >\n  one\n  two\n\n  three\n",
            ["a": "x y", "b": "k\n\n", "c": "one two\nthree\n"]
        )
        Self.expectParses("a: |+\n  x\n\n  \nb: >+\n  y\n   \n\n", ["a": "x\n\n\n", "b": "y\n \n\n"])
    }

    @Test func skipsComments() {
        Self.expectParses(
            "# top\na: 1 # c\n# mid\n  # indented comment\nb:\n  - x # c\n  # c\n  - y\nc: # c\n  d: 1\n",
            ["a": 1, "b": ["x", "y"], "c": ["d": 1]]
        )
        Self.expectParses("- # comment\n  a: 1\n- x\n", [["a": 1], "x"])
    }

    // MARK: - Resolution

    @Test func resolvesPlainScalarsAsBothYAMLVersionsAgree() {
        Self.expectParses(
            "n1: ~\nn2: null\nn3: Null\nn4: NULL\nb1: true\nb2: False\nb3: TRUE\n",
            ["n1": nil, "n2": nil, "n3": nil, "n4": nil, "b1": true, "b2": false, "b3": true]
        )
        Self.expectParses(
            "i1: 0\ni2: -17\ni3: +5\ni4: 9007199254740991\ni5: -0\n",
            ["i1": .int(0), "i2": .int(-17), "i3": .int(5), "i4": .int(9_007_199_254_740_991), "i5": .int(0)]
        )
        Self.expectParses(
            "f1: 1.5\nf2: -0.25\nf3: 1.\nf4: 1.5e+3\nf5: 2.5E-2\nf6: 0.0\n",
            [
                "f1": .double(1.5), "f2": .double(-0.25), "f3": .double(1), "f4": .double(1500), "f5": .double(0.025),
                "f6": .double(0),
            ]
        )
        // Strings in both versions, though some look like numbers, dates or booleans.
        Self.expectParses(
            "s1: nULL\ns2: tRue\ns3: 3.1.0\ns4: 1-2\ns5: v1\ns6: y\ns7: n\ns8: 0b\ns9: 0x\ns10: 1e\ns11: +\ns12: 12:xx\n"
                + "s13: 2024-1-1\ns14: 2024-01-01 is a day\ns15: .x\n",
            [
                "s1": "nULL", "s2": "tRue", "s3": "3.1.0", "s4": "1-2", "s5": "v1", "s6": "y", "s7": "n", "s8": "0b",
                "s9": "0x",
                "s10": "1e", "s11": "+", "s12": "12:xx", "s13": "2024-1-1", "s14": "2024-01-01 is a day", "s15": ".x",
            ]
        )
    }

    @Test func turnsKeysIntoStrings() {
        Self.expectParses(
            "200: ok\n'201': created\n\"202\": accepted\ntrue: t\nnull: n\n-5: neg\n+7: pos\n",
            ["200": "ok", "201": "created", "202": "accepted", "true": "t", "null": "n", "-5": "neg", "7": "pos"]
        )
    }

    @Test func readsOtherRootNodes() {
        Self.expectParses("", nil)
        Self.expectParses("# nothing\n\n", nil)
        Self.expectParses("- 1\n- 2\n", [1, 2])
        Self.expectParses("hello\n", "hello")
        Self.expectParses("[a, b]\n", ["a", "b"])
        Self.expectParses("\u{FEFF}a: 1\n", ["a": 1])  // byte order mark
    }

    // MARK: - Rejected input

    struct InvalidCase: Sendable, CustomTestStringConvertible {
        let input: [UInt8]
        let fragment: String
        let line: Int
        let column: Int

        init(_ input: String, _ fragment: String, _ line: Int, _ column: Int) {
            self.init(Array(input.utf8), fragment, line, column)
        }

        init(_ input: [UInt8], _ fragment: String, _ line: Int, _ column: Int) {
            self.input = input
            self.fragment = fragment
            self.line = line
            self.column = column
        }

        var testDescription: String { String(decoding: self.input.prefix(40), as: UTF8.self).debugDescription }
    }

    @Test(arguments: [
        // Outside the subset.
        InvalidCase("a: &x 1\n", "anchors", 1, 4),
        InvalidCase("a: 1\nb: *a\n", "aliases", 2, 4),
        InvalidCase("a: !!str 1\n", "tags", 1, 4),
        InvalidCase("- !local x\n", "tags", 1, 3),
        InvalidCase("---\na: 1\n", "document markers", 1, 1),
        InvalidCase("a: 1\n---\nb: 2\n", "document markers", 2, 1),
        InvalidCase("a: 1\n...\n", "document markers", 2, 1),
        InvalidCase("%YAML 1.2\n", "directives", 1, 1),
        InvalidCase("? a\n: 1\n", "explicit keys", 1, 1),
        InvalidCase("[a]: 1\n", "flow collection cannot be a mapping key", 1, 4),
        InvalidCase("a: {[b]: 1}\n", "flow collection cannot be a mapping key", 1, 5),
        InvalidCase("a: [b: c]\n", "single-pair mappings", 1, 6),
        InvalidCase("a: {b: }\n", "expected a value", 1, 8),
        InvalidCase("a: {b}\n", "expected ':'", 1, 6),
        InvalidCase("a: |2\n  x\n", "explicit indentation indicators", 1, 5),
        InvalidCase("a: @x\n", "reserved", 1, 4),
        InvalidCase("a: `x`\n", "reserved", 1, 4),
        InvalidCase(
            "a: " + String(repeating: "[", count: 65) + String(repeating: "]", count: 65) + "\n",
            "nested deeper than 64",
            1,
            67
        ),
        // Tabs.
        InvalidCase("a:\n\tb: 1\n", "tab character", 2, 1),
        InvalidCase("a:\t1\n", "tab character", 1, 3),
        InvalidCase("a: x\ty\n", "tab character", 1, 5),
        InvalidCase("a: |\n\tx\n", "tab character", 2, 1),
        // Duplicate keys, also once made strings.
        InvalidCase("a: 1\nb: 2\na: 3\n", "duplicate key \"a\"", 3, 1),
        InvalidCase("a: {x: 1, x: 2}\n", "duplicate key \"x\"", 1, 11),
        InvalidCase("200: a\n'200': b\n", "duplicate key \"200\"", 2, 1),
        // Plain scalars that YAML 1.1 and 1.2 read differently, or JSON cannot hold.
        InvalidCase("a: yes\n", "'yes' is a boolean in YAML 1.1", 1, 4),
        InvalidCase("on: push\n", "'on' is a boolean in YAML 1.1", 1, 1),
        InvalidCase("a: [Off]\n", "'Off' is a boolean in YAML 1.1", 1, 5),
        InvalidCase("a: 010\n", "'010' is a number", 1, 4),
        InvalidCase("a: 09\n", "'09' is a number", 1, 4),
        InvalidCase("a: 0x1F\n", "'0x1F' is a number", 1, 4),
        InvalidCase("a: 0o17\n", "'0o17' is a number", 1, 4),
        InvalidCase("a: 0b101\n", "'0b101' is a number", 1, 4),
        InvalidCase("a: 1e3\n", "'1e3' is a number", 1, 4),
        InvalidCase("a: 1.5e3\n", "'1.5e3' is a number", 1, 4),
        InvalidCase("a: 1_000\n", "'1_000' is a number", 1, 4),
        InvalidCase("a: 1:30\n", "'1:30' is a number", 1, 4),
        InvalidCase("a: .5\n", "'.5' is a number", 1, 4),
        InvalidCase("a: -.inf\n", "'-.inf' is a number", 1, 4),
        InvalidCase("a: .NaN\n", "'.NaN' is a number", 1, 4),
        InvalidCase("a: 2024-01-01\n", "is a timestamp", 1, 4),
        InvalidCase("a: 2001-12-14t21:59:43.10-05:00\n", "is a timestamp", 1, 4),
        InvalidCase("a: <<\n", "special meaning", 1, 4),
        InvalidCase("a: 99999999999999999999\n", "out of range", 1, 4),
        InvalidCase("a: 1.0e+999\n", "out of range", 1, 4),
        InvalidCase("1.5: x\n", "cannot be a mapping key", 1, 1),
        // Structure.
        InvalidCase("a: b: c\n", "mapping values are not allowed here", 1, 5),
        InvalidCase("a: 1\n b: 2\n", "mapping values are not allowed here", 2, 3),
        InvalidCase("'a\n  b': c\n", "mapping values are not allowed here", 2, 5),
        InvalidCase("a: - b\n", "block sequence cannot start", 1, 4),
        InvalidCase("a:\n    b: 1\n  c: 2\n", "unexpected indentation", 3, 3),
        InvalidCase("a: 1\n- b\n", "found a sequence entry", 2, 1),
        InvalidCase("a: x\n  b\nc\n", "expected a mapping key", 3, 1),
        InvalidCase("- a\nb: 1\n", "unexpected content after", 2, 1),
        InvalidCase("a: [x]]\n", "unexpected ']'", 1, 7),
        InvalidCase("a: [- b]\n", "block sequences are not allowed inside flow", 1, 5),
        InvalidCase("a: [|]\n", "block scalars are not allowed inside flow", 1, 5),
        InvalidCase("a: [1,\n2]\n", "indented more than its parent", 2, 1),
        InvalidCase("a: [\n  1\n]\n", "indented more than its parent", 3, 1),
        InvalidCase("a: 'x\ny'\n", "indented more than its parent", 2, 1),
        InvalidCase("a: |x\n", "expected a line end after the block scalar indicator", 1, 5),
        InvalidCase("a: |\n     \n  x\n", "leading empty line", 3, 3),
        InvalidCase("a: 'x'#c\n", "space before '#'", 1, 7),
        InvalidCase("a: [x,#c\n  y]\n", "space before '#'", 1, 7),
        // Unterminated.
        InvalidCase("a: 'abc\n", "unterminated quoted scalar", 1, 4),
        InvalidCase("a: \"abc", "unterminated quoted scalar", 1, 4),
        InvalidCase("a: [1, 2\n", "unterminated flow sequence", 1, 4),
        InvalidCase("a: {b: 1\n", "unterminated flow mapping", 1, 4),
        // Escapes.
        InvalidCase(#"a: "\q""#, "unknown escape", 1, 5),
        InvalidCase(#"a: "\ud83d\ude00""#, "no Unicode scalar value", 1, 5),
        InvalidCase(#"a: "\x4""#, "hexadecimal digits", 1, 5),
        // Characters.
        InvalidCase("a: 1\r\n", "carriage return", 1, 5),
        InvalidCase("a: \u{1}\n", "control character U+0001", 1, 4),
        InvalidCase("a: x\u{85}y\n", "U+0085", 1, 5),
        InvalidCase("a: x\u{2028}\n", "U+2028", 1, 5),
        InvalidCase([0x61, 0x3A, 0x20, 0xC3, 0x28, 0x0A], "invalid UTF-8", 1, 4),
        InvalidCase([0x61, 0x3A, 0x20, 0xED, 0xA0, 0x80, 0x0A], "invalid UTF-8", 1, 4),  // an encoded surrogate
    ])
    func rejectsInputOutsideTheSubset(_ invalid: InvalidCase) {
        do {
            let value = try YAMLDocument.parse(invalid.input)
            Issue.record("accepted, giving \(value.jsonString)")
        } catch {
            #expect(error.message.contains(invalid.fragment), "\(error)")
            #expect(error.line == invalid.line, "\(error)")
            #expect(error.column == invalid.column, "\(error)")
        }
    }

    @Test func describesErrorsWithLineAndColumn() {
        do {
            _ = try Self.parse("a:\n  b: 1\n  b: 2\n")
            Issue.record("expected an error")
        } catch {
            #expect(error.description == "line 3, column 3: duplicate key \"b\"")
            #expect(error.offset == 12)
        }
    }
}
