import Testing

@testable import TaskGraph

/// A fixed scope: an input with every kind of value, a named job, and a handful of completed tasks.
private struct FixtureScope: TemplateScope {
    var input: JSONValue = [
        "a": ["b": "deep"],
        "items": [10, 20],
        "odd key": "odd",
        "quote\"key": "quote",
        "back\\slash": "backslash",
        "it's": "apostrophe",
        "dotted.key": "dotted",
        "ключ": "unicode",
        "name": "Ada",
        "n": 42,
        "pi": 3.5,
        "flag": true,
        "nothing": nil,
        "obj": ["x": 1, "y": [true, nil]],
    ]

    var job: JSONValue = [
        "id": "job-1",
        "name": "import",
        "input": ["post": 123, "tags": ["a", "b"]],
    ]

    var tasks: [String: JSONValue] = [
        "fetch": ["state": "succeeded", "result": ["status": 200, "body": ["items": ["only"]]]],
        "boom": [
            "state": "failed", "error": ["code": "http.status", "message": "bad gateway", "details": ["status": 502]],
        ],
        "my.id": ["state": "succeeded", "result": "dotted id"],
        "delete[3]": ["state": "succeeded", "result": "map instance"],
        "dyn/step": ["state": "succeeded", "result": "spawned"],
        "step-1": ["state": "succeeded", "result": 1],
        "stopped": ["state": "cancelled"],
        "unneeded": ["state": "skipped"],
    ]

    func task(_ id: String) -> JSONValue? { self.tasks[id] }
}

/// The error `body` throws, or `nil` when it succeeds.
private func templateError(_ body: () throws(TemplateError) -> Void) -> TemplateError? {
    do {
        try body()
        return nil
    } catch {
        return error
    }
}

struct TemplateTests {
    private let scope = FixtureScope()

    // MARK: - Resolving expressions

