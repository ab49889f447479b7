import ArgumentParser
import Dispatch
import Foundation
import Logging
import Metrics
import Prometheus
import TaskCore
import TaskServer

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP server.",
        discussion: "Each option can also be set by its environment variable; a flag given on the command line wins."
    )

    @Option(help: "Address to bind (env TASKSERVER_HOST; default 127.0.0.1).")
    var host: String?

    @Option(help: "Port (env TASKSERVER_PORT; default 8080).")
    var port: Int?

    @Option(
        name: .customLong("executor"),
        help: ArgumentHelp(
            "A worker pool NAME=SIZE, with ,rate=N/s or ,rate=N/m (and ,burst=N) to cap how many of its tasks start per period, or NAME=external for a pool of external workers that claim tasks over HTTP; repeatable (env TASKSERVER_EXECUTORS=default=8,io=64,rate=100/s,images=external; default default=8).",
            valueName: "name=size[,rate=N/s]|external"
        )
    )
    var executors: [String] = []

    @Option(
        name: .customLong("api-key"),
        help: "Require Authorization: Bearer KEY on /v1/*; repeatable (env TASKSERVER_API_KEYS, comma-separated)."
    )
    var apiKeys: [String] = []

    @Option(help: "Largest request body in bytes (env TASKSERVER_MAX_BODY_BYTES; default 1048576).")
    var maxBodyBytes: Int?

    @Option(
        help:
            "Most open connections; event streams and long-polls hold one each. Over it, new clients get 503 with Retry-After (env TASKSERVER_MAX_CONNECTIONS; default 4096)."
    )
    var maxConnections: Int?

    @Option(help: "Most nodes per job (env TASKSERVER_MAX_NODES; default 10000).")
    var maxNodes: Int?

    @Option(help: "Default webhook for every job's job.* events (env TASKSERVER_WEBHOOK_URL).")
    var webhookUrl: String?

    @Option(
        help:
            "Signing secret of the default webhook: whsec_<base64>, or any other text used as raw key bytes (env TASKSERVER_WEBHOOK_SECRET; prefer the env var)."
    )
    var webhookSecret: String?

    @Option(
        name: .customLong("outbound-allow"),
        help: ArgumentHelp(
            "Let http tasks and webhooks reach this CIDR range even where built-in rules deny it; repeatable (env TASKSERVER_OUTBOUND_ALLOW, comma-separated).",
            valueName: "cidr"
        )
    )
    var outboundAllow: [String] = []

    @Option(
        name: .customLong("outbound-deny"),
        help: ArgumentHelp(
            "Keep http tasks and webhooks from this CIDR range; repeatable; the most specific range wins (env TASKSERVER_OUTBOUND_DENY, comma-separated).",
            valueName: "cidr"
        )
    )
    var outboundDeny: [String] = []

    @Option(help: "The SQLite file of the durable store (env TASKSERVER_DATA; default ./data/taskserver.sqlite).")
    var data: String?

    @Option(
        help: ArgumentHelp(
            "Keep jobs in this PostgreSQL database instead of SQLite: postgres://user:password@host:5432/db?sslmode=… (env TASKSERVER_DATABASE_URL).",
            valueName: "url"
        )
    )
    var database: String?

    @Option(
        help: ArgumentHelp(
            "Read the database password from this file's first line (env TASKSERVER_DATABASE_PASSWORD_FILE); ~/.pgpass and PGPASSFILE work too.",
            valueName: "path"
        )
    )
    var databasePasswordFile: String?

    @Option(
        help: ArgumentHelp(
            "This server's name among the servers sharing the --database (env TASKSERVER_NODE_NAME; default: the host name). Unique per server, and kept across its restarts: a second server on this host under a name a live one holds is refused.",
            valueName: "name"
        )
    )
    var nodeName: String?

    @Flag(help: "Keep jobs in memory only, nothing on disk (env TASKSERVER_MEMORY=1).")
    var memory = false

    @Option(help: "Delete finished jobs older than this, e.g. 7d, 24h, 30m (env TASKSERVER_RETENTION; default: keep).")
    var retention: String?

    @Option(
        help:
            "full (fsync every commit, default) or normal (survives a crash of the process, not of the machine) (env TASKSERVER_SYNC)."
    )
    var sync: String?

    @Flag(help: "Check the data file's integrity at start-up (env TASKSERVER_CHECK_INTEGRITY=1).")
    var checkIntegrity = false

    @OptionGroup var logging: LoggingOptions

    @Option(
        help:
            "Export traces as OTLP/HTTP (protobuf) to this collector base URL, e.g. http://localhost:4318 (spans go to <URL>/v1/traces); off by default (env OTEL_EXPORTER_OTLP_ENDPOINT; docs/traces.md lists the other OTEL_* variables)."
    )
    var otlpEndpoint: String?

    @Flag(help: "Put tasks' results on their attempt spans, at most 4 KiB each (env TASKSERVER_TRACE_PAYLOADS=1).")
    var tracePayloads = false

    @Option(
        help:
            "On SIGTERM/SIGINT, how long requests in flight may take before connections are closed and the process exits, e.g. 25s, 500ms (env TASKSERVER_SHUTDOWN_GRACE; default 25s)."
    )
    var shutdownGrace: String?

    func run() async throws {
        // An empty variable counts as unset (compose files pass `${X:-}` through as "").
        let environment = ProcessInfo.processInfo.environment.filter { !$0.value.isEmpty }
        let configuration: ServerConfiguration
        let logging: LoggingOptions.Resolved
        do {
            configuration = try self.configuration(environment)
            logging = try self.logging.resolve(environment)
            try configuration.validate()
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("taskserver: invalid configuration: \(error)\n".utf8))
            throw ExitCode(64)
        }
        LoggingSystem.bootstrap { label in logging.handler(label: label) }
        let logger = Logger(label: "taskserver")
        // Each connection is a descriptor: the soft limit goes up to the hard one, and a cap the
        // limit cannot hold is said at once (docs/running.md: Connections and timeouts).
        if let limit = DescriptorLimit.raiseSoftLimit(),
            configuration.maxConnections + DescriptorLimit.reserve > limit
        {
            logger.warning(
                "--max-connections exceeds what the descriptor limit can hold; past it, connections wait in the backlog",
                metadata: [
                    "max_connections": "\(configuration.maxConnections)", "nofile": "\(limit)",
                    "reserve": "\(DescriptorLimit.reserve)",
                ]
            )
        }
        let app: Application
        do {
            app = try Application(configuration: configuration, logger: logger)
        } catch {
            if let database = configuration.database {
                // A setting that does not work (wrong password, unknown host, missing database,
                // a schema newer than this server): a usage error, with the password redacted.
                FileHandle.standardError.write(
                    Data(
                        "taskserver: cannot use --database \(database.redactedURL): \(database.redact("\(error)"))\n"
                            .utf8
                    )
                )
                throw ExitCode(64)
            }
            FileHandle.standardError.write(
                Data("taskserver: cannot open the store at \(configuration.dataPath ?? "?"): \(error)\n".utf8)
            )
            throw ExitCode(66)
        }
        // Anything instrumented with swift-metrics (ours or a dependency's) shows in /metrics.
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: app.metricsRegistry))
        // Signals are caught from before the port is announced: a SIGTERM sent the moment the
        // "listening" line appears must drain the server, not be lost.
        let termination = TerminationSignals(logger: logger)
        let port = try await app.start()
        logger.notice(
            "taskserver listening",
            metadata: [
                "host": "\(configuration.host)", "port": "\(port)",
                "store": "\(configuration.database?.redactedURL ?? configuration.dataPath ?? "memory")",
                "node": "\(app.repository.cluster?.nodeName ?? "-")",
                "executors":
                    "\((configuration.executors.map { "\($0.key)=\($0.value)\(configuration.rates[$0.key].map { ",rate=\($0)" } ?? "")" } + configuration.externalExecutors.map { "\($0)=external" }).sorted().joined(separator: ","))",
            ]
        )
        await termination.wait()
        let grace = configuration.shutdownGrace
        logger.notice("taskserver draining", metadata: ["shutdown.grace": "\(grace)"])
        // The process must be gone by the end of the grace period (the orchestrator's SIGKILL
        // follows soon after): requests get the grace less a reserve for closing connections and
        // flushing the store; should even that hang, the watchdog exits non-zero at the deadline.
        let reserve = min(.seconds(2), grace / 4)
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(grace.wholeNanoseconds))) {
            logger.error("shutdown did not finish within the grace period; exiting")
            Foundation.exit(1)
        }
        await app.shutdown(gracePeriod: grace - reserve)
        logger.notice("taskserver stopped")
    }

    func configuration(_ environment: [String: String]) throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        if let host = self.host ?? environment["TASKSERVER_HOST"] { configuration.host = host }
        if let port = try self.port ?? environment["TASKSERVER_PORT"].map({ try Self.integer($0, "TASKSERVER_PORT") }) {
            configuration.port = port
        }
        var executorSpecs = self.executors
        if executorSpecs.isEmpty, let fromEnvironment = environment["TASKSERVER_EXECUTORS"] {
            executorSpecs = [fromEnvironment]
        }
        if !executorSpecs.isEmpty { try configuration.setExecutors(executorSpecs) }
        configuration.uiDirectory = environment["TASKSERVER_UI_DIR"].flatMap { $0.isEmpty ? nil : $0 }
        configuration.apiKeys = self.apiKeys
        if configuration.apiKeys.isEmpty, let keys = environment["TASKSERVER_API_KEYS"] {
            configuration.apiKeys = keys.split(separator: ",").map(String.init)
        }
        if let value = try self.maxBodyBytes
            ?? environment["TASKSERVER_MAX_BODY_BYTES"].map({ try Self.integer($0, "TASKSERVER_MAX_BODY_BYTES") })
        {
            configuration.maxBodyBytes = value
        }
        if let value = try self.maxConnections
            ?? environment["TASKSERVER_MAX_CONNECTIONS"].map({ try Self.integer($0, "TASKSERVER_MAX_CONNECTIONS") })
        {
            configuration.maxConnections = value
        }
        if let value = try self.maxNodes
            ?? environment["TASKSERVER_MAX_NODES"].map({ try Self.integer($0, "TASKSERVER_MAX_NODES") })
        {
            configuration.maxNodes = value
        }
        let memory = try self.memory || Self.flag(environment["TASKSERVER_MEMORY"], "TASKSERVER_MEMORY")
        let databaseURL = self.database ?? environment["TASKSERVER_DATABASE_URL"]
        if let databaseURL {
            if memory { throw ConfigurationError("--database and --memory exclude each other") }
            if self.data != nil { throw ConfigurationError("--database and --data exclude each other") }
            do {
                configuration.database = try PostgresSettings(
                    url: databaseURL,
                    passwordFile: self.databasePasswordFile ?? environment["TASKSERVER_DATABASE_PASSWORD_FILE"]
                )
            } catch {
                throw ConfigurationError("\(error)")
            }
            if let name = self.nodeName ?? environment["TASKSERVER_NODE_NAME"] {
                guard (1...100).contains(name.utf8.count), name.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
                    throw ConfigurationError("--node-name must be 1 to 100 ASCII characters without spaces")
                }
                configuration.nodeName = name
            }
        } else if self.nodeName != nil {
            // A name among the servers sharing a database; with a store of its own the server has
            // no peers, and a flag that does nothing is a mistake worth saying. (The variable is
            // left alone: an environment shared by several services may set it for all of them.)
            throw ConfigurationError(
                "--node-name names this server among those sharing a --database; give --database too"
            )
        } else if !memory {
            configuration.dataPath = self.data ?? environment["TASKSERVER_DATA"] ?? "./data/taskserver.sqlite"
        }
        if let text = self.retention ?? environment["TASKSERVER_RETENTION"] {
            guard let duration = parseDuration(text) else {
                throw ConfigurationError("--retention must be a duration like 7d, 24h, 30m or 90s, got \"\(text)\"")
            }
            configuration.retention = duration
        }
        if let text = self.sync ?? environment["TASKSERVER_SYNC"] {
            guard text == "full" || text == "normal" else {
                throw ConfigurationError("--sync must be full or normal, got \"\(text)\"")
            }
            configuration.syncFull = text == "full"
        }
        configuration.checkIntegrity =
            try self.checkIntegrity
            || Self.flag(environment["TASKSERVER_CHECK_INTEGRITY"], "TASKSERVER_CHECK_INTEGRITY")
        configuration.webhooks.url = self.webhookUrl ?? environment["TASKSERVER_WEBHOOK_URL"]
        configuration.webhooks.secret = self.webhookSecret ?? environment["TASKSERVER_WEBHOOK_SECRET"]
        configuration.outbound.allow =
            self.outboundAllow.isEmpty ? Self.list(environment["TASKSERVER_OUTBOUND_ALLOW"]) : self.outboundAllow
        configuration.outbound.deny =
            self.outboundDeny.isEmpty ? Self.list(environment["TASKSERVER_OUTBOUND_DENY"]) : self.outboundDeny
        if let text = self.shutdownGrace ?? environment["TASKSERVER_SHUTDOWN_GRACE"] {
            guard let duration = parseDuration(text) else {
                throw ConfigurationError(
                    "--shutdown-grace must be a duration like 25s, 500ms or 1m, got \"\(text.prefix(100))\""
                )
            }
            configuration.shutdownGrace = duration
        }
        configuration.tracing = try TracingConfiguration.resolve(
            endpoint: self.otlpEndpoint,
            includePayloads: try self.tracePayloads
                || Self.flag(environment["TASKSERVER_TRACE_PAYLOADS"], "TASKSERVER_TRACE_PAYLOADS"),
            environment: environment
        )
        return configuration
    }

    /// A boolean environment value; anything but 1/true/yes/on or 0/false/no/off is an error, so
    /// that a typo does not silently turn a setting off.
    static func flag(_ value: String?, _ name: String) throws -> Bool {
        guard let value else { return false }
        switch value.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default:
            throw ConfigurationError(
                "\(name) must be 1, true, yes, on, 0, false, no or off, got \"\(value.prefix(100))\""
            )
        }
    }

    /// A comma-separated environment value as a list (nil or empty: none).
    static func list(_ text: String?) -> [String] {
        text.map { $0.split(separator: ",").map { String($0.trimmingCharacters(in: .whitespaces)) } } ?? []
    }

    static func integer(_ text: String, _ name: String) throws -> Int {
        guard let value = Int(text) else { throw ConfigurationError("\(name) must be an integer, got \"\(text)\"") }
        return value
    }
}

/// SIGTERM and SIGINT, caught from the moment this is made: `wait()` returns once the first has
/// arrived (before or after it was called); a second signal exits at once.
final class TerminationSignals: @unchecked Sendable {
    // @unchecked Sendable: `arrived` and `waiter` are only read and written under `lock`; the
    // signal sources are set once in init and only kept alive.
    private let lock = NSLock()
    private var arrived = false
    private var waiter: CheckedContinuation<Void, Never>?
    private var sources: [any DispatchSourceSignal] = []

    init(logger: Logger) {
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            // A strong capture: the sources and this object live as long as the process.
            source.setEventHandler {
                self.lock.lock()
                let first = !self.arrived
                self.arrived = true
                let waiter = self.waiter
                self.waiter = nil
                self.lock.unlock()
                guard first else {
                    logger.warning("second signal: exiting now")
                    exit(1)
                }
                waiter?.resume()
            }
            source.resume()
            self.sources.append(source)
        }
    }

    /// Returns when the first signal has arrived.
    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            self.lock.lock()
            if self.arrived {
                self.lock.unlock()
                continuation.resume()
                return
            }
            self.waiter = continuation
            self.lock.unlock()
        }
    }
}
