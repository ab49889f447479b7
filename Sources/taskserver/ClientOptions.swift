import ArgumentParser
import Foundation
import TaskGraph
import TaskServerWorker

/// How a command reaches the server — `--server`, `--api-key`, `--cacert`, each with its
/// environment variable: shared by `taskserver worker` and the terminal commands.
struct ConnectionOptions: ParsableArguments {
    @Option(help: "The server's base URL, http:// or https:// (env TASKSERVER_URL; default http://127.0.0.1:8080).")
    var server: String = environmentValue("TASKSERVER_URL") ?? "http://127.0.0.1:8080"

    @Option(help: "The API key (env TASKSERVER_API_KEY; prefer the variable: options show in ps).")
    var apiKey: String?

    @Option(
        name: .customLong("cacert"),
        help: ArgumentHelp(
            "A PEM file of the certificate authorities to verify an https:// server with, instead of the system's (env TASKSERVER_CACERT).",
            valueName: "path"
        )
    )
    var caFile: String?

    func validate() throws {
        if let caFile = self.caFile ?? environmentValue("TASKSERVER_CACERT"), access(caFile, R_OK) != 0 {
            throw ValidationError("--cacert: cannot read \(caFile)")
        }
    }

    /// A client of the server these options name; exits with status 3 and a message when
    /// `--server` is not an http(s) URL.
    func serverClient() throws -> ServerClient {
        try runClient { () throws(ServerClientError) in
            try ServerClient(
                server: self.server,
                apiKey: self.apiKey ?? environmentValue("TASKSERVER_API_KEY"),
                caFile: self.caFile ?? environmentValue("TASKSERVER_CACERT")
            )
        }
    }
}

/// Where the terminal commands find the server, and how long each request may take.
struct ClientOptions: ParsableArguments {
    @OptionGroup var connection: ConnectionOptions

    @Option(
        help: "Seconds each request may take (a long-poll gets its wait on top), 1...3600 (env TASKSERVER_TIMEOUT)."
    )
    var timeout: Int = environmentValue("TASKSERVER_TIMEOUT").flatMap { Int($0) } ?? 30

    func validate() throws {
        guard (1...3600).contains(self.timeout) else { throw ValidationError("--timeout must be from 1 to 3600") }
    }

    func client() throws -> CommandClient {
        CommandClient(http: try self.connection.serverClient(), timeout: .seconds(self.timeout))
    }
}

/// The value of an environment variable; nil when unset or empty.
func environmentValue(_ name: String) -> String? {
    ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
}

/// The terminal commands' view of the server: the shared `ServerClient` and the per-request
/// timeout, with the requests the commands have in common.
struct CommandClient {
    let http: ServerClient
    let timeout: Duration

    /// Sends one request; `wait` is a long-poll's wait, added to the timeout.
    func send(
        _ method: String,
        _ path: String,
        json body: JSONValue? = nil,
        bytes: [UInt8]? = nil,
        headers: [(name: String, value: String)] = [],
        wait: Duration = .zero
    ) throws(ServerClientError) -> ServerClient.Response {
        try self.http.send(method, path, json: bytes ?? body?.jsonBytes, headers: headers, timeout: self.timeout + wait)
    }

    /// Sends one request and returns its JSON answer when the status is one of `ok`; any other
    /// answer throws the problem it carries.
    func expect(
        _ ok: Set<Int>,
        _ method: String,
        _ path: String,
        json body: JSONValue? = nil,
        bytes: [UInt8]? = nil,
        headers: [(name: String, value: String)] = [],
        wait: Duration = .zero
    ) throws(ServerClientError) -> (status: Int, json: JSONValue) {
        let response = try self.send(method, path, json: body, bytes: bytes, headers: headers, wait: wait)
        guard ok.contains(response.status) else { throw ServerClientError(problem: response) }
        if response.body.isEmpty { return (response.status, .null) }
        guard let json = response.json else {
            throw ServerClientError(
                "the server's answer is not JSON: \(String(decoding: response.body.prefix(200), as: UTF8.self))"
            )
        }
        return (response.status, json)
    }

    /// A request of the `definitions` and `schedules` commands, whose answer must have a status of
    /// `ok`: a refusal (a 4xx) exits with status 1 and the server's problem on stderr; no answer, or
    /// any other status, with 3. An empty body is `.null`.
    func refusable(
        _ ok: Set<Int>,
        _ method: String,
        _ path: String,
        json body: JSONValue? = nil
    ) throws -> (status: Int, json: JSONValue) {
        let response = try runClient { () throws(ServerClientError) in try self.send(method, path, json: body) }
        guard ok.contains(response.status) else {
            printNote(ServerClientError(problem: response).description)
            throw ExitCode((400..<500).contains(response.status) ? ClientExit.failed : ClientExit.error)
        }
        if response.body.isEmpty { return (response.status, .null) }
        guard let json = response.json else {
            printNote("the server's answer is not JSON")
            throw ExitCode(ClientExit.error)
        }
        return (response.status, json)
    }

