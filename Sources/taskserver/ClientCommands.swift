import ArgumentParser
import Foundation

/// Where the terminal commands find the server.
struct ClientOptions: ParsableArguments {
    @Option(
        help:
            "The server's base URL (env TASKSERVER_URL; default http://127.0.0.1:8080). The API key is read from env TASKSERVER_API_KEY."
    )
    var server: String = Self.environment("TASKSERVER_URL") ?? "http://127.0.0.1:8080"

    func client() throws -> TaskServerClient {
        try runClient { () throws(ClientError) in
            try TaskServerClient(server: self.server, apiKey: Self.environment("TASKSERVER_API_KEY"))
        }
    }

    static func environment(_ name: String) -> String? {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }
}

/// Exit statuses of the terminal commands.
enum ClientExit {
    /// The job succeeded (or the command did what it was asked).
    static let succeeded: Int32 = 0
    static let failed: Int32 = 1
    static let cancelled: Int32 = 2
    /// The server could not be reached, or answered an error.
    static let error: Int32 = 3
}

/// Runs `body`, turning a `ClientError` into its message and exit status 3.
func runClient<T>(_ body: () throws(ClientError) -> T) throws -> T {
    do {
        return try body()
    } catch {
        FileHandle.standardError.write(Data("taskserver: \(error)\n".utf8))
        throw ExitCode(ClientExit.error)
    }
}

/// Writes a JSON body to stdout, pretty-printed for people.
func printJSON(_ data: Data) {
    if let object = try? JSONSerialization.jsonObject(with: data),
        let pretty = try? JSONSerialization.data(
            withJSONObject: object,
            options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        )
    {
        FileHandle.standardOutput.write(pretty + Data("\n".utf8))
    } else {
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }
}

let terminalJobStates: Set<String> = ["succeeded", "failed", "cancelled"]

func exitStatus(forState state: String) -> Int32 {
    switch state {
    case "succeeded": return ClientExit.succeeded
    case "cancelled": return ClientExit.cancelled
    default: return ClientExit.failed
    }
}

extension TaskServerClient {
    /// The job, after waiting up to `waitMs` for it to end.
    func job(_ id: String, waitMs: Int = 0) throws(ClientError) -> Response {
        let query = waitMs > 0 ? "?waitMs=\(waitMs)" : ""
        let response = try self.send("GET", "/v1/jobs/\(Self.escape(id))\(query)", timeout: waitMs / 1000 + 30)
        guard response.status == 200 else { throw ClientError(problem: response) }
        return response
    }

    /// Percent-encodes an id for a path segment.
    static func escape(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? id
    }
}

// MARK: - submit

struct Submit: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Submit a job from a JSON file (- for stdin).",
        discussion: """
            Prints the job as the server answers it. With --wait, waits for the job to end and prints it then; \
            with --watch, shows live progress (one updating line on a terminal, a line per change otherwise).
            Exit status with --wait/--watch: 0 succeeded, 1 failed, 2 cancelled; 3 when the server cannot be \
            reached or answers an error.
            """
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job as JSON (the Job schema of openapi.yaml), or - to read it from stdin.")
    var file: String

    @Flag(help: "Wait for the job to end; print it and exit with a status that reflects its outcome.")
    var wait = false

    @Flag(help: "Show live progress until the job ends; exit with a status that reflects its outcome.")
    var watch = false

    @Option(help: "Send this Idempotency-Key: submitting the same file again returns the same job.")
    var idempotencyKey: String?

    func validate() throws {
        if self.wait && self.watch { throw ValidationError("--wait and --watch cannot be combined") }
    }

    func run() throws {
        let client = try self.options.client()
        let body: Data
        do {
            body =
                self.file == "-"
                ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: self.file))
        } catch {
            FileHandle.standardError.write(
                Data("taskserver: cannot read \(self.file): \(error.localizedDescription)\n".utf8)
            )
            throw ExitCode(ClientExit.error)
        }
        let headers = self.idempotencyKey.map { [("Idempotency-Key", $0)] } ?? []
        let created = try runClient { () throws(ClientError) in
            let response = try client.send("POST", "/v1/jobs", body: body, headers: headers)
            guard response.status == 201 || response.status == 200 else { throw ClientError(problem: response) }
            return response
        }
        guard let id = created.json?["id"] as? String else {
            FileHandle.standardError.write(Data("taskserver: the server's answer has no job id\n".utf8))
            throw ExitCode(ClientExit.error)
        }
        if self.watch {
            let state = try runClient { () throws(ClientError) in try JobWatcher(client: client, id: id).run() }
            throw ExitCode(exitStatus(forState: state))
        }
        guard self.wait else {
            printJSON(created.body)
            return
        }
        let final = try runClient { () throws(ClientError) in
            while true {
                let response = try client.job(id, waitMs: 30_000)
                if let state = response.json?["state"] as? String, terminalJobStates.contains(state) { return response }
            }
        }
        printJSON(final.body)
        throw ExitCode(exitStatus(forState: final.json?["state"] as? String ?? "failed"))
    }
}

