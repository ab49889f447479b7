import Foundation

/// A completion batch item, made from how the command ended.
struct CompletionItem {
    var item: Data
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
                details: ["limitBytes": settings.maxOutputBytes, "stderr": stderr],
                retryable: false
            )
            self.exitStatus = 0
        case .exited(0):
            let result = Self.result(outcome.stdout)
            let item =
                (try? JSONSerialization.data(
                    withJSONObject: ["leaseId": task.leaseId, "result": result],
                    options: [.withoutEscapingSlashes]
                ))
            // Room for the lease id and the keys around the result itself.
            if let item, item.count <= settings.maxOutputBytes + 1024 {
                self.init(item: item, outcome: "succeeded", exitStatus: 0)
            } else {
                self.init(
                    leaseId: task.leaseId,
                    code: "worker.outputTooLarge",
                    message: "the result of \(name) is larger than \(settings.maxOutputBytes) bytes as JSON",
                    details: ["limitBytes": settings.maxOutputBytes, "stderr": stderr],
                    retryable: false
                )
                self.exitStatus = 0
            }
        case .exited(let status):
            self.init(
                leaseId: task.leaseId,
                code: "worker.exit",
                message: "\(name) exited with status \(status)",
                details: ["exitStatus": Int(status), "stderr": stderr],
                retryable: true
            )
            self.exitStatus = status
        case .signalled(let signal):
            self.init(
                leaseId: task.leaseId,
                code: "worker.exit",
                message: "\(name) was killed by signal \(signal)",
                details: ["exitStatus": 128 + Int(signal), "signal": Int(signal), "stderr": stderr],
                retryable: true
            )
            self.exitStatus = 128 + signal
        }
    }

    init(item: Data, outcome: String, exitStatus: Int32?) {
        self.item = item
        self.outcome = outcome
        self.exitStatus = exitStatus
    }

    /// A failed attempt.
    init(leaseId: String, code: String, message: String, details: [String: Any], retryable: Bool) {
        var error: [String: Any] = ["code": code, "message": message]
        if !details.isEmpty { error["details"] = details }
        let object: [String: Any] = ["leaseId": leaseId, "error": error, "retryable": retryable]
        // Strings and integers only: it always encodes.
        self.init(
            item: (try? JSONSerialization.data(withJSONObject: object, options: [.withoutEscapingSlashes])) ?? Data(),
            outcome: "failed (\(code))",
            exitStatus: nil
        )
    }

    /// Standard output as JSON, or else as a string without its one trailing newline.
    static func result(_ stdout: Data) -> Any {
        if let value = try? JSONSerialization.jsonObject(with: stdout, options: [.fragmentsAllowed]) { return value }
        var text = String(decoding: stdout, as: UTF8.self)
        // "\r\n" is one Character: it goes whole.
        if text.hasSuffix("\n") || text.hasSuffix("\r\n") { text.removeLast() }
        return text
    }

    /// The tail of standard error may start inside a UTF-8 sequence: drop those bytes rather than
    /// show a replacement character.
    static func dropLeadingContinuationBytes(_ data: Data) -> Data {
        Data(data.drop { $0 & 0xC0 == 0x80 })
    }
}
