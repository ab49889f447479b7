import Foundation
import TestSupport
import Testing

@testable import TaskServerWorker

/// A real child process per test (`/bin/sh`), run on a thread of its own as the worker runs it.
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct ChildCommandTests {
    static func run(
        _ script: String,
        input: Data = Data(),
        stdoutLimit: Int = 1 << 20,
        shouldStop: @escaping @Sendable () -> Bool = { false }
    ) async throws -> ChildCommand.Outcome {
        try await onThread {
            try ChildCommand(executable: "/bin/sh", arguments: ["-c", script], stdoutLimit: stdoutLimit)
                .run(input: input, shouldStop: shouldStop)
        }
    }

    @Test func inputAndOutputFlowAtOnceWithoutDeadlock() async throws {
        // 1 MiB each way, far more than a pipe holds: the worker must write and read together.
        let input = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let outcome = try await Self.run("cat; head -c 100000 /dev/zero | tr '\\0' e >&2", input: input)
        #expect(outcome.termination == .exited(0))
        #expect(outcome.stdout == input)
        #expect(!outcome.isStdoutTruncated)
        #expect(outcome.stderrTail == Data(repeating: UInt8(ascii: "e"), count: ChildCommand.stderrTailBytes))
    }

    @Test func theExitStatusIsKept() async throws {
        #expect(try await Self.run("exit 7").termination == .exited(7))
    }

    @Test func outputBeyondTheLimitIsCutAndFlagged() async throws {
        let outcome = try await Self.run("head -c 5000 /dev/zero", stdoutLimit: 1024)
        #expect(outcome.termination == .exited(0))
        #expect(outcome.stdout.count == 1024)
        #expect(outcome.isStdoutTruncated)
    }

    @Test func aChildThatDoesNotReadItsInputDoesNotHurtTheWorker() async throws {
        let outcome = try await Self.run("exit 0", input: Data(count: 8 << 20))
        #expect(outcome.termination == .exited(0))
    }

    /// A file the child creates once it is ready to be stopped; `shouldStop` waits for it.
    static func readyFile() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("child-ready-\(UUID().uuidString)").path
    }

    @Test func aStoppedChildGetsSIGTERMAndWhatItStartedGoesToo() async throws {
        let ready = Self.readyFile()
        defer { try? FileManager.default.removeItem(atPath: ready) }
        let started = ContinuousClock.now
        // `sleep` in the background (the shell's child, holding the pipes): the process group is
        // signalled, so it goes too, and the outcome does not wait for it.
        let outcome = try await Self.run("sleep 30 & touch '\(ready)'; sleep 30; wait") {
            FileManager.default.fileExists(atPath: ready)
        }
        #expect(outcome.termination == .signalled(SIGTERM))
        // Well under the 30 s a wait for `sleep` would take; loose, as the machine may be busy.
        #expect(ContinuousClock.now - started < TestTiming.scaled(.seconds(15)))
    }

    @Test func aChildThatIgnoresSIGTERMIsKilled() async throws {
        let ready = Self.readyFile()
        defer { try? FileManager.default.removeItem(atPath: ready) }
        let started = ContinuousClock.now
        let outcome = try await Self.run("trap '' TERM; touch '\(ready)'; while :; do sleep 0.1; done") {
            FileManager.default.fileExists(atPath: ready)
        }
        #expect(outcome.termination == .signalled(SIGKILL))
        #expect(ContinuousClock.now - started >= ChildCommand.killAfter)
    }

    @Test func aCommandThatCannotStartThrows() async throws {
        await #expect(throws: (any Error).self) {
            try await onThread {
                try ChildCommand(executable: "/nonexistent/command", arguments: [], stdoutLimit: 1024)
                    .run(input: Data(), shouldStop: { false })
            }
        }
    }
}