// MARK: - status, cancel

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a job (its state, progress, result or error).")

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job id.")
    var id: String

    func run() throws {
        let client = try self.options.client()
        let response = try runClient { () throws(ClientError) in try client.job(self.id) }
        printJSON(response.body)
    }
}

struct Cancel: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cancel a job: running actions stop at once and nodes not yet started never run.",
        discussion: "Exit status 0 when the job is (now) cancelled; 3 when it had already ended or was not found."
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job id.")
    var id: String

    func run() throws {
        let client = try self.options.client()
        let response = try runClient { () throws(ClientError) in
            let response = try client.send("POST", "/v1/jobs/\(TaskServerClient.escape(self.id))/cancel")
            guard response.status == 202 || response.status == 200 else { throw ClientError(problem: response) }
            return response
        }
        printJSON(response.body)
    }
}

struct Redrive: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a failed or cancelled job again from where it stopped.",
        discussion: """
            Succeeded nodes keep their results and do not run; failed, cancelled and skipped nodes run \
            again, their attempts counting on. Prints the job, now running. Exit status 0 when it runs \
            again; 3 when it is not failed or cancelled, was not found, or the server cannot be reached.
            """
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job id.")
    var id: String

    func run() throws {
        let client = try self.options.client()
        let response = try runClient { () throws(ClientError) in
            let response = try client.send("POST", "/v1/jobs/\(TaskServerClient.escape(self.id))/redrive")
            guard response.status == 202 else { throw ClientError(problem: response) }
            return response
        }
        printJSON(response.body)
    }
}

// MARK: - events

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a job's events, one JSON object per line.",
        discussion: "With --follow, keeps printing new events (long-polling the server) until the job ends."
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job id.")
    var id: String

    @Flag(name: .shortAndLong, help: "Wait for new events until the job ends.")
    var follow = false

    @Option(help: "Only events after this sequence number.")
    var after: Int = 0

    func run() throws {
        let client = try self.options.client()
        var after = self.after
        try runClient { () throws(ClientError) in
            while true {
                let waitMs = self.follow ? 30_000 : 0
                let query = "?after=\(after)" + (waitMs > 0 ? "&waitMs=\(waitMs)" : "")
                let response = try client.send(
                    "GET",
                    "/v1/jobs/\(TaskServerClient.escape(self.id))/events\(query)",
                    timeout: waitMs / 1000 + 30
                )
                guard response.status == 200 else { throw ClientError(problem: response) }
                let items = response.json?["items"] as? [[String: Any]] ?? []
                var ended = false
                for item in items {
                    if let line = try? JSONSerialization.data(
                        withJSONObject: item,
                        options: [.sortedKeys, .withoutEscapingSlashes]
                    ) {
                        FileHandle.standardOutput.write(line + Data("\n".utf8))
                    }
                    if let seq = item["seq"] as? Int { after = max(after, seq) }
                    // A redriven job's history goes on after a terminal event: only the last counts.
                    ended =
                        (item["type"] as? String).map { ["job.succeeded", "job.failed", "job.cancelled"].contains($0) }
                        ?? false
                }
                if ended, let state = try client.job(self.id).json?["state"] as? String {
                    ended = terminalJobStates.contains(state)
                }
                if !self.follow || ended { return }
                // Nothing new within the wait: stop if the job ended before `after` (its last event
                // was not in view, e.g. with --after past it).
                if items.isEmpty, let state = try client.job(self.id).json?["state"] as? String,
                    terminalJobStates.contains(state)
                {
                    return
                }
            }
        }
    }
}
