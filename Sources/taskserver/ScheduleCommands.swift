import ArgumentParser
import Foundation
import TaskGraph
import TaskServerWorker

/// `taskserver schedules …`: list cron schedules, apply them from a file, pause, resume and
/// trigger them (SPEC §8; the REST resources under /v1/schedules).
struct SchedulesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedules",
        abstract: "List cron schedules, apply them from a file, pause, resume and trigger them.",
        discussion: """
            Exit status: 0 done, 1 refused (the server's problem is printed on stderr), 3 when the server \
            cannot be reached or answers an error other than a refusal. trigger --wait/--watch: 0 the run \
            succeeded, 1 failed, 2 cancelled.
            """,
        subcommands: [List.self, Apply.self, Pause.self, Resume.self, Trigger.self]
    )

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every schedule, by id, each with its next runs: {\"items\": [...]}."
        )

        @OptionGroup var options: ClientOptions

        func run() throws {
            let client = try self.options.client()
            let items = try client.allItems("/v1/schedules", cursor: "after", next: "next")
            printJSON(["items": .array(items)])
        }
    }

    struct Apply: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create or update the schedules in a JSON file, so that the server has them as written.",
            discussion: """
                The file holds one schedule ({"id", "cron", "timezone"?, "job", "overlap"?, "catchUp"?, \
                "paused"?, …}, the body of POST /v1/schedules) or an array of them. Each one that does not \
                exist is created; one that exists is changed (PATCH) to the fields the file gives, unless \
                every one of them already has that value (then nothing is sent: a PATCH of cron or timezone \
                would count from now). Fields the file leaves out keep their values on the server. Prints \
                the schedule as the server has it ({"items": [...]} for an array), and on stderr whether \
                each one was created, updated or unchanged. A schedule the server refuses is reported and \
                the rest are still applied; exit status 1 when any was refused.
                """
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The schedule(s) as JSON, or - to read them from stdin.")
        var file: String

        func run() throws {
            let client = try self.options.client()
            let document = try parseJSON(readFile(self.file), what: self.file)
            let schedules = document.arrayValue ?? [document]
            var ids: [String] = []
            for schedule in schedules {
                guard let id = schedule["id"]?.stringValue, schedule.objectValue != nil else {
                    printNote("\(self.file): every schedule is an object with an \"id\"")
                    throw ExitCode(ClientExit.error)
                }
                ids.append(id)
            }
            var applied: [JSONValue] = []
            var refused = 0
            for (id, schedule) in zip(ids, schedules) {
                do {
                    applied.append(try Self.apply(schedule, id: id, client))
                } catch let error as ServerClientError {
                    printNote(error.description)
                    throw ExitCode(ClientExit.error)
                } catch let refusal as Refusal {
                    printNote("\(id) refused: \(refusal.problem)")
                    refused += 1
                }
            }
            if document.arrayValue != nil {
                printJSON(["items": .array(applied)])
            } else if let one = applied.first {
                printJSON(one)
            }
            if refused > 0 { throw ExitCode(ClientExit.failed) }
        }

        /// A 4xx answer to one schedule: the others are still applied.
        struct Refusal: Error { var problem: String }

        /// Creates, changes or leaves alone one schedule; returns it as the server has it.
        static func apply(_ schedule: JSONValue, id: String, _ client: CommandClient) throws -> JSONValue {
            let path = "/v1/schedules/\(escape(id))"
            let current = try client.send("GET", path)
            var answer: ServerClient.Response
            var outcome: String
            switch current.status {
            case 404:
                answer = try client.send("POST", "/v1/schedules", json: schedule)
                outcome = "created"
            case 200:
                guard let stored = current.json else { throw ServerClientError("the server's answer is not JSON") }
                var patch = schedule.objectValue ?? [:]
                patch["id"] = nil
                if patch.allSatisfy({ member in stored[member.key].map { sameJSON($0, member.value) } ?? false }) {
                    printNote("\(id) unchanged")
                    return stored
                }
                answer = try client.send("PATCH", path, json: .object(patch))
                outcome = "updated"
            default:
                throw ServerClientError(problem: current)
            }
            guard answer.status == 200 || answer.status == 201 else {
                if (400..<500).contains(answer.status) {
                    throw Refusal(problem: ServerClientError(problem: answer).description)
                }
                throw ServerClientError(problem: answer)
            }
            printNote("\(id) \(outcome)")
            return answer.json ?? .null
        }
    }

    struct Pause: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Pause a schedule: it fires no more until resumed (a trigger still starts a run)."
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The schedule's id.")
        var id: String

        func run() throws { try SchedulesCommand.setPaused(true, id: self.id, self.options) }
    }

    struct Resume: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Resume a paused schedule: it fires again from now (the fires of the pause are not caught up)."
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The schedule's id.")
        var id: String

        func run() throws { try SchedulesCommand.setPaused(false, id: self.id, self.options) }
    }

    struct Trigger: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Start a run of a schedule now, paused or not; its fires are unchanged.",
            discussion: """
                Prints the job it started; with --wait, the job once it ended; with --watch, its progress. \
                Exit status with --wait/--watch: 0 succeeded, 1 failed, 2 cancelled.
                """
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The schedule's id.")
        var id: String

        @Flag(help: "Wait for the run to end; print it and exit with a status that reflects its outcome.")
        var wait = false

        @Flag(help: "Show the run's live progress until it ends; exit with a status that reflects its outcome.")
        var watch = false

        func validate() throws {
            if self.wait && self.watch { throw ValidationError("--wait and --watch cannot be combined") }
        }

        func run() throws {
            let client = try self.options.client()
            let job = try client.refusable([201], "POST", "/v1/schedules/\(escape(self.id))/trigger").json
            try follow(job, client: client, wait: self.wait, watch: self.watch)
        }
    }

    /// PATCH `{"paused": paused}` and print the schedule.
    static func setPaused(_ paused: Bool, id: String, _ options: ClientOptions) throws {
        let client = try options.client()
        printJSON(
            try client.refusable([200], "PATCH", "/v1/schedules/\(escape(id))", json: ["paused": .bool(paused)]).json
        )
    }
}

/// Whether two JSON values are equal, objects compared without regard to member order (the
/// server may write a schedule's members in another order than the file).
func sameJSON(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.object(let x), .object(let y)):
        return x.count == y.count
            && x.allSatisfy { member in y[member.key].map { sameJSON(member.value, $0) } ?? false }
    case (.array(let x), .array(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { sameJSON($0, $1) }
    case (.int(let x), .double(let y)), (.double(let y), .int(let x)):
        return Double(x) == y
    default:
        return a == b
    }
}
