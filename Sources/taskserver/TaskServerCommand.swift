import ArgumentParser
import Dispatch
import Foundation
import Logging
import TaskServer
import TaskServerWorker

@main
struct TaskServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "taskserver",
        abstract: "Runs job graphs over HTTP: series, parallel branches, continuations, fan-outs.",
        discussion: """
            Start the server with `taskserver serve`, then drive it with curl:
              curl -s localhost:8080/v1/jobs -H 'content-type: application/json' \\
                -d '{"graph":{"type":"task","action":"value","params":{"value":42}}}'

            From a terminal: taskserver submit job.json --watch | get ID | events ID --follow | cancel ID | \
            schedules list (server from TASKSERVER_URL, API key from TASKSERVER_API_KEY, https:// verified \
            against the system's certificate authorities or TASKSERVER_CACERT).

            Shell completion: taskserver --generate-completion-script bash (or zsh, fish); the manual \
            page: man taskserver (docs/terminal-client.md says how to install both).

            Run the tasks of an external executor with any command: taskserver worker --executor images -- ./resize.sh

            Every flag of `serve` can also be set through the environment variable shown in its help.
            """,
        version: TaskServerVersion.current,
        subcommands: [
            Serve.self, Submit.self, Get.self, Cancel.self, Redrive.self, Events.self, SchedulesCommand.self,
            DefinitionsCommand.self, Worker.self, Healthcheck.self, Version.self,
        ],
        defaultSubcommand: Serve.self
    )
}

struct Version: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the version.")
    func run() {
        print("taskserver \(TaskServerVersion.current)")
    }
}

struct Healthcheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Exit 0 when the server answers GET /healthz, 1 otherwise (for Docker HEALTHCHECK)."
    )

    @Option(help: "The health URL, or the server's base URL (/healthz is added) (env TASKSERVER_HEALTH_URL).")
    var url: String =
        ProcessInfo.processInfo.environment["TASKSERVER_HEALTH_URL"]
        ?? "http://127.0.0.1:\(ProcessInfo.processInfo.environment["TASKSERVER_PORT"] ?? "8080")/healthz"

    func run() throws {
        guard let (base, path) = Self.serverAndPath(self.url),
            let client = try? ServerClient(server: base, apiKey: nil, caFile: nil),
            let response = try? client.send("GET", path, timeout: .seconds(3)), response.status == 200
        else { throw ExitCode(1) }
    }

    /// The server's base URL and the path to ask: the URL's own path, or `/healthz` when it names
    /// only the server (`http://host:8080`). Nil when `url` is not a URL.
    static func serverAndPath(_ url: String) -> (server: String, path: String)? {
        guard var components = URLComponents(string: url), components.host != nil else { return nil }
        let path = components.path.isEmpty || components.path == "/" ? "/healthz" : components.path
        components.path = ""
        components.query = nil
        guard let server = components.string else { return nil }
        return (server, path)
    }
}
