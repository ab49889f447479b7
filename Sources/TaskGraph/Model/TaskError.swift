/// The error of a failed node or job (SPEC §1.1): `{"code", "message", "taskId"?, "details"?}`.
public struct TaskError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: String
    public var message: String
    /// The id of the task that failed first (set by the engine when the error leaves its task).
    public var taskId: String?
    public var details: JSONValue?

    public init(code: String, message: String, taskId: String? = nil, details: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.taskId = taskId
        self.details = details
    }

    /// The error as its JSON object.
    public var json: JSONValue {
        var object = JSONObject()
        object["code"] = .string(self.code)
        object["message"] = .string(self.message)
        if let taskId { object["taskId"] = .string(taskId) }
        if let details { object["details"] = details }
        return .object(object)
    }

    /// Reads `{"code", "message", "details"?, "taskId"?}`; nil when `code` or `message` is missing.
    public init?(json: JSONValue) {
        guard let code = json["code"]?.stringValue, let message = json["message"]?.stringValue else { return nil }
        self.init(code: code, message: message, taskId: json["taskId"]?.stringValue, details: json["details"])
    }

    public var description: String { "\(self.code): \(self.message)" }

    /// Any error as a `TaskError`: itself, a template error with its code, anything else as `task.failed`.
    public static func from(_ error: any Error) -> TaskError {
        if let error = error as? TaskError { return error }
        if let error = error as? FinalError { return error.error }
        if let error = error as? TemplateError { return TaskError(code: error.code, message: error.message) }
        return TaskError(code: "task.failed", message: "\(error)")
    }
}
