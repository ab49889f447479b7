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
        abstract: "Submit a job from a JSON file (- for stdin), or many from a JSON Lines file (--jsonl).",
        discussion: """
            Prints the job as the server answers it. With --wait, waits for the job to end and prints it then; \
            with --watch, shows live progress (one updating line on a terminal, a line per change otherwise).
            Exit status with --wait/--watch: 0 succeeded, 1 failed, 2 cancelled; 3 when the server cannot be \
            reached or answers an error.
            With --jsonl, each non-blank line of the file is a job (an "idempotencyKey" member may name it); \
            they are sent in batches (POST /v1/jobs/batch, --batch-size per request) and one JSON line is \
            printed per job, in order: {"line":N,"status":201,"id":…,"state":…} or {"line":N,"status":422,\
            "problem":{…}}. Exit status 0 when every job was accepted, 1 when some were refused, 3 when the \
            server cannot be reached or answers an error (the jobs of earlier batches stay accepted).
            """
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job as JSON (the Job schema of openapi.yaml), or - to read it from stdin.")
    var file: String?

    @Option(help: "Start the stored definition of this name instead of a job file (see `taskserver definitions`).")
    var definition: String?

    @Option(help: "With --definition: the version to start (default: the latest).")
    var version: Int?

    @Option(help: "With --definition: the job's input as JSON (@FILE reads it from a file).")
    var input: String?

    @Flag(help: "Wait for the job to end; print it and exit with a status that reflects its outcome.")
    var wait = false

    @Flag(help: "Show live progress until the job ends; exit with a status that reflects its outcome.")
    var watch = false

    @Option(help: "Send this Idempotency-Key: submitting the same file again returns the same job.")
    var idempotencyKey: String?

    @Flag(help: "The file holds one job per line (JSON Lines); submit them in batches.")
    var jsonl = false

    @Option(help: "With --jsonl: jobs per request (1 to 1000).")
    var batchSize = 500

    func validate() throws {
        if self.wait && self.watch { throw ValidationError("--wait and --watch cannot be combined") }
        if (self.file == nil) == (self.definition == nil) {
            throw ValidationError("give a job file or --definition NAME (one of them)")
        }
        if self.definition == nil, self.version != nil || self.input != nil {
            throw ValidationError("--version and --input go with --definition")
        }
        if self.definition != nil, self.jsonl {
            throw ValidationError("--jsonl reads jobs from a file, not --definition")
        }
        if self.jsonl, self.wait || self.watch || self.idempotencyKey != nil {
            throw ValidationError("--jsonl submits many jobs: it takes no --wait, --watch or --idempotency-key")
        }
        guard (1...1000).contains(self.batchSize) else { throw ValidationError("--batch-size must be from 1 to 1000") }
    }

    func run() throws {
        let client = try self.options.client()
        if self.jsonl {
            let refused = try BatchSubmission(client: client, batchSize: self.batchSize).run(self.readInput())
            if refused > 0 { throw ExitCode(ClientExit.failed) }
            return
        }
        let body = try self.readInput()
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

extension Submit {
    /// The request body: the job file, or a start of `--definition` with its `--input`.
    func readInput() throws -> Data {
        guard let definition else { return try readFile(self.file ?? "-") }
        var start: [String: Any] = ["definition": definition]
        if let version { start["version"] = version }
        if let input {
            let text = input.hasPrefix("@") ? try readFile(String(input.dropFirst())) : Data(input.utf8)
            guard let value = try? JSONSerialization.jsonObject(with: text, options: .fragmentsAllowed) else {
                FileHandle.standardError.write(Data("taskserver: --input is not JSON\n".utf8))
                throw ExitCode(ClientExit.error)
            }
            start["input"] = value
        }
        return try JSONSerialization.data(withJSONObject: start, options: [.sortedKeys, .withoutEscapingSlashes])
    }
}

/// The bytes of `path` (`-`: standard input); exits with status 3 and a message when unreadable.
func readFile(_ path: String) throws -> Data {
    do {
        return path == "-"
            ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: path))
    } catch {
        FileHandle.standardError.write(Data("taskserver: cannot read \(path): \(error.localizedDescription)\n".utf8))
        throw ExitCode(ClientExit.error)
    }
}

/// `taskserver submit --jsonl`: the jobs of a JSON Lines file, in batches of `POST /v1/jobs/batch`.
struct BatchSubmission {
    let client: TaskServerClient
    let batchSize: Int

