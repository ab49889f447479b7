import ArgumentParser
import Foundation
import TaskGraph
import TaskServerWorker

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
        let headers = self.idempotencyKey.map { [(name: "Idempotency-Key", value: $0)] } ?? []
        let created = try runClient { () throws(ServerClientError) in
            try client.expect([200, 201], "POST", "/v1/jobs", bytes: body, headers: headers).json
        }
        try follow(created, client: client, wait: self.wait, watch: self.watch)
    }
}

extension Submit {
    /// The request body: the job file as it is (the server checks it), or a start of
    /// `--definition` with its `--input`.
    func readInput() throws -> [UInt8] {
        guard let definition else { return try readFile(self.file ?? "-") }
        var start: JSONObject = ["definition": .string(definition)]
        if let version { start["version"] = .int(version) }
        if let input {
            let text = input.hasPrefix("@") ? try readFile(String(input.dropFirst())) : Array(input.utf8)
            start["input"] = try parseJSON(text, what: "--input")
        }
        return JSONValue.object(start).jsonBytes
    }
}

/// `taskserver submit --jsonl`: the jobs of a JSON Lines file, in batches of `POST /v1/jobs/batch`.
struct BatchSubmission {
    let client: CommandClient
    let batchSize: Int

    /// Submits every job of `input`, printing one line per job; returns how many were refused.
    func run(_ input: [UInt8]) throws -> Int {
        // A line that is not JSON cannot go into a batch's body (nil here): it is refused in its place.
        var pending: [(line: Int, json: ArraySlice<UInt8>?)] = []
        var refused = 0
        var accepted = 0
        var number = 0
        for line in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            number += 1
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            let isJSON = (try? JSONParser.parse(Array(line))) != nil
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
        printNote("\(accepted) accepted, \(refused) refused")
        return refused
    }

    private func send(_ lines: [(line: Int, json: ArraySlice<UInt8>?)]) throws -> (accepted: Int, refused: Int) {
        let jobs = lines.compactMap(\.json)
        var items: [JSONValue] = []
        if !jobs.isEmpty {
            var body = Array(#"{"jobs":["#.utf8)
            for (index, job) in jobs.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                body += job
            }
            body += Array("]}".utf8)
            let answer = try runClient { () throws(ServerClientError) in
                try self.client.expect([200], "POST", "/v1/jobs/batch", bytes: body, wait: .seconds(90)).json
            }
            guard let answered = answer["items"]?.arrayValue, answered.count == jobs.count else {
                printNote("the server's answer does not list every job")
                throw ExitCode(ClientExit.error)
            }
            items = answered
        }
        var accepted = 0
        var next = items.makeIterator()
        for job in lines {
            guard job.json != nil, let item = next.next() else {
                printLine([
                    "line": .int(job.line), "status": 400,
                    "problem": ["code": "json.invalid", "detail": .string("line \(job.line) is not JSON")],
                ])
                continue
            }
            var line: JSONObject = ["line": .int(job.line), "status": item["status"] ?? .int(0)]
            if let created = item["job"] {
                accepted += 1
                line["id"] = created["id"] ?? .null
                line["state"] = created["state"] ?? .null
            } else {
                line["problem"] = item["problem"] ?? .null
            }
            printLine(.object(line))
        }
        return (accepted, lines.count - accepted)
    }
}

// MARK: - get, cancel

struct Get: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a job (its state, progress, result or error).",
        discussion: "Exit status 0 when the job was found; 3 when it was not or the server cannot be reached.",
        aliases: ["status"]
    )

    @OptionGroup var options: ClientOptions

    @Argument(help: "The job id.")
    var id: String

    @Option(help: "Wait up to this many milliseconds for the job to end first (0...60000).")
    var waitMs = 0

    func validate() throws {
        guard (0...60_000).contains(self.waitMs) else { throw ValidationError("--wait-ms must be from 0 to 60000") }
    }

    func run() throws {
        let client = try self.options.client()
        printJSON(try runClient { () throws(ServerClientError) in try client.job(self.id, waitMs: self.waitMs) })
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
            let page = "/v1/jobs/redrive?\(query)&limit=1000" + (cursor.map { "&cursor=\(escape($0))" } ?? "")
            let answer = try runClient { () throws(ServerClientError) in
                try client.expect([200], "POST", page, wait: .seconds(90)).json
            }
            for item in answer["items"]?.arrayValue ?? [] {
                if item["status"]?.intValue == 202 { redriven += 1 } else { left += 1 }
                printLine(item)
            }
            cursor = answer["nextCursor"]?.stringValue
        } while cursor != nil
        printNote("\(redriven) redriven, \(left) left alone")
        if left > 0 { throw ExitCode(ClientExit.failed) }
    }
}

/// POSTs `/v1/jobs/{id}/{command}` and prints the job the server answers with; any other status
/// than `accepting` is the problem it carries (exit status 3).
private func postJobCommand(_ command: String, id: String, accepting: Set<Int>, _ options: ClientOptions) throws {
    let client = try options.client()
    printJSON(
        try runClient { () throws(ServerClientError) in
            try client.expect(accepting, "POST", "/v1/jobs/\(escape(id))/\(command)").json
        }
    )
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
        try runClient { () throws(ServerClientError) in
            while true {
                let waitMs = self.follow ? 30_000 : 0
                let query = "?after=\(after)" + (waitMs > 0 ? "&waitMs=\(waitMs)" : "")
                let page = try client.expect(
                    [200],
                    "GET",
                    "/v1/jobs/\(escape(self.id))/events\(query)",
                    wait: .milliseconds(waitMs)
                ).json
                let items = page["items"]?.arrayValue ?? []
                var ended = false
                for item in items {
                    printLine(item)
                    if let seq = item["seq"]?.intValue { after = max(after, seq) }
                    // A redriven job's history goes on after a terminal event: only the last counts.
                    ended = item["type"]?.stringValue.map { Self.terminalEvents.contains($0) } ?? false
                }
                if ended, let state = try client.job(self.id)["state"]?.stringValue {
                    ended = terminalJobStates.contains(state)
                }
                if !self.follow || ended { return }
                // Nothing new within the wait: stop if the job ended before `after` (its last event
                // was not in view, e.g. with --after past it).
                if items.isEmpty, let state = try client.job(self.id)["state"]?.stringValue,
                    terminalJobStates.contains(state)
                {
                    return
                }
            }
        }
    }

    static let terminalEvents: Set<String> = ["job.succeeded", "job.failed", "job.cancelled"]
}
