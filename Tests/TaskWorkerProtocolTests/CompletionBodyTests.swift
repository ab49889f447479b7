import TaskCore
import TaskGraph
import Testing

@testable import TaskWorkerProtocol

/// The one completion-body parser, in both forms: what each route has always answered.
struct CompletionBodyTests {
    static func problems(_ text: String, _ form: CompletionBody.Form) throws -> [String] {
        let body = try JSONParser.parse(text)
        var reader = BodyReader(body, allowed: form.fields, wording: form.wording)
        _ = CompletionBody(reading: &reader, form: form)
        return reader.problems.map { "\($0.pointer) \($0.message)" }
    }

    @Test func aResultAndAnErrorAreRead() throws {
        let result = try CompletionBody.read(JSONParser.parse(#"{"result": {"b": 1, "a": 2}}"#), form: .lease).get()
        #expect(result == CompletionBody(result: ["b": 1, "a": 2]))
        #expect(result.isRetryable)
        let error = try CompletionBody.read(
            JSONParser.parse(#"{"error": {"code": "x.y", "message": "m", "details": [1]}, "retryable": false}"#),
            form: .lease
        ).get()
        #expect(error == CompletionBody(error: TaskError(code: "x.y", message: "m", details: [1]), isRetryable: false))
        #expect(error.outcome.error as? TaskError == TaskError(code: "x.y", message: "m", details: [1]))
        let awaited = try CompletionBody.read(JSONParser.parse(#"{"result": null}"#), form: .awaitTask).get()
        #expect(awaited.outcome.value == .null)
    }

    @Test func membersAreWrittenInTheOrderAWorkerSendsThem() {
        var object = JSONObject([("leaseId", "l")])
        for member in CompletionBody(error: TaskError(code: "c", message: "m"), isRetryable: true).members {
            object[member.key] = member.value
        }
        #expect(
            JSONValue.object(object).jsonString
                == #"{"leaseId":"l","error":{"code":"c","message":"m"},"retryable":true}"#
        )
        #expect(JSONValue.object(JSONObject(CompletionBody(result: 1).members)).jsonString == #"{"result":1}"#)
    }

    /// (body, await form's problems, lease form's problems).
    static let cases: [(String, [String], [String])] = [
        ("{}", [#" give exactly one of "result" and "error""#], [#" give exactly one of "result" and "error""#]),
        (
            #"{"result": 1, "error": {"code": ""}}"#,
            [
                #" give exactly one of "result" and "error""#, "/error/code must be a non-empty string",
                "/error/message must be a string",
            ],
            [#" give exactly one of "result" and "error""#]
        ),
        (
            #"{"result": 1, "retryable": false}"#,
            [#"/retryable unknown field "retryable""#],
            [#"/retryable only goes with "error""#]
        ),
        (
            #"{"error": "no"}"#,
            ["/error must be an object"],
            [
                "/error must be an object", "/error/code must be a string of 1 to 200 characters",
                "/error/message must be a string",
            ]
        ),
        (
            #"{"error": {"code": "", "message": 5, "why": 1}}"#,
            [
                #"/error/why unknown field "why""#, "/error/code must be a non-empty string",
                "/error/message must be a string",
            ],
            [
                #"/error/why unknown field "why"; expected one of: code, details, message"#,
                "/error/code must be a string of 1 to 200 characters", "/error/message must be a string",
            ]
        ),
        (
            #"{"error": {"code": "c", "message": "m"}, "retryable": "no"}"#,
            [#"/retryable unknown field "retryable""#],
            ["/retryable must be a boolean"]
        ),
    ]

    @Test(arguments: 0..<CompletionBodyTests.cases.count)
    func eachFormReportsWhatItsRouteAnswers(_ index: Int) throws {
        let (body, awaitProblems, leaseProblems) = Self.cases[index]
        #expect(try Self.problems(body, .awaitTask) == awaitProblems)
        #expect(try Self.problems(body, .lease) == leaseProblems)
    }

    @Test func aWholeBodyThatIsNotAnObjectHasOneProblem() throws {
        guard case .failure(let error) = CompletionBody.read(try JSONParser.parse("[1]"), form: .awaitTask) else {
            Issue.record("[1] was accepted")
            return
        }
        #expect(error.problems == [ValidationProblem(pointer: "", message: "must be an object")])
    }

    @Test func anErrorCodeLongerThan200CharactersIsRefusedOnlyByTheLeaseForm() throws {
        let body = JSONValue.object([
            "error": .object(["code": .string(String(repeating: "c", count: 201)), "message": "m"])
        ])
        #expect((try? CompletionBody.read(body, form: .awaitTask).get()) != nil)
        #expect((try? CompletionBody.read(body, form: .lease).get()) == nil)
    }
}
