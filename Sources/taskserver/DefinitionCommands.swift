import ArgumentParser
import Foundation
import TaskGraph
import TaskServerWorker

/// `taskserver definitions …`: store, list, read and retire workflow definitions (issue #45).
struct DefinitionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "definitions",
        abstract: "Store, list, read and retire workflow definitions.",
        discussion: """
            Start one with: taskserver submit --definition NAME --input '{"day": "2026-12-02"}' --wait
            Exit status: 0 done, 1 refused (the server's problem is printed), 3 when the server cannot be \
            reached.
            """,
        subcommands: [Apply.self, List.self, Get.self, Retire.self]
    )

    /// `apply FILE`: PUT the definition in FILE; a new version when it changed.
    struct Apply: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store the definition in a JSON file: a new version when it changed, none otherwise.",
            discussion: """
                The file is the body of PUT /v1/definitions/{name} ({"graph", "inputSchema"?, "defaults"?, \
                "description"?}); it may also carry the definition's "name", taken out before it is sent. \
                The name is --name, else the file's "name", else the file's base name without its extension. \
                Prints the version the server answers with and says on stderr whether it is new.
                """
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The definition as JSON, or - to read it from stdin.")
        var file: String

        @Option(help: "The definition's name (1 to 100 letters, digits, '.', '_' or '-').")
        var name: String?

        func run() throws {
            let client = try self.options.client()
            guard var body = try parseJSON(readFile(self.file), what: self.file).objectValue else {
                printNote("\(self.file) is not a JSON object")
                throw ExitCode(ClientExit.error)
            }
            let named = body["name"]?.stringValue
            body["name"] = nil
            let base = URL(fileURLWithPath: self.file).deletingPathExtension().lastPathComponent
            let name = self.name ?? named ?? (self.file == "-" ? "" : base)
            guard !name.isEmpty else { throw ValidationError("give the definition's name: --name NAME") }
            let (status, stored) = try client.refusable(
                [200, 201],
                "PUT",
                "/v1/definitions/\(escape(name))",
                json: .object(body)
            )
            printJSON(stored)
            let version = stored["version"]?.intValue ?? 0
            let note = status == 201 ? "stored as version \(version)" : "unchanged: version \(version)"
            printNote("\(name) \(note)")
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the definitions (the latest version of each).")

        @OptionGroup var options: ClientOptions

        func run() throws {
            let client = try self.options.client()
            let items = try client.allItems("/v1/definitions", cursor: "cursor", next: "nextCursor")
            printJSON(["items": .array(items)])
        }
    }

    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a definition: its latest version, or --version."
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The definition's name.")
        var name: String

        @Option(help: "The version to print.")
        var version: Int?

        func run() throws {
            let client = try self.options.client()
            let path =
                "/v1/definitions/\(escape(self.name))" + (self.version.map { "/versions/\($0)" } ?? "")
            printJSON(try client.refusable([200], "GET", path).json)
        }
    }

    struct Retire: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Retire a definition: no new starts; its versions and runs stay readable."
        )

        @OptionGroup var options: ClientOptions

        @Argument(help: "The definition's name.")
        var name: String

        func run() throws {
            let client = try self.options.client()
            _ = try client.refusable([204], "DELETE", "/v1/definitions/\(escape(self.name))")
            printNote("\(self.name) retired")
        }
    }
}
