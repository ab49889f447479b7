import TaskCore
import TaskGraph

/// How one attempt of a task ended, as whoever completes it reports it: a result, or an error
/// `{"code", "message", "details"?}` with `retryable` (SPEC §3.6, §6).
///
/// It is the body of `POST /v1/jobs/{id}/tasks/{taskId}/complete` (an `await` task), of
/// `POST /v1/leases/{leaseId}/complete`, and each item of `POST /v1/leases/complete` (with its
/// `leaseId`). The server reads all of them with the one parser, `init(reading:form:)`; a worker
/// writes them with `members`.
public struct CompletionBody: Sendable, Equatable {
    /// A result, or an error.
    public enum Value: Sendable, Equatable {
        case result(JSONValue)
        case error(TaskError)
    }

    public var value: Value
    /// Whether a failed attempt may be retried (the task's `retry` decides); `false` ends the task
    /// whatever its `retry` says. Always `true` with a result.
    public var isRetryable: Bool

    /// A successful attempt.
    public init(result: JSONValue) {
        self.value = .result(result)
        self.isRetryable = true
    }

    /// A failed attempt. A worker names no task: the server fills the error's `taskId` in.
    public init(error: TaskError, isRetryable: Bool) {
        self.value = .error(error)
        self.isRetryable = isRetryable
    }

    /// The outcome the engine records.
    public var outcome: Outcome<JSONValue> {
        switch self.value {
        case .result(let result): return .success(result)
        case .error(let error): return .failure(error)
        }
    }

    /// The body's members, in the order a worker sends them: `result`, or `error` and `retryable`.
    public var members: [JSONObject.Member] {
        switch self.value {
        case .result(let result): return [("result", result)]
        case .error(let error): return [("error", error.json), ("retryable", .bool(self.isRetryable))]
        }
    }
}

// MARK: - Parsing

extension CompletionBody {
    /// Which body is read. The routes have answered slightly different problems since they were
    /// written, and clients (and tests) rely on them; each difference is one property here, so
    /// that the parser stays one.
    public struct Form: Sendable {
        /// Whether `retryable` is a field (next to an error only), or an unknown one.
        let acceptsRetryable: Bool
        /// How unknown fields of the body and of its error are worded.
        let wording: BodyReader.UnknownFieldWording
        /// The most characters of an error's `code` (nil: any non-empty string).
        let maxCodeLength: Int?
        /// Whether an error is still checked when it comes with a result (one problem more to fix
        /// at once), or the body's ambiguity is the only problem reported.
        let checksErrorBesideResult: Bool
        /// Whether an error that is not an object stops there, or its `code` and `message` are
        /// reported missing too.
        let stopsAtNonObjectError: Bool

        /// `POST /v1/jobs/{id}/tasks/{taskId}/complete`: `{"result"}` or `{"error"}`, nothing else.
        public static let awaitTask = Form(
            acceptsRetryable: false,
            wording: .plain,
            maxCodeLength: nil,
            checksErrorBesideResult: true,
            stopsAtNonObjectError: true
        )

        /// A lease's completion: `{"result"}` or `{"error", "retryable"?}`, error codes of at most 200
        /// characters.
        public static let lease = Form(
            acceptsRetryable: true,
            wording: .listingExpected,
            maxCodeLength: 200,
            checksErrorBesideResult: false,
            stopsAtNonObjectError: false
        )

        /// The members a body of this form may have (a lease's batch item adds `leaseId`, a
        /// completion `claimNext`).
        public var fields: Set<String> {
            self.acceptsRetryable ? ["result", "error", "retryable"] : ["result", "error"]
        }
    }

    /// Reads the completion members of `reader`'s object, adding what is wrong to its problems.
    /// When it reports problems, the value read is meaningless.
    package init(reading reader: inout BodyReader, form: Form) {
        let result = reader.object["result"]
        let error = reader.object["error"]
        self.init(result: .null)
        if form.acceptsRetryable { self.isRetryable = reader.boolean("retryable", default: true) }
        if (result == nil) == (error == nil) {
            reader.problems.append(
                ValidationProblem(pointer: reader.base, message: "give exactly one of \"result\" and \"error\"")
            )
            guard form.checksErrorBesideResult, error != nil else { return }
        }
        guard let error else {
            if form.acceptsRetryable && reader.object["retryable"] != nil {
                reader.report("retryable", "only goes with \"error\"")
            }
            self.value = .result(result ?? .null)
            return
        }
        var errorReader = BodyReader(
            error,
            at: reader.pointer("error"),
            allowed: ["code", "message", "details"],
            wording: form.wording
        )
        defer { reader.problems += errorReader.problems }
        if !errorReader.isObject && form.stopsAtNonObjectError { return }
        let code = errorReader.object["code"]?.stringValue
        if let maxLength = form.maxCodeLength {
            if code.map({ !$0.isEmpty && $0.unicodeScalars.count <= maxLength }) != true {
                errorReader.report("code", "must be a string of 1 to \(maxLength) characters")
            }
        } else if code?.isEmpty != false {
            errorReader.report("code", "must be a non-empty string")
        }
        let message = errorReader.object["message"]?.stringValue
        if message == nil { errorReader.report("message", "must be a string") }
        if let code, let message {
            self.value = .error(TaskError(code: code, message: message, details: errorReader.object["details"]))
        }
    }

    /// Reads a whole body of `form` (an object with only the form's fields); returns it, or every
    /// problem found (only "must be an object" for a body that is not one).
    public static func read(_ body: JSONValue, form: Form) -> Result<CompletionBody, ValidationError> {
        var reader = BodyReader(body, allowed: form.fields, wording: form.wording)
        guard reader.isObject else { return .failure(ValidationError(reader.problems)) }
        let completion = CompletionBody(reading: &reader, form: form)
        return reader.problems.isEmpty ? .success(completion) : .failure(ValidationError(reader.problems))
    }
}
