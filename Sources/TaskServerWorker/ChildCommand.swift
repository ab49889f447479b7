import Foundation
import Synchronization

/// One run of `taskserver worker`'s COMMAND, for one task: the task goes to its standard input,
/// and its standard output and standard error are read at once, from one thread, with `poll` (a
/// child that fills one pipe while the worker waits on the other would otherwise stall both).
///
/// Foundation's `Process` starts the child in a process group of its own, so a Ctrl-C at the
/// worker's terminal does not reach it, and stopping it reaches what it started too.
struct ChildCommand {
    /// The executable's path, resolved from COMMAND when the worker starts.
    let executable: String
    let arguments: [String]
    /// Standard output kept; more than this is read and thrown away, and the run is `isStdoutTruncated`.
    let stdoutLimit: Int

    /// How much of the end of standard error is kept.
    static let stderrTailBytes = 4096
    /// How long a child told to stop (SIGTERM) has before SIGKILL.
    static let killAfter: Duration = .seconds(5)
    /// How long the pipes are still read once the child has exited: a process it left behind may
    /// hold them open for ever.
    static let drainAfterExit: Duration = .seconds(2)

    enum Termination: Equatable {
        case exited(Int32)
        case signalled(Int32)
    }

    struct Outcome {
        var termination: Termination
        var stdout: Data
        var isStdoutTruncated: Bool
        var stderrTail: Data
    }

    /// Runs the command to its end, blocking the calling thread.
    ///
    /// - Parameters:
    ///   - input: Written to the child's standard input, which is then closed.
    ///   - environment: Set in the child's environment, over the worker's own.
    ///   - shouldStop: Asked about ten times a second while the child runs; once it answers true,
    ///     the child's process group gets SIGTERM, and SIGKILL `killAfter` later.
    /// - Throws: When the command cannot be started.
    /// - Note: Blocks SIGPIPE in the calling thread (a child that exits without reading its input
    ///   must not kill the worker); run it on a thread of its own that starts nothing else.
    func run(input: Data, environment: [String: String] = [:], shouldStop: () -> Bool) throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: self.executable)
        process.arguments = self.arguments
        if !environment.isEmpty {
            // The worker's own environment, with the task's (its trace context) over it.
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let stdin = Pipe()
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        let exit = ChildExit()
        process.terminationHandler = { _ in exit.set() }
        // A spawned child starts with the calling thread's signal mask, and passes it on to what it
        // starts. Whatever thread runs this (the worker's block SIGTERM and SIGINT, Dispatch's
        // block nearly everything), the child gets an empty one, so that it and its own children
        // die of the SIGTERM they are sent.
        var empty = sigset_t()
        sigemptyset(&empty)
        var mask = sigset_t()
        pthread_sigmask(SIG_SETMASK, &empty, &mask)
        do {
            try process.run()
        } catch {
            pthread_sigmask(SIG_SETMASK, &mask, nil)
            throw error
        }
        pthread_sigmask(SIG_SETMASK, &mask, nil)
        // After the spawn: the child must not inherit a blocked SIGPIPE.
        Self.blockSIGPIPE()
        let pid = process.processIdentifier

        let inputFD = stdin.fileHandleForWriting.fileDescriptor
        let stdoutFD = stdout.fileHandleForReading.fileDescriptor
        let stderrFD = stderr.fileHandleForReading.fileDescriptor
        for fd in [inputFD, stdoutFD, stderrFD] { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        var isInputOpen = !input.isEmpty
        if !isInputOpen { try? stdin.fileHandleForWriting.close() }
        var isStdoutOpen = true
        var isStderrOpen = true
        var inputOffset = 0
        var output = OutputCapture(stdoutLimit: self.stdoutLimit)
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var exitedAt: ContinuousClock.Instant?
        var stopSentAt: ContinuousClock.Instant?
        var wasKilled = false

        while true {
            let now = ContinuousClock.now
            if exitedAt == nil && exit.isSet { exitedAt = now }
            if let exitedAt, !(isStdoutOpen || isStderrOpen) || now - exitedAt >= Self.drainAfterExit { break }
            if exitedAt == nil {
                // The child is signalled only until it has been reaped: its pid may be reused after.
                // (Between the reaping and `exit.set()` lies a window of a few instructions.)
                if stopSentAt == nil, shouldStop() {
                    Self.signal(pid, SIGTERM)
                    stopSentAt = now
                } else if let stopSentAt, !wasKilled, now - stopSentAt >= Self.killAfter {
                    Self.signal(pid, SIGKILL)
                    wasKilled = true
                }
            }
            var fds: [pollfd] = []
            if exitedAt == nil && exit.fd >= 0 { fds.append(pollfd(fd: exit.fd, events: Int16(POLLIN), revents: 0)) }
            if isInputOpen { fds.append(pollfd(fd: inputFD, events: Int16(POLLOUT), revents: 0)) }
            if isStdoutOpen { fds.append(pollfd(fd: stdoutFD, events: Int16(POLLIN), revents: 0)) }
            if isStderrOpen { fds.append(pollfd(fd: stderrFD, events: Int16(POLLIN), revents: 0)) }
            let ready = poll(&fds, nfds_t(fds.count), 100)
            if ready < 0 && errno != EINTR { break }
            guard ready > 0 else { continue }
            for entry in fds where entry.revents != 0 {
                switch entry.fd {
                case exit.fd:
                    continue  // seen at the top of the loop
                case inputFD:
                    let written = input.withUnsafeBytes { raw in
                        write(inputFD, raw.baseAddress! + inputOffset, min(raw.count - inputOffset, 64 << 10))
                    }
                    if written > 0 { inputOffset += written }
                    // EPIPE (the child closed its input) or done: either way nothing more to write.
                    if inputOffset == input.count || (written < 0 && errno != EAGAIN && errno != EINTR) {
                        try? stdin.fileHandleForWriting.close()
                        isInputOpen = false
                    }
                case stdoutFD:
                    if !Self.read(stdoutFD, into: &buffer, { output.appendStdout($0) }) { isStdoutOpen = false }
                default:
                    if !Self.read(stderrFD, into: &buffer, { output.appendStderr($0) }) { isStderrOpen = false }
                }
            }
        }
        if isInputOpen { try? stdin.fileHandleForWriting.close() }
        try? stdout.fileHandleForReading.close()
        try? stderr.fileHandleForReading.close()
        process.waitUntilExit()
        // A stopped command's leftovers (what it started in its group) go too. The group outlives
        // its leader while a member runs, so its id cannot have been reused yet.
        if stopSentAt != nil { kill(-pid, SIGKILL) }
        let termination: Termination =
            process.terminationReason == .uncaughtSignal
            ? .signalled(process.terminationStatus) : .exited(process.terminationStatus)
        return Outcome(
            termination: termination,
            stdout: output.stdout,
            isStdoutTruncated: output.isStdoutTruncated,
            stderrTail: output.stderrTail
        )
    }

    /// Reads what `fd` has; false at its end (or on an error that ends it).
    private static func read(_ fd: Int32, into buffer: inout [UInt8], _ sink: (ArraySlice<UInt8>) -> Void) -> Bool {
        let count = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress!, $0.count) }
        if count > 0 {
            sink(buffer[0..<count])
            return true
        }
        return count < 0 && (errno == EAGAIN || errno == EINTR)
    }

    /// Signals the child's process group, and the child itself in case it left the group.
    private static func signal(_ pid: Int32, _ signal: Int32) {
        kill(-pid, signal)
        kill(pid, signal)
    }

    private static func blockSIGPIPE() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }
}