    /// Every item of a paged list (`refusable`'s exit statuses): asks again with the page's
    /// `next` member as the `cursor` query parameter until it is null.
    func allItems(_ path: String, cursor: String, next: String) throws -> [JSONValue] {
        var items: [JSONValue] = []
        var position: String?
        repeat {
            let query = "?limit=1000" + (position.map { "&\(cursor)=\(escape($0))" } ?? "")
            let page = try self.refusable([200], "GET", path + query).json
            items += page["items"]?.arrayValue ?? []
            position = page[next]?.stringValue
        } while position != nil
        return items
    }

    /// The job, after waiting up to `waitMs` for it to end.
    func job(_ id: String, waitMs: Int = 0) throws(ServerClientError) -> JSONValue {
        let query = waitMs > 0 ? "?waitMs=\(waitMs)" : ""
        return try self.expect([200], "GET", "/v1/jobs/\(escape(id))\(query)", wait: .milliseconds(waitMs)).json
    }

    /// Waits for the job to end (long-polls of 30 s) and returns it.
    func finishedJob(_ id: String) throws(ServerClientError) -> JSONValue {
        while true {
            let job = try self.job(id, waitMs: 30_000)
            if let state = job["state"]?.stringValue, terminalJobStates.contains(state) { return job }
        }
    }
}

/// Percent-encodes an id for a path segment.
func escape(_ id: String) -> String { ServerClient.escape(id) }

/// Exit statuses of the terminal commands.
enum ClientExit {
    /// The job succeeded (or the command did what it was asked).
    static let succeeded: Int32 = 0
    static let failed: Int32 = 1
    static let cancelled: Int32 = 2
    /// The server could not be reached, or answered an error.
    static let error: Int32 = 3
}

/// Runs `body`, turning a `ServerClientError` into its message and exit status 3.
func runClient<T>(_ body: () throws(ServerClientError) -> T) throws -> T {
    do {
        return try body()
    } catch {
        printNote(error.description)
        throw ExitCode(ClientExit.error)
    }
}

/// `taskserver: MESSAGE` on stderr.
func printNote(_ message: String) {
    FileHandle.standardError.write(Data("taskserver: \(message)\n".utf8))
}

/// Writes a JSON value to stdout, indented for people, members in the server's order.
func printJSON(_ value: JSONValue) {
    var out = ""
    value.writeIndented(into: &out, depth: 0)
    out += "\n"
    FileHandle.standardOutput.write(Data(out.utf8))
}

/// Writes a JSON value to stdout on one line (JSON Lines).
func printLine(_ value: JSONValue) {
    var bytes = value.jsonBytes
    bytes.append(UInt8(ascii: "\n"))
    FileHandle.standardOutput.write(Data(bytes))
}

extension JSONValue {
    /// Two spaces per level; empty objects and arrays stay on their line.
    fileprivate func writeIndented(into out: inout String, depth: Int) {
        let indent = String(repeating: "  ", count: depth + 1)
        switch self {
        case .object(let object) where !object.isEmpty:
            out += "{\n"
            for (index, member) in object.members.enumerated() {
                out += indent + JSONValue.string(member.key).jsonString + ": "
                member.value.writeIndented(into: &out, depth: depth + 1)
                out += index < object.count - 1 ? ",\n" : "\n"
            }
            out += String(repeating: "  ", count: depth) + "}"
        case .array(let items) where !items.isEmpty:
            out += "[\n"
            for (index, item) in items.enumerated() {
                out += indent
                item.writeIndented(into: &out, depth: depth + 1)
                out += index < items.count - 1 ? ",\n" : "\n"
            }
            out += String(repeating: "  ", count: depth) + "]"
        default:
            out += self.jsonString
        }
    }
}

/// Reads a JSON document the user gave (a file, stdin or an option's text).
func parseJSON(_ bytes: [UInt8], what: String) throws -> JSONValue {
    do {
        return try JSONParser.parse(bytes)
    } catch {
        printNote("\(what) is not JSON: \(error)")
        throw ExitCode(ClientExit.error)
    }
}

/// The bytes of `path` (`-`: standard input); exits with status 3 and a message when unreadable.
func readFile(_ path: String) throws -> [UInt8] {
    do {
        let data =
            path == "-"
            ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: path))
        return Array(data)
    } catch {
        printNote("cannot read \(path): \(error.localizedDescription)")
        throw ExitCode(ClientExit.error)
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

/// After a job was created: print it, or with `wait` its end, or with `watch` its progress; then
/// exit with a status that reflects its outcome (`wait`, `watch`).
func follow(_ created: JSONValue, client: CommandClient, wait: Bool, watch: Bool) throws {
    guard wait || watch else { return printJSON(created) }
    guard let id = created["id"]?.stringValue else {
        printNote("the server's answer has no job id")
        throw ExitCode(ClientExit.error)
    }
    if watch {
        let state = try runClient { () throws(ServerClientError) in try JobWatcher(client: client, id: id).run() }
        throw ExitCode(exitStatus(forState: state))
    }
    let final = try runClient { () throws(ServerClientError) in try client.finishedJob(id) }
    printJSON(final)
    throw ExitCode(exitStatus(forState: final["state"]?.stringValue ?? "failed"))
}
