import TaskCore

// The built-in actions of SPEC §1.2 that need nothing outside TaskGraph. (`http` lives in
// TaskServer, next to libcurl.)

// MARK: - Param checks shared by the built-ins

/// Static checks of an action's `params` object; a string holding `${` may become any value.
///
/// Used by the built-ins here and by actions defined elsewhere (`http` in TaskServer).
public struct ParamChecker {
    public let params: JSONValue
    public let pointer: String
    public var problems: [ValidationProblem] = []

    /// Starts checking `params` (at `pointer`): it must be an object with only `allowed` keys.
    public init(_ params: JSONValue, at pointer: String, allowed: Set<String>) {
        self.params = params
        self.pointer = pointer
        guard case .object(let object) = params else {
            self.problems.append(ValidationProblem(pointer: pointer, message: "must be an object"))
            return
        }
        // Every task's params are checked at submission: scan the members (no array of keys) and,
        // for the usual handful of allowed names, compare rather than hash.
        func isAllowed(_ key: String) -> Bool {
            allowed.count <= 8 ? allowed.contains(where: { $0 == key }) : allowed.contains(key)
        }
        for member in object.members where !isAllowed(member.key) {
            let key = member.key
            let known = allowed.sorted().joined(separator: ", ")
            self.problems.append(
                ValidationProblem(
                    pointer: JSONPointer.appending(pointer, key),
                    message: "unknown parameter \"\(key)\""
                        + (known.isEmpty ? "; this action takes none" : "; expected one of: \(known)")
                )
            )
        }
    }

    /// The literal value of a parameter, or nil when absent or templated.
    public func literal(_ key: String) -> JSONValue? {
        guard let value = self.params[key] else { return nil }
        if value.containsTemplates { return nil }
        return value
    }

    /// Checks that a literal `key` is an integer within `range`.
    public mutating func integer(_ key: String, in range: ClosedRange<Int>) {
        guard let value = self.literal(key) else { return }
        guard let int = value.intValue, range.contains(int) else {
            self.problems.append(
                ValidationProblem(
                    pointer: JSONPointer.appending(self.pointer, key),
                    message: "must be an integer from \(range.lowerBound) to \(range.upperBound)"
                )
            )
            return
        }
    }

    /// Checks that a literal `key` is a (non-empty) string.
    public mutating func string(_ key: String, nonEmpty: Bool = false) {
        guard let value = self.literal(key) else { return }
        guard let string = value.stringValue, !nonEmpty || !string.isEmpty else {
            self.problems.append(
                ValidationProblem(
                    pointer: JSONPointer.appending(self.pointer, key),
                    message: nonEmpty ? "must be a non-empty string" : "must be a string"
                )
            )
            return
        }
    }
}

extension JSONValue {
    /// The integer at `key` of a rendered params object, checked against `range`.
    public func integerParam(_ key: String, in range: ClosedRange<Int>) throws(TaskError) -> Int? {
        guard let value = self[key], !value.isNull else { return nil }
        guard let int = value.intValue, range.contains(int) else {
            throw TaskError(
                code: "params.invalid",
                message:
                    "params.\(key) must be an integer from \(range.lowerBound) to \(range.upperBound), got \(value)"
            )
        }
        return int
    }
}

// MARK: - value

/// `value`: succeeds with `params.value` if given, else with the task's input.
public struct ValueAction: Action {
    static let parameters: Set<String> = ["value"]
    public init() {}
    public var name: String { "value" }

    public func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] {
        ParamChecker(params, at: pointer, allowed: Self.parameters).problems
    }

    public func run(_ context: ActionContext) -> Future<JSONValue> {
        Future(value: context.params["value"] ?? context.input)
    }
}

// MARK: - fail

/// `fail`: fails with `{code (default task.failed), message, details}`.
public struct FailAction: Action {
    static let parameters: Set<String> = ["code", "message", "details"]
    public init() {}
    public var name: String { "fail" }

    public func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] {
        var checker = ParamChecker(params, at: pointer, allowed: Self.parameters)
        checker.string("code", nonEmpty: true)
        checker.string("message")
        return checker.problems
    }

    public func run(_ context: ActionContext) -> Future<JSONValue> {
        let code = context.params["code"]?.stringValue ?? "task.failed"
        let message = context.params["message"]?.stringValue ?? "the task failed"
        return Future(error: TaskError(code: code, message: message, details: context.params["details"]))
    }
}

// MARK: - delay

/// `delay`: waits `ms` milliseconds, then succeeds with its input. Holds no thread and no worker
/// slot while it waits; cancellation ends it at once.
public struct DelayAction: Action {
    static let parameters: Set<String> = ["ms"]
    public static let maxMilliseconds = 86_400_000

    public init() {}
    public var name: String { "delay" }
    public var holdsWorkerSlot: Bool { false }

    public func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] {
        var checker = ParamChecker(params, at: pointer, allowed: Self.parameters)
        if params["ms"] == nil, case .object = params {
            checker.problems.append(
                ValidationProblem(pointer: JSONPointer.appending(pointer, "ms"), message: "required")
            )
        }
        checker.integer("ms", in: 0...Self.maxMilliseconds)
        return checker.problems
    }

    public func run(_ context: ActionContext) -> Future<JSONValue> {
        let ms: Int
        do { ms = try context.params.integerParam("ms", in: 0...Self.maxMilliseconds) ?? 0 } catch {
            return Future(error: error)
        }
        let input = context.input
        return Future<Void>.delay(.milliseconds(context.remaining(ms)), token: context.cancellationToken).map { input }
    }
}

// MARK: - await

/// `await`: waits until a client completes the task (`POST …/tasks/{id}/complete`), like a
/// `TaskCompletionSource` over HTTP; with `timeoutMs`, fails with `task.timeout` when none came.
public struct AwaitAction: Action {
    static let parameters: Set<String> = ["timeoutMs"]
    public static let maxTimeoutMilliseconds = 31 * 86_400_000

    public init() {}
    public var name: String { "await" }
    public var holdsWorkerSlot: Bool { false }

    public func validate(params: JSONValue, at pointer: String) -> [ValidationProblem] {
        var checker = ParamChecker(params, at: pointer, allowed: Self.parameters)
        checker.integer("timeoutMs", in: 1...Self.maxTimeoutMilliseconds)
        return checker.problems
    }

    public func run(_ context: ActionContext) -> Future<JSONValue> {
        let timeoutMs: Int?
        do { timeoutMs = try context.params.integerParam("timeoutMs", in: 1...Self.maxTimeoutMilliseconds) } catch {
            return Future(error: error)
        }
        let promise = Promise<JSONValue>()
        context.acceptCompletion(promise)
        let registration = context.cancellationToken.register { promise.tryCancel() }
        var timer: TimerQueue.ID?
        if let timeoutMs {
            timer = TimerQueue.shared.schedule(after: .milliseconds(context.remaining(timeoutMs))) {
                promise.tryFail(
                    TaskError(code: "task.timeout", message: "no completion arrived within \(timeoutMs) ms")
                )
            }
        }
        promise.future.whenComplete { [timer] _ in
            registration.dispose()
            if let timer { TimerQueue.shared.cancel(timer) }
        }
        return promise.future
    }
}