    /// (template, the compact JSON of the value it renders to)
    static let exactValueCases: [(String, String)] = [
        ("${input.a.b}", #""deep""#),
        ("${input.a}", #"{"b":"deep"}"#),
        ("${input.items[0]}", "10"),
        ("${input.items[1]}", "20"),
        (#"${input["odd key"]}"#, #""odd""#),
        ("${input['odd key']}", #""odd""#),
        (#"${input["quote\"key"]}"#, #""quote""#),
        (#"${input["back\\slash"]}"#, #""backslash""#),
        (#"${input['it\'s']}"#, #""apostrophe""#),
        (#"${input["dotted.key"]}"#, #""dotted""#),
        (#"${input["ключ"]}"#, #""unicode""#),
        (#"${input["a"]["b"]}"#, #""deep""#),
        ("${input.obj.y[1]}", "null"),
        ("${input.obj.y[0]}", "true"),
        ("${ input.a.b }", #""deep""#),
        ("${\n\tinput.n\t}", "42"),
        ("${job.id}", #""job-1""#),
        ("${job.name}", #""import""#),
        ("${job.input}", #"{"post":123,"tags":["a","b"]}"#),
        ("${job.input.post}", "123"),
        ("${job.input.tags[1]}", #""b""#),
        (#"${job["id"]}"#, #""job-1""#),
        ("${job}", #"{"id":"job-1","name":"import","input":{"post":123,"tags":["a","b"]}}"#),
        ("${tasks.fetch.result}", #"{"status":200,"body":{"items":["only"]}}"#),
        ("${tasks.fetch.result.status}", "200"),
        ("${tasks.fetch.result.body.items[0]}", #""only""#),
        (#"${tasks.fetch["result"].status}"#, "200"),
        ("${tasks.fetch.state}", #""succeeded""#),
        ("${tasks.fetch}", #"{"state":"succeeded","result":{"status":200,"body":{"items":["only"]}}}"#),
        ("${tasks.boom.error.code}", #""http.status""#),
        ("${tasks.boom.error.details.status}", "502"),
        ("${tasks.boom.state}", #""failed""#),
        ("${tasks.stopped.state}", #""cancelled""#),
        ("${tasks.unneeded.state}", #""skipped""#),
        (#"${tasks["my.id"].result}"#, #""dotted id""#),
        ("${tasks['my.id'].result}", #""dotted id""#),
        (#"${tasks["delete[3]"].result}"#, #""map instance""#),
        ("${tasks.delete[3].result}", #""map instance""#),
        (#"${tasks["dyn/step"].result}"#, #""spawned""#),
        ("${tasks.dyn/step.result}", #""spawned""#),
        ("${tasks.step-1.result}", "1"),
    ]

    @Test(arguments: exactValueCases)
    func aTemplateThatIsOneExpressionRendersToTheValueItDenotes(template: String, expectedJSON: String) throws {
        let rendered = try Template(parsing: template).render(in: self.scope)
        #expect(rendered.jsonString == expectedJSON)
    }

    @Test
    func theWholeInputIsAvailableAsInput() throws {
        let rendered = try Template(parsing: "${input}").render(in: self.scope)
        #expect(rendered == self.scope.input)
    }

    @Test
    func exactReplacementKeepsTheJSONType() throws {
        func render(_ source: String) throws -> JSONValue { try Template(parsing: source).render(in: self.scope) }
        guard case .int(42) = try render("${input.n}") else {
            Issue.record("expected .int(42)")
            return
        }
        guard case .double(3.5) = try render("${input.pi}") else {
            Issue.record("expected .double(3.5)")
            return
        }
        guard case .bool(true) = try render("${input.flag}") else {
            Issue.record("expected .bool(true)")
            return
        }
        guard case .null = try render("${input.nothing}") else {
            Issue.record("expected .null")
            return
        }
        guard case .object(let object) = try render("${input.obj}") else {
            Issue.record("expected an object")
            return
        }
        #expect(object.keys == ["x", "y"])
        guard case .array(let items) = try render("${input.items}") else {
            Issue.record("expected an array")
            return
        }
        #expect(items == [10, 20])
        guard case .string("Ada") = try render("${input.name}") else {
            Issue.record("expected a string")
            return
        }
    }

    // MARK: - Interpolation and escapes

    /// (template, the string it renders to)
    static let interpolationCases: [(String, String)] = [
        ("Hello ${input.name}!", "Hello Ada!"),
        ("n=${input.n}", "n=42"),
        ("pi=${input.pi}", "pi=3.5"),
        ("flag=${input.flag}", "flag=true"),
        ("nothing=${input.nothing}", "nothing=null"),
        ("obj=${input.obj}", #"obj={"x":1,"y":[true,null]}"#),
        ("items=${input.items}", "items=[10,20]"),
        ("a=${input.a}", #"a={"b":"deep"}"#),
        ("${input.name}${input.n}", "Ada42"),
        (
            "${input.name} imports post ${job.input.post} (status ${tasks.fetch.result.status})",
            "Ada imports post 123 (status 200)"
        ),
        (" ${input.n}", " 42"),
        ("${input.n} ", "42 "),
        ("${input.n}}", "42}"),
        ("héllo ${input.name} ✓", "héllo Ada ✓"),
        ("$${input.n}", "${input.n}"),
        ("$${", "${"),
        ("price $${x} is ${input.n}", "price ${x} is 42"),
        ("${input.n} costs $${input.n}", "42 costs ${input.n}"),
        ("$$${input.n}", "$${input.n}"),
        ("cost: $5", "cost: $5"),
        ("$", "$"),
        ("$$", "$$"),
        ("a $ b ${input.n} $", "a $ b 42 $"),
        ("}{ $} {$ {", "}{ $} {$ {"),
        ("plain text", "plain text"),
        ("", ""),
    ]

    @Test(arguments: interpolationCases)
    func textAroundExpressionsIsInterpolatedWithNonStringsAsCompactJSON(template: String, expected: String) throws {
        let rendered = try Template(parsing: template).render(in: self.scope)
        #expect(rendered == .string(expected))
    }

    @Test
    func aTemplateWithoutExpressionsIsLiteralAndRendersItsText() throws {
        let plain = try Template(parsing: "no templates here, $5")
        #expect(plain.isLiteral)
        #expect(plain.expressions.isEmpty)
        #expect(try plain.render(in: self.scope) == "no templates here, $5")

        let escaped = try Template(parsing: "$${input}")
        #expect(escaped.isLiteral)
        #expect(try escaped.render(in: self.scope) == "${input}")

        let single = try Template(parsing: "${input}")
        #expect(!single.isLiteral)
        #expect(single.isSingleExpression)
        #expect(!(try Template(parsing: "x${input}")).isSingleExpression)
    }

    @Test
    func parsedExpressionsExposeRootPathSourceAndReferencedTask() throws {
        let template = try Template(parsing: #"a ${ input.items[0] } b ${tasks["my.id"].result['odd key']} ${job.id}"#)
        #expect(
            template.expressions == [
                TemplateExpression(root: .input, path: [.key("items"), .index(0)], source: "input.items[0]"),
                TemplateExpression(
                    root: .tasks(id: "my.id"),
                    path: [.key("result"), .key("odd key")],
                    source: #"tasks["my.id"].result['odd key']"#
                ),
                TemplateExpression(root: .job, path: [.key("id")], source: "job.id"),
            ]
        )
        #expect(template.expressions.map(\.referencedTaskID) == [nil, "my.id", nil])
        #expect(
            template.expressions.map(\.description) == [
                "${input.items[0]}", #"${tasks["my.id"].result['odd key']}"#, "${job.id}",
            ]
        )
        #expect(try Template(parsing: "${tasks.delete[3].state}").expressions.first?.referencedTaskID == "delete[3]")
        #expect(try Template(parsing: "${tasks.dyn/step}").expressions.first?.referencedTaskID == "dyn/step")
    }

    @Test
    func equalSourcesParseToEqualTemplates() throws {
        #expect(try Template(parsing: "x ${input.a}") == Template(parsing: "x ${input.a}"))
        #expect(try Template(parsing: "x ${input.a}") != Template(parsing: "x ${input.b}"))
    }

    @Test
    func substitutedValuesAreNotRenderedAgain() throws {
        var scope = FixtureScope()
        scope.input = ["name": "${job.id}", "nested": ["x": "${job.name}"]]
        #expect(try Template(parsing: "${input.name}").render(in: scope) == "${job.id}")
        #expect(try Template(parsing: "hi ${input.name}").render(in: scope) == "hi ${job.id}")
        #expect(
            try (["v": "${input.nested}"] as JSONValue).renderingTemplates(in: scope).jsonString
                == #"{"v":{"x":"${job.name}"}}"#
        )
    }

    // MARK: - Unresolved expressions

    /// (template, the `template.unresolved` message)
    static let unresolvedCases: [(String, String)] = [
        ("${input.missing}", #"cannot resolve ${input.missing}: key "missing" not found in input"#),
        ("${input.a.c}", #"cannot resolve ${input.a.c}: key "c" not found in input.a"#),
        (#"${input["no such key"]}"#, #"cannot resolve ${input["no such key"]}: key "no such key" not found in input"#),
        ("${input.items[3]}", "cannot resolve ${input.items[3]}: index 3 out of range (array has 2 items)"),
        (
            "${tasks.fetch.result.body.items[1]}",
            "cannot resolve ${tasks.fetch.result.body.items[1]}: index 1 out of range (array has 1 item)"
        ),
        ("${input.name[0]}", "cannot resolve ${input.name[0]}: cannot read index 0 of input.name, which is a string"),
        ("${input.a[0]}", "cannot resolve ${input.a[0]}: cannot read index 0 of input.a, which is an object"),
        ("${input.n.x}", #"cannot resolve ${input.n.x}: cannot read key "x" of input.n, which is a number"#),
        ("${input.flag.x}", #"cannot resolve ${input.flag.x}: cannot read key "x" of input.flag, which is a boolean"#),
        (
            "${input.nothing.x}",
            #"cannot resolve ${input.nothing.x}: cannot read key "x" of input.nothing, which is null"#
        ),
        (
            "${input.items.0}",
            #"cannot resolve ${input.items.0}: cannot read key "0" of input.items, which is an array (use [0] to index an array)"#
        ),
        (
            #"${input["odd key"].x}"#,
            #"cannot resolve ${input["odd key"].x}: cannot read key "x" of input["odd key"], which is a string"#
        ),
        ("${job.input.missing}", #"cannot resolve ${job.input.missing}: key "missing" not found in job.input"#),
        (
            "${tasks.unknown.result}",
            #"cannot resolve ${tasks.unknown.result}: task "unknown" is unknown or has not completed yet"#
        ),
        (
            #"${tasks["not.done"]}"#,
            #"cannot resolve ${tasks["not.done"]}: task "not.done" is unknown or has not completed yet"#
        ),
        (
            "${tasks.boom.result}",
            #"cannot resolve ${tasks.boom.result}: task "boom" has no result (its state is failed)"#
        ),
        (
            "${tasks.fetch.error.code}",
            #"cannot resolve ${tasks.fetch.error.code}: task "fetch" has no error (its state is succeeded)"#
        ),
        (
            "${tasks.stopped.result}",
            #"cannot resolve ${tasks.stopped.result}: task "stopped" has no result (its state is cancelled)"#
        ),
        (
            #"${tasks["my.id"].result.x}"#,
            #"cannot resolve ${tasks["my.id"].result.x}: cannot read key "x" of tasks["my.id"].result, which is a string"#
        ),
        (
            "${tasks.delete[3].result[0]}",
            "cannot resolve ${tasks.delete[3].result[0]}: cannot read index 0 of tasks.delete[3].result, which is a string"
        ),
        ("${ input.missing }", #"cannot resolve ${input.missing}: key "missing" not found in input"#),
        (
            "before ${input.name} ${input.missing} ${input.other} after",
            #"cannot resolve ${input.missing}: key "missing" not found in input"#
        ),
    ]

    @Test(arguments: unresolvedCases)
    func anUnresolvableExpressionFailsWithAMessageNamingIt(template: String, message: String) throws {
        let parsed = try Template(parsing: template)
        let error = templateError { () throws(TemplateError) in _ = try parsed.render(in: self.scope) }
        #expect(error == TemplateError(code: "template.unresolved", message: message))
    }

    // MARK: - Syntax errors

    /// (template, the `template.syntax` message)
    static let syntaxErrorCases: [(String, String)] = [
        ("${", "unterminated template expression ${: missing closing '}'"),
        ("abc ${input.a", "unterminated template expression ${input.a: missing closing '}'"),
        ("${input", "unterminated template expression ${input: missing closing '}'"),
        ("${input[0", "unterminated template expression ${input[0: missing closing '}'"),
        ("${input.", "unterminated template expression ${input.: missing closing '}'"),
        ("${input[", "unterminated template expression ${input[: missing closing '}'"),
        ("${tasks.", "unterminated template expression ${tasks.: missing closing '}'"),
        ("${ ", "unterminated template expression ${ : missing closing '}'"),
        ("ok ${input} then ${", "unterminated template expression ${: missing closing '}'"),
        (#"${input["x}"#, #"unterminated template expression ${input["x}: missing closing '"' of a quoted key"#),
        ("${input['x}", #"unterminated template expression ${input['x}: missing closing "'" of a quoted key"#),
        ("${}", "invalid template expression ${}: the expression is empty"),
        ("${   }", "invalid template expression ${   }: the expression is empty"),
        ("${input.}", "invalid template expression ${input.}: expected a name after '.', found '}'"),
        ("${input..a}", "invalid template expression ${input..a}: expected a name after '.', found '.'"),
        ("${input[}", "invalid template expression ${input[}: expected an index or a quoted key after '[', found '}'"),
        (
            "${input[x]}",
            "invalid template expression ${input[x]}: expected an index or a quoted key after '[', found 'x'"
        ),
        ("${input[0}", "invalid template expression ${input[0}: expected ']', found '}'"),
        (#"${input["a"b]}"#, #"invalid template expression ${input["a"b]}: expected ']', found 'b'"#),
        ("${input[-1]}", "invalid template expression ${input[-1]}: an array index must be a non-negative integer"),
        (
            "${input[99999999999999999999]}",
            "invalid template expression ${input[99999999999999999999]}: the array index is too large"
        ),
        (
            #"${input["a\nb"]}"#,
            #"invalid template expression ${input["a\nb"]}: unsupported escape '\n' in a quoted key (use \", \' or \\)"#
        ),
        ("${foo}", #"invalid template expression ${foo}: unknown root "foo" (expected input, job or tasks)"#),
        (
            "${inputs.a}",
            #"invalid template expression ${inputs.a}: unknown root "inputs" (expected input, job or tasks)"#
        ),
        ("${.a}", "invalid template expression ${.a}: expected input, job or tasks, found '.'"),
        ("${input.a b}", "invalid template expression ${input.a b}: unexpected 'b' (expected '.', '[' or '}')"),
        ("${input.a + 1}", "invalid template expression ${input.a + 1}: unexpected '+' (expected '.', '[' or '}')"),
        (
            "${tasks}",
            #"invalid template expression ${tasks}: expected a task id after 'tasks' (tasks.<id> or tasks["<id>"]), found '}'"#
        ),
        ("${tasks.}", "invalid template expression ${tasks.}: expected a task id after 'tasks.', found '}'"),
        ("${tasks[0]}", "invalid template expression ${tasks[0]}: expected a quoted task id after 'tasks[', found '0'"),
        (#"${tasks[""].result}"#, #"invalid template expression ${tasks[""].result}: the task id is empty"#),
        (
            "${tasks.fetch.output}",
            #"invalid template expression ${tasks.fetch.output}: unknown task field "output" (expected result, error or state)"#
        ),
        (
            "${job.owner}",
            #"invalid template expression ${job.owner}: unknown job field "owner" (expected input, id or name)"#
        ),
        (
            "fine ${input.a} then ${input.}",
            "invalid template expression ${input.}: expected a name after '.', found '}'"
        ),
    ]

    @Test(arguments: syntaxErrorCases)
    func aMalformedTemplateIsASyntaxError(template: String, message: String) {
        let error = templateError { () throws(TemplateError) in _ = try Template(parsing: template) }
        #expect(error == TemplateError(code: "template.syntax", message: message))
    }

    @Test
    func aLongMalformedExpressionIsShortenedInTheMessage() {
        let source = "${input." + String(repeating: "a", count: 200) + " oops}"
        let error = templateError { () throws(TemplateError) in _ = try Template(parsing: source) }
        let expected =
            "invalid template expression ${input." + String(repeating: "a", count: 72)
            + "…: unexpected 'o' (expected '.', '[' or '}')"
        #expect(error == TemplateError(code: "template.syntax", message: expected))
    }

    // MARK: - Rendering JSON values

    @Test
    func renderingAValueRendersEveryStringThroughArraysAndObjectValuesButNotKeys() throws {
        let params: JSONValue = [
            "url": "https://example.com/posts/${job.input.post}",
            "${input.name}": "${input.name}",
            "body": ["items": "${input.items}", "list": ["${input.n}", "x-${input.n}", 7, nil, true, "$${raw}"]],
            "count": 3,
        ]
        let rendered = try params.renderingTemplates(in: self.scope)
        #expect(
            rendered.jsonString
                == #"{"url":"https://example.com/posts/123","${input.name}":"Ada","body":{"items":[10,20],"list":[42,"x-42",7,null,true,"${raw}"]},"count":3}"#
        )
    }

    @Test
    func renderingAValueWithoutTemplatesReturnsItUnchanged() throws {
        let value: JSONValue = ["a": ["b", 1, nil, ["c": "$5 {not} a $ template"]], "${k}": "v"]
        #expect(!value.containsTemplates)
        #expect(try value.renderingTemplates(in: self.scope).jsonString == value.jsonString)
    }

    @Test
    func renderingAValueReportsTheFirstUnresolvedExpressionInDocumentOrder() {
        let value: JSONValue = ["first": "ok ${input.n}", "second": ["${input.missing}"], "third": "${input.other}"]
        let error = templateError { () throws(TemplateError) in _ = try value.renderingTemplates(in: self.scope) }
        #expect(error == .unresolved(#"cannot resolve ${input.missing}: key "missing" not found in input"#))
    }

    @Test
    func renderingAValueWithAMalformedTemplateFailsWithASyntaxError() {
        let value: JSONValue = ["x": ["${input."]]
        let error = templateError { () throws(TemplateError) in _ = try value.renderingTemplates(in: self.scope) }
        #expect(error == .syntax("unterminated template expression ${input.: missing closing '}'"))
    }

    @Test(arguments: [
        ("plain", false), ("$", false), ("$5 {x}", false), ("$ {input}", false), ("{input}", false),
        ("${input}", true), ("x ${", true), ("$${escaped}", true), ("ends with ${", true), ("😀 ${input}", true),
    ])
    func containsTemplatesDetectsAnOpeningDollarBrace(text: String, expected: Bool) {
        #expect(JSONValue.string(text).containsTemplates == expected)
        #expect(JSONValue.array([1, ["k": .string(text)]]).containsTemplates == expected)
        #expect(JSONValue.object(JSONObject([(key: text, value: "plain")])).containsTemplates == false)
    }

    @Test
    func containsTemplatesFindsAnOpenerAfterTheFirstEightByteWords() {
        // The scan skips 8-byte words without `$`; openers straddling or following word boundaries still count.
        for offset in 0..<24 {
            let prefix = String(repeating: "x", count: offset)
            #expect(JSONValue.string(prefix + "${input}").containsTemplates, "offset \(offset)")
            #expect(!JSONValue.string(prefix + "$x{input}").containsTemplates, "offset \(offset)")
        }
    }

    // MARK: - Syntax problems for validation

    @Test
    func syntaxProblemsAreReportedWithEscapedJSONPointers() {
        let value: JSONValue = [
            "params": ["url": "${input.}", "a/b": ["fine", "${foo}"], "m~n": "x ${"],
            "ok": "${input} and $${this}",
            "list": ["$${fine}", "${}", ["deep": "${tasks}"]],
        ]
        let problems = value.templateSyntaxProblems()
        #expect(
            problems.map(\.pointer) == ["/params/url", "/params/a~1b/1", "/params/m~0n", "/list/1", "/list/2/deep"]
        )
        #expect(
            problems.map(\.message) == [
                "invalid template expression ${input.}: expected a name after '.', found '}'",
                #"invalid template expression ${foo}: unknown root "foo" (expected input, job or tasks)"#,
                "unterminated template expression ${: missing closing '}'",
                "invalid template expression ${}: the expression is empty",
                #"invalid template expression ${tasks}: expected a task id after 'tasks' (tasks.<id> or tasks["<id>"]), found '}'"#,
            ]
        )
    }

    @Test
    func aMalformedStringAtTheRootHasTheEmptyPointer() {
        let problems = JSONValue.string("${input[").templateSyntaxProblems()
        #expect(problems.map(\.pointer) == [""])
        #expect(problems.map(\.message) == ["unterminated template expression ${input[: missing closing '}'"])
    }

    @Test
    func aWellFormedValueHasNoSyntaxProblems() {
        let value: JSONValue = ["a": ["${input.a}", "${tasks[\"x.y\"].result}", "$${", "$"], "b": 1]
        #expect(value.templateSyntaxProblems().isEmpty)
    }

    @Test
    func templateExpressionsListsEveryExpressionWithItsPointer() {
        let value: JSONValue = [
            "a~/b": "${tasks.fetch.result} and ${input.x}",
            "list": [1, "${tasks[\"my.id\"].state}", "${broken"],
        ]
        let found = value.templateExpressions()
        #expect(found.map(\.pointer) == ["/a~0~1b", "/a~0~1b", "/list/1"])
        #expect(
            found.map(\.expression.description) == [
                "${tasks.fetch.result}", "${input.x}", #"${tasks["my.id"].state}"#,
            ]
        )
        #expect(found.compactMap(\.expression.referencedTaskID) == ["fetch", "my.id"])
    }

    // MARK: - Pre-parsed JSON templates

    @Test
    func aCompiledJSONTemplateRendersLikeRenderingTheValue() throws {
        let value: JSONValue = [
            "url": "https://example.com/${input.name}",
            "whole": "${input.obj}",
            "plain": ["x", 1, ["y": "$${z}"]],
            "list": ["${tasks.fetch.result.status}", "${job.id}"],
        ]
        let compiled = try JSONTemplate(value)
        #expect(!compiled.isConstant)
        #expect(
            compiled.expressions.map(\.description) == [
                "${input.name}", "${input.obj}", "${tasks.fetch.result.status}", "${job.id}",
            ]
        )
        let rendered = try compiled.render(in: self.scope)
        #expect(rendered.jsonString == (try value.renderingTemplates(in: self.scope)).jsonString)
        #expect(
            rendered.jsonString
                == #"{"url":"https://example.com/Ada","whole":{"x":1,"y":[true,null]},"plain":["x",1,{"y":"${z}"}],"list":[200,"job-1"]}"#
        )
    }

    @Test
    func aCompiledJSONTemplateWithoutExpressionsIsConstantWithEscapesAlreadyApplied() throws {
        let value: JSONValue = ["a": [1, "two", "$${three}"]]
        let compiled = try JSONTemplate(value)
        #expect(compiled.isConstant)
        #expect(compiled.expressions.isEmpty)
        #expect(try compiled.render(in: self.scope).jsonString == #"{"a":[1,"two","${three}"]}"#)
        #expect(try JSONTemplate(["a": [1, "two"]]).isConstant)
    }

    @Test
    func compilingAMalformedValueThrowsTheFirstSyntaxError() {
        let error = templateError { () throws(TemplateError) in
            _ = try JSONTemplate(["ok": "${input}", "bad": ["${nope}"]])
        }
        #expect(
            error
                == .syntax(#"invalid template expression ${nope}: unknown root "nope" (expected input, job or tasks)"#)
        )
    }

    @Test
    func aCompiledJSONTemplateReportsUnresolvedExpressions() throws {
        let compiled = try JSONTemplate(["x": "${tasks.later.result}"])
        let error = templateError { () throws(TemplateError) in _ = try compiled.render(in: self.scope) }
        #expect(
            error
                == .unresolved(
                    #"cannot resolve ${tasks.later.result}: task "later" is unknown or has not completed yet"#
                )
        )
    }

    @Test
    func errorsDescribeThemselvesAsCodeAndMessage() {
        #expect(TemplateError.unresolved("m").description == "template.unresolved: m")
        #expect(TemplateError.syntax("m").code == TemplateError.syntaxCode)
    }
}
