import Foundation
import TaskGraph
import Testing

@testable import TaskServerWorker

/// Completion items made from how a command ended.
struct CompletionItemTests {
    static let settings = WorkerSettings(
        executor: "images",
        actions: [],
        concurrency: 1,
        workerId: "w",
        grace: .seconds(1),
        maxHeartbeatInterval: nil,
        maxOutputBytes: 1024,
        commandName: "resize",
        executable: "/bin/true",
        arguments: []
    )

    static func item(_ termination: ChildCommand.Termination, stdout: String = "", truncated: Bool = false) -> String {
        let outcome = ChildCommand.Outcome(
            termination: termination,
            stdout: Data(stdout.utf8),
            isStdoutTruncated: truncated,
            stderrTail: Data([0x80, 0x80]) + Data("é!".utf8)
        )
        let item = CompletionItem(task: WorkerStateTests.task("L"), outcome: outcome, settings: Self.settings)
        return String(decoding: item.item, as: UTF8.self)
    }

    @Test func standardOutputIsTheResultAsJSONInItsOrderOrElseAString() {
        #expect(
            Self.item(.exited(0), stdout: " {\"b\": [1, {\"z\": null, \"a\": 2.5}], \"a\": true}\n")
                == #"{"leaseId":"L","result":{"b":[1,{"z":null,"a":2.5}],"a":true}}"#
        )
        #expect(Self.item(.exited(0), stdout: "42") == #"{"leaseId":"L","result":42}"#)
        #expect(Self.item(.exited(0), stdout: "hello\n") == #"{"leaseId":"L","result":"hello"}"#)
        #expect(Self.item(.exited(0), stdout: "two\r\n\n") == #"{"leaseId":"L","result":"two\r\n"}"#)
        #expect(Self.item(.exited(0), stdout: "") == #"{"leaseId":"L","result":""}"#)
        #expect(Self.item(.exited(0), stdout: #"{"a":1,"a":2}"#) == #"{"leaseId":"L","result":"{\"a\":1,\"a\":2}"}"#)
    }

    @Test func aFailedCommandFailsTheAttemptWithItsStatusAndStandardError() {
        // The tail of standard error starts mid-character: those bytes are dropped.
        #expect(
            Self.item(.exited(3))
                == #"{"leaseId":"L","error":{"code":"worker.exit","message":"resize exited with status 3","details":{"exitStatus":3,"stderr":"é!"}},"retryable":true}"#
        )
        #expect(
            Self.item(.signalled(9))
                == #"{"leaseId":"L","error":{"code":"worker.exit","message":"resize was killed by signal 9","details":{"exitStatus":137,"signal":9,"stderr":"é!"}},"retryable":true}"#
        )
    }

    @Test func tooMuchOutputIsNotRetried() {
        #expect(
            Self.item(.exited(0), stdout: "x", truncated: true)
                == #"{"leaseId":"L","error":{"code":"worker.outputTooLarge","message":"resize wrote more than 1024 bytes to standard output","details":{"limitBytes":1024,"stderr":"é!"}},"retryable":false}"#
        )
        // Within the limit as output, over it (and the room for the item's keys) as JSON.
        let escaped = String(repeating: "\u{1}", count: 1000)
        #expect(Self.item(.exited(0), stdout: escaped).contains(#""code":"worker.outputTooLarge""#))
    }

    @Test func aStartFailureHasNoDetails() {
        let item = CompletionItem(leaseId: "L", code: "worker.startFailed", message: "m", details: [], retryable: true)
        #expect(
            String(decoding: item.item, as: UTF8.self)
                == #"{"leaseId":"L","error":{"code":"worker.startFailed","message":"m"},"retryable":true}"#
        )
        #expect(item.outcome == "failed (worker.startFailed)")
    }
}