    /// Submits every job of `input`, printing one line per job; returns how many were refused.
    func run(_ input: Data) throws -> Int {
        // A line that is not JSON cannot go into a batch's body (nil here): it is refused in its place.
        var pending: [(line: Int, json: Data?)] = []
        var refused = 0
        var accepted = 0
        var number = 0
        for rawLine in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            number += 1
            let line = Data(rawLine)
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            let isJSON = (try? JSONSerialization.jsonObject(with: line, options: .fragmentsAllowed)) != nil
            pending.append((number, isJSON ? line : nil))
            if pending.count(where: { $0.json != nil }) == self.batchSize {
                let (ok, no) = try self.send(pending)
                accepted += ok
                refused += no
                pending.removeAll(keepingCapacity: true)
            }
        }
        if !pending.isEmpty {
            let (ok, no) = try self.send(pending)
            accepted += ok
            refused += no
        }
        FileHandle.standardError.write(Data("taskserver: \(accepted) accepted, \(refused) refused\n".utf8))
        return refused
    }

    private func send(_ lines: [(line: Int, json: Data?)]) throws -> (accepted: Int, refused: Int) {
        let jobs = lines.compactMap(\.json)
        var items: [[String: Any]] = []
        if !jobs.isEmpty {
            var body = Data(#"{"jobs":["#.utf8)
            for (index, job) in jobs.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                body.append(job)
            }
            body.append(contentsOf: Array("]}".utf8))
            let response = try runClient { () throws(ClientError) in
                let response = try self.client.send("POST", "/v1/jobs/batch", body: body, timeout: 120)
                guard response.status == 200 else { throw ClientError(problem: response) }
                return response
            }
            guard let answered = response.json?["items"] as? [[String: Any]], answered.count == jobs.count else {
                FileHandle.standardError.write(Data("taskserver: the server's answer does not list every job\n".utf8))
                throw ExitCode(ClientExit.error)
            }
            items = answered
        }
        var accepted = 0
        var next = items.makeIterator()
        for job in lines {
            guard job.json != nil, let item = next.next() else {
                Self.printLine([
                    "line": job.line, "status": 400,
                    "problem": ["code": "json.invalid", "detail": "line \(job.line) is not JSON"],
                ])
                continue
            }
            let status = item["status"] as? Int ?? 0
            var line: [String: Any] = ["line": job.line, "status": status]
            if let created = item["job"] as? [String: Any] {
                accepted += 1
                line["id"] = created["id"]
                line["state"] = created["state"]
            } else {
                line["problem"] = item["problem"]
            }
            Self.printLine(line)
        }
        return (accepted, lines.count - accepted)
    }

    private static func printLine(_ object: [String: Any]) {
        guard
            var data = try? JSONSerialization.data(
                withJSONObject: object,
                options: [.sortedKeys, .withoutEscapingSlashes]
            )
        else { return }
        data.append(UInt8(ascii: "\n"))
        FileHandle.standardOutput.write(data)
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

    func run() throws { try postJobCommand("cancel", id: self.id, accepting: [200, 202], self.options) }
}

struct Redrive: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a failed or cancelled job again from where it stopped; or every job a filter lists.",
        discussion: """
            Succeeded nodes keep their results and do not run; failed, cancelled and skipped nodes run \
            again, their attempts counting on. Prints the job, now running. Exit status 0 when it runs \
            again; 3 when it is not failed or cancelled, was not found, or the server cannot be reached.
            With --filter (the query of GET /v1/jobs, e.g. --filter state=failed --filter \
            finishedAfter=2026-12-02T10:00:00Z), redrives every job it lists, a page at a time \
            (POST /v1/jobs/redrive), printing one JSON line per job ({"id", "status", "problem"?}) and a \
            summary on stderr; exit status 0 when every listed job runs again, 1 when some were left alone.
            """
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job id.")
    var id: String?

    @Option(
        help: "A filter of GET /v1/jobs as NAME=VALUE (repeatable): state, label, definition, parent, createdAfter, …"
    )
    var filter: [String] = []

    func validate() throws {
        if (self.id == nil) == self.filter.isEmpty { throw ValidationError("give a job id or --filter (one of them)") }
        for item in self.filter where !item.contains("=") {
            throw ValidationError("--filter takes NAME=VALUE, got \(item)")
        }
    }

    func run() throws {
        guard self.filter.isEmpty, let id else { return try self.redriveAll() }
        try postJobCommand("redrive", id: id, accepting: [202], self.options)
    }

    /// POST /v1/jobs/redrive, page after page, until the filter lists no more.
    private func redriveAll() throws {
        let client = try self.options.client()
        let encoded = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        let query = self.filter.map { item -> String in
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            let value = parts.count > 1 ? parts[1] : ""
            return "\(parts[0])=\(value.addingPercentEncoding(withAllowedCharacters: encoded) ?? value)"
        }.joined(separator: "&")
        var cursor: String?
        var redriven = 0
        var left = 0
        repeat {
            let page =
                "/v1/jobs/redrive?\(query)&limit=1000" + (cursor.map { "&cursor=\(TaskServerClient.escape($0))" } ?? "")
            let response = try runClient { () throws(ClientError) in
                let response = try client.send("POST", page, timeout: 120)
                guard response.status == 200 else { throw ClientError(problem: response) }
                return response
            }
            for item in response.json?["items"] as? [[String: Any]] ?? [] {
                if item["status"] as? Int == 202 { redriven += 1 } else { left += 1 }
                let line = try JSONSerialization.data(
                    withJSONObject: item,
                    options: [.sortedKeys, .withoutEscapingSlashes]
                )
                FileHandle.standardOutput.write(line + Data("\n".utf8))
            }
            cursor = response.json?["nextCursor"] as? String
        } while cursor != nil
        FileHandle.standardError.write(Data("taskserver: \(redriven) redriven, \(left) left alone\n".utf8))
        if left > 0 { throw ExitCode(ClientExit.failed) }
    }
}

/// POSTs `/v1/jobs/{id}/{command}` and prints the job the server answers with; any other status
/// than `accepting` is the problem it carries (exit status 3).
private func postJobCommand(_ command: String, id: String, accepting: Set<Int>, _ options: ClientOptions) throws {
    let client = try options.client()
    let response = try runClient { () throws(ClientError) in
        let response = try client.send("POST", "/v1/jobs/\(TaskServerClient.escape(id))/\(command)")
        guard accepting.contains(response.status) else { throw ClientError(problem: response) }
        return response
    }
    printJSON(response.body)
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
