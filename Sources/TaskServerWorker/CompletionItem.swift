import Foundation
import TaskGraph
import TaskWorkerProtocol

/// A completion batch item, made from how the command ended: `{"leaseId", "result"}` or
/// `{"leaseId", "error", "retryable"}` (a `CompletionBody` with its lease), as JSON.
struct CompletionItem {
    var item: [UInt8]
    /// `succeeded`, or why the attempt failed, for the log line.
    var outcome: String
    var exitStatus: Int32?

    /// Exit status 0: the result is standard output parsed as JSON, or else as a string (one
    /// trailing newline trimmed). Any other end fails the attempt.
    init(task: LeasedTask, outcome: ChildCommand.Outcome, settings: WorkerSettings) {
        let name = settings.commandName
        let stderr = String(decoding: Self.dropLeadingContinuationBytes(outcome.stderrTail), as: UTF8.self)
        switch outcome.termination {
        case .exited(0) where outcome.isStdoutTruncated:
            self.init(
                leaseId: task.leaseId,
                code: "worker.outputTooLarge",
                message: "\(name) wrote more than \(settings.maxOutputBytes) bytes to standard output",
                details: [("limitBytes", .int(settings.maxOutputBytes)), ("stderr", .string(stderr))],
                retryable: false
            )
            self.exitStatus = 0
        case .exited(0):
            let item = Self.item(leaseId: task.leaseId, CompletionBody(result: Self.result(outcome.stdout)))
            // Room for the lease id and the keys around the result itself.
            if item.count <= settings.maxOutputBytes + 1024 {
                self.init(item: item, outcome: "succeeded", exitStatus: 0)
            } else {
                self.init(
                    leaseId: task.leaseId,
                    code: "worker.outputTooLarge",
                    message: "the result of \(name) is larger than \(settings.maxOutputBytes) bytes as JSON",
                    details: [("limitBytes", .int(settings.maxOutputBytes)), ("stderr", .string(stderr))],
                    retryable: false
                )
                self.exitStatus = 0
            }
        case .exited(let status):
            self.init(
                leaseId: task.leaseId,
                code: "worker.exit",
                message: "\(name) exited with status \(status)",
                details: [("exitStatus", .int(Int(status))), ("stderr", .string(stderr))],
                retryable: true
            )
            self.exitStatus = status
        case .signalled(let signal):
            self.init(
                leaseId: task.leaseId,
                code: "worker.exit",
                message: "\(name) was killed by signal \(signal)",
                details: [
                    ("exitStatus", .int(128 + Int(signal))), ("signal", .int(Int(signal))), ("stderr", .string(stderr)),
                ],
                retryable: true
            )
            self.exitStatus = 128 + signal
        }
    }

    init(item: [UInt8], outcome: String, exitStatus: Int32?) {
        self.item = item
        self.outcome = outcome
        self.exitStatus = exitStatus
    }

    /// A failed attempt; `details` in the order given (none: no `details`).
    init(leaseId: String, code: String, message: String, details: [JSONObject.Member], retryable: Bool) {
        let error = TaskError(
            code: code,
            message: message,
            details: details.isEmpty ? nil : .object(JSONObject(details))
        )
        self.init(
            item: Self.item(leaseId: leaseId, CompletionBody(error: error, isRetryable: retryable)),
            outcome: "failed (\(code))",
            exitStatus: nil
        )
    }

    /// The batch item of `completion`: its lease id first.
    static func item(leaseId: String, _ completion: CompletionBody) -> [UInt8] {
        JSONValue.object(JSONObject([("leaseId", .string(leaseId))] + completion.members)).jsonBytes
    }

    /// Standard output as JSON — members in the order the command wrote them, read with the
    /// server's own parser and limits, so that what is sent as JSON is JSON the server reads — or
    /// else as a string without its one trailing newline.
    static func result(_ stdout: Data) -> JSONValue {
        let limits = JSONParser.Limits(maxBytes: Int.max, maxStringBytes: Int.max)
        if let value = try? JSONParser.parse(stdout, limits: limits) { return value }
        var text = String(decoding: stdout, as: UTF8.self)
        // "\r\n" is one Character: it goes whole.
        if text.hasSuffix("\n") || text.hasSuffix("\r\n") { text.removeLast() }
        return .string(text)
    }

    /// The tail of standard error may start inside a UTF-8 sequence: drop those bytes rather than
    /// show a replacement character.
    static func dropLeadingContinuationBytes(_ data: Data) -> Data {
        Data(data.drop { $0 & 0xC0 == 0x80 })
    }
}