/// Set once the child has been reaped, from the thread Foundation runs the termination handler
/// on; it also makes `fd` readable, to wake the `poll` at once.
private final class ChildExit: Sendable {
    private let flag = Atomic(false)
    private let writeEnd: Int32
    /// Readable once the child has exited.
    let fd: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        }
        self.fd = fds[0]
        self.writeEnd = fds[1]
    }

    deinit {
        close(self.fd)
        close(self.writeEnd)
    }

    var isSet: Bool { self.flag.load(ordering: .acquiring) }

    func set() {
        self.flag.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        _ = write(self.writeEnd, &byte, 1)
    }
}

/// A command's standard output up to a limit, and the end of its standard error.
struct OutputCapture {
    let stdoutLimit: Int
    private(set) var stdout = Data()
    private(set) var isStdoutTruncated = false
    private var stderr = Data()

    init(stdoutLimit: Int) { self.stdoutLimit = stdoutLimit }

    mutating func appendStdout(_ bytes: ArraySlice<UInt8>) {
        let room = self.stdoutLimit - self.stdout.count
        if bytes.count > room { self.isStdoutTruncated = true }
        if room > 0 { self.stdout.append(contentsOf: bytes.prefix(room)) }
    }

    mutating func appendStderr(_ bytes: ArraySlice<UInt8>) {
        self.stderr.append(contentsOf: bytes)
        // Trimmed in steps of at least the tail's size, so each byte is moved a bounded number of times.
        if self.stderr.count > 2 * ChildCommand.stderrTailBytes {
            self.stderr = Data(self.stderr.suffix(ChildCommand.stderrTailBytes))
        }
    }

    /// The last `ChildCommand.stderrTailBytes` of standard error.
    var stderrTail: Data { Data(self.stderr.suffix(ChildCommand.stderrTailBytes)) }
}
