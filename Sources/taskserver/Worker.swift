import ArgumentParser
import Foundation
import Logging
import TaskServer
import TaskServerWorker
import TaskWorkerProtocol

/// `taskserver worker`: the reference worker of an external pool (SPEC §6). It runs a command for
/// each task it claims; the work is in `WorkerRuntime`.
struct Worker: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a command for each task of an external executor: a worker of its pool, in any language.",
        usage: "taskserver worker --executor <name> [<options>] -- <command> [<argument> ...]",
        discussion: """
            The server must declare the executor external (taskserver serve --executor images=external). \
            The worker claims that executor's tasks over HTTP, or HTTPS with --server https://… (--cacert \
            for a certificate of a private authority), and runs COMMAND once per task, up to --concurrency \
            at a time, e.g.
              taskserver worker --executor images --action resize -- python3 resize.py

            COMMAND's standard input is the task, as one JSON object (attempt counts from 1):
              {"action", "params", "input", "jobId", "taskId", "attempt"}
            Exit status 0: the task succeeds with standard output as its result: parsed as JSON (objects keep \
            their members in the order written), or as a \
            string (one trailing newline removed) when it is not JSON. Standard output is limited to \
            --max-output-bytes; more fails the attempt (worker.outputTooLarge, not retried).
            Any other exit status, or death by a signal, fails the attempt with error code worker.exit, \
            details {"exitStatus", "signal" (when killed), "stderr": the last 4 KiB of standard error}; the \
            task's retry policy decides what happens next. Standard error is otherwise discarded.

            While COMMAND runs the worker heartbeats the task's lease. When the task is cancelled, or its \
            lease ends (it expired, e.g. after the server was unreachable for too long), COMMAND gets \
            SIGTERM, then SIGKILL 5 s later, and the attempt is left to the server. COMMAND runs in a \
            process group of its own: those signals reach what it started too, and a Ctrl-C does not.

            SIGTERM or SIGINT: the worker claims no more tasks, lets running commands finish and \
            completes their tasks, for up to --grace-seconds; then stops the commands still running \
            (their attempts end on the server when their heartbeats stop) and exits 0. A second signal \
            stops the commands at once.

            While the server is unreachable or busy (5xx, 429), the worker retries with backoff (0.1 s \
            to 5 s). Exit status 3 when the server refuses the worker: a wrong API key (401), an \
            executor it does not know (404 executor.notFound) or that is not external (409 \
            executor.notExternal), or an invalid claim (422); the reason is printed on standard error. \
            Exit status 64 for invalid options.

            One log line per task on standard error (job and task ids, outcome, duration; never a lease id).
            """
    )

    @Option(help: ArgumentHelp("The external executor (pool) to take tasks from.", valueName: "name"))
    var executor: String

    @Option(
        name: .customLong("action"),
        help: ArgumentHelp("Take only tasks of this action; repeatable (default: every action).", valueName: "action")
    )
    var actions: [String] = []

    @Option(help: "How many commands may run at once, 1...256.")
    var concurrency: Int = 1

    @OptionGroup var connection: ConnectionOptions

    @Option(help: "How this worker names itself to the server: printable ASCII, no spaces (default HOST:PID).")
    var workerId: String?

    @Option(help: "On SIGTERM/SIGINT, how long running commands may take to finish.")
    var graceSeconds: Double = 30

    @Option(
        help:
            "Heartbeat each lease at least this often; by default every third of the task's heartbeatTimeoutMs (which also caps this)."
    )
    var heartbeatIntervalMs: Int?

    @Option(
        help:
            "Largest standard output kept as a result, in bytes; a completion must fit the server's request body limit (its --max-body-bytes, 1 MiB by default)."
    )
    var maxOutputBytes: Int = 1_000_000

    @OptionGroup var logging: LoggingOptions

    @Argument(
        parsing: .postTerminator,
        help: ArgumentHelp("The command to run for each task, and its arguments, after --.", valueName: "command")
    )
    var command: [String] = []

    func validate() throws {
        guard let name = self.command.first, !name.isEmpty else {
            throw ValidationError(
                "give the command to run after --, e.g. taskserver worker --executor images -- ./resize.sh"
            )
        }
        guard !self.executor.isEmpty else { throw ValidationError("--executor must not be empty") }
        guard (1...256).contains(self.concurrency) else { throw ValidationError("--concurrency must be from 1 to 256") }
        for action in self.actions where !WorkerActionName.isValid(action) {
            throw ValidationError("--action \"\(action.prefix(100))\" must match [A-Za-z0-9_.:-]{1,100}")
        }
        guard self.actions.count <= 100 else { throw ValidationError("at most 100 --action") }
        if let workerId = self.workerId, !WorkerID.isValid(workerId) {
            throw ValidationError("--worker-id must be 1 to 200 printable ASCII characters without spaces")
        }
        guard self.graceSeconds >= 0 && self.graceSeconds <= 86_400 else {
            throw ValidationError("--grace-seconds must be from 0 to 86400")
        }
        if let interval = self.heartbeatIntervalMs, interval < 100 {
            throw ValidationError("--heartbeat-interval-ms must be at least 100")
        }
        guard (1024...(1 << 30)).contains(self.maxOutputBytes) else {
            throw ValidationError("--max-output-bytes must be from 1024 to 1073741824")
        }
        if Self.executablePath(name) == nil {
            throw ValidationError(
                name.contains("/")
                    ? "\(name) is not an executable file" : "\(name) was not found in PATH (or is not executable)"
            )
        }
    }

    func run() throws {
        let environment = ProcessInfo.processInfo.environment.filter { !$0.value.isEmpty }
        let logging: LoggingOptions.Resolved
        do {
            logging = try self.logging.resolve(environment)
        } catch {
            throw ValidationError(error.description)
        }
        let logger = Logger(label: "taskserver.worker") { label in logging.handler(label: label) }

        let client = try self.connection.serverClient()
        let settings = WorkerSettings(
            executor: self.executor,
            actions: self.actions,
            concurrency: self.concurrency,
            workerId: self.workerId ?? Self.defaultWorkerId(),
            grace: .milliseconds(Int(self.graceSeconds * 1000)),
            maxHeartbeatInterval: self.heartbeatIntervalMs.map { .milliseconds($0) },
            maxOutputBytes: self.maxOutputBytes,
            commandName: self.command[0],
            executable: Self.executablePath(self.command[0]) ?? self.command[0],
            arguments: Array(self.command.dropFirst())
        )
        let signals = WorkerSignals.install()
        let status = WorkerRuntime(settings: settings, client: client, logger: logger).run(signals: signals)
        if status != 0 { throw ExitCode(status) }
    }

    /// `HOST:PID`, the host name reduced to what a worker id allows.
    static func defaultWorkerId() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        let host =
            gethostname(&buffer, buffer.count - 1) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "worker"
        let cleaned = String(String.UnicodeScalarView(host.unicodeScalars.filter { (0x21...0x7E).contains($0.value) }))
        return "\(cleaned.isEmpty ? "worker" : String(cleaned.prefix(180))):\(getpid())"
    }

    /// COMMAND's executable: a path as given when it has a slash, else the first match in PATH.
    static func executablePath(_ name: String) -> String? {
        if name.contains("/") { return access(name, X_OK) == 0 ? name : nil }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            var isDirectory: ObjCBool = false
            if access(candidate, X_OK) == 0,
                FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue
            {
                return candidate
            }
        }
        return nil
    }
}
