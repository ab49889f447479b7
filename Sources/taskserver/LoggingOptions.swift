import ArgumentParser
import Foundation
import Logging
import TaskServer

/// `--log-level` and `--log-format`, the same for `serve` and `worker` (and their environment
/// variables, `TASKSERVER_LOG_LEVEL` and `TASKSERVER_LOG_FORMAT`). Logs go to standard error.
struct LoggingOptions: ParsableArguments {
    @Option(help: "trace, debug, info, notice, warning, error or critical (env TASKSERVER_LOG_LEVEL; default info).")
    var logLevel: String?

    @Option(help: "text or json (env TASKSERVER_LOG_FORMAT; default text).")
    var logFormat: String?

    /// The options checked, with the environment's values for those not given.
    struct Resolved: Sendable {
        let level: Logger.Level
        let json: Bool

        /// A handler at the level, in the format, writing to standard error.
        func handler(label: String) -> any LogHandler {
            var handler: any LogHandler =
                self.json ? JSONLogHandler(label: label) : StreamLogHandler.standardError(label: label)
            handler.logLevel = self.level
            return handler
        }
    }

    func resolve(_ environment: [String: String]) throws(ConfigurationError) -> Resolved {
        let levelText = self.logLevel ?? environment["TASKSERVER_LOG_LEVEL"] ?? "info"
        guard let level = Logger.Level(rawValue: levelText) else {
            throw ConfigurationError(
                "--log-level must be trace, debug, info, notice, warning, error or critical, got \(levelText.prefix(100))"
            )
        }
        let format = self.logFormat ?? environment["TASKSERVER_LOG_FORMAT"] ?? "text"
        guard format == "text" || format == "json" else {
            throw ConfigurationError("--log-format must be text or json, got \(format.prefix(100))")
        }
        return Resolved(level: level, json: format == "json")
    }
}

/// One JSON object per line: `{"time","level","label","message", …metadata}`; secrets are never
/// put in metadata by the server.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var object: [String: String] = [:]
        for (key, value) in self.metadata { object[key] = "\(value)" }
        for (key, value) in event.metadata ?? [:] { object[key] = "\(value)" }
        object["time"] = ISO8601DateFormatter().string(from: Date())
        object["level"] = event.level.rawValue
        object["label"] = self.label
        object["message"] = "\(event.message)"
        if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
            FileHandle.standardError.write(data + Data("\n".utf8))
        }
    }
}
