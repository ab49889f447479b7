import TaskCore

/// Everything `taskserver serve` can be told (SPEC §5). Every field has a safe default.
public struct ServerConfiguration: Sendable {
    /// Address to bind (default `127.0.0.1`: a developer machine is never exposed by accident).
    public var host: String = "127.0.0.1"
    /// Port (default 8080; 0 picks a free one).
    public var port: Int = 8080
    /// Worker pools by name and size (default `default=8`).
    public var executors: [String: Int] = ["default": 8]
    /// External worker pools (`--executor NAME=external`, SPEC §6): their workers are other
    /// processes that claim tasks over HTTP.
    public var externalExecutors: Set<String> = []
    /// Rate limits of in-process pools by name (`--executor io=64,rate=100/s`, SPEC §8).
    public var rates: [String: RateLimit] = [:]
    /// API keys; when any is set, `/v1/*` requires `Authorization: Bearer KEY`.
    public var apiKeys: [String] = []
    /// Largest request body (default 1 MiB).
    public var maxBodyBytes: Int = 1 << 20
    /// Most nodes per job, map instances and dynamic graphs included (default 10,000).
    public var maxNodes: Int = 10_000
    /// Deepest graph nesting (default 100).
    public var maxDepth: Int = 100
    /// Serve the dashboard's files from this directory instead of the copies compiled in (for
    /// working on the dashboard; read at start-up). Env `TASKSERVER_UI_DIR`.
    public var uiDirectory: String?
    /// How often an idle event stream (SSE) gets a keep-alive comment (default 15 s).
    public var streamKeepAlive: Duration = .seconds(15)
    /// Longest long-poll (`waitMs`, default and cap 60,000).
    public var maxWaitMs: Int = 60_000
    /// Largest page of `GET /v1/jobs` (default 1,000).
    public var maxListLimit: Int = 1000
    /// Most concurrent connections (default 4,096).
    public var maxConnections: Int = 4096
    /// How long the HTTP layer waits for a request's head, body and the next request on a
    /// keep-alive connection (`HTTPLimits`' defaults: 10, 30 and 60 s). Not a command-line setting:
    /// tests under ThreadSanitizer lengthen them, since a server there can take longer than 10 s to
    /// read a head that has long arrived.
    var httpTimeouts = (
        head: HTTPLimits().requestHeadTimeout,
        body: HTTPLimits().requestBodyTimeout,
        idle: HTTPLimits().idleTimeout
    )
    /// The SQLite file of the durable store (`--data`); nil keeps jobs in memory (`--memory`).
    /// `taskserver serve` defaults to `./data/taskserver.sqlite`; tests default to memory.
    public var dataPath: String?
    /// The PostgreSQL database of the store (`--database`); when set, it replaces `dataPath`.
    public var database: PostgresSettings?
    /// This server's name among the servers sharing `database` (`--node-name`; nil: the host name).
    public var nodeName: String?
    /// Finished jobs older than this are deleted in the background (`--retention`; nil keeps them).
    public var retention: Duration?
    /// How delayed jobs are held and started (the horizon of jobs held live, and so on); tests
    /// shorten it.
    public var delayedStarts = DelayedStarts.Options()
    /// `true`: every store commit is fsynced (`--sync full`, default); `false`: `--sync normal`.
    public var syncFull = true
    /// Check the data file's integrity when opening it (`--check-integrity`).
    public var checkIntegrity = false
    /// The server-wide default webhook and the delivery limits.
    public var webhooks = Webhooks()
    /// Outbound requests (`http` tasks and webhooks): address policy and client limits.
    public var outbound = Outbound()
    /// Traces (issue #46): nil, the default, exports none.
    public var tracing: TracingConfiguration?
    /// How long a stopping server lets requests in flight (long-polls included) finish before it
    /// closes their connections, flushes the store and exits (`--shutdown-grace`, default 25 s:
    /// under the 30 s that Kubernetes and `stop_grace_period` in Docker/compose.yaml allow).
    public var shutdownGrace: Duration = .seconds(25)

    public init() {}

    /// Webhook settings (SPEC §4).
    public struct Webhooks: Sendable {
        /// Default webhook for every job's `job.*` events (`--webhook-url`; default none).
        public var url: String?
        /// Its signing secret, `whsec_<base64>` or raw text (`--webhook-secret`; default none: unsigned).
        public var secret: String?
        /// How long a receiver has to answer an attempt (default 10 s).
        public var attemptTimeout: Duration = .seconds(10)
        /// Most attempts in flight per endpoint (default 16) and in all (default 128).
        public var maxConcurrentPerEndpoint: Int = 16
        public var maxConcurrent: Int = 128

        public init() {}
    }

    /// Outbound request settings.
    public struct Outbound: Sendable {
        /// CIDR ranges that outbound requests may reach even if built-in rules deny them (`--outbound-allow`).
        public var allow: [String] = []
        /// CIDR ranges that outbound requests may not reach (`--outbound-deny`).
        public var deny: [String] = []
        /// Most transfers in progress at once (default 256; more wait in FIFO order).
        public var maxConcurrentTransfers: Int = 256
        /// Largest response body an `http` task accepts (default 4 MiB).
        public var maxResponseBytes: Int = 4 << 20

        public init() {}

        /// The address policy these settings describe (invalid ranges are skipped; `validate` reports them).
        public var policy: AddressPolicy {
            AddressPolicy(allow: self.allow.compactMap { CIDR($0) }, deny: self.deny.compactMap { CIDR($0) })
        }
    }

    /// Checks the values; the message names the setting and why it is wrong.
    /// Whether `key` is an RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
    /// "/" ) *"="`.
    static func isBearerToken(_ key: String) -> Bool {
        let bytes = Array(key.utf8)
        let body = bytes.prefix { $0 != UInt8(ascii: "=") }
        guard !body.isEmpty, bytes.dropFirst(body.count).allSatisfy({ $0 == UInt8(ascii: "=") }) else { return false }
        return body.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return "-._~+/".utf8.contains(byte)
            }
        }
    }

    /// Reads `--executor` values (or `TASKSERVER_EXECUTORS`, comma-separated): `NAME=SIZE`,
    /// `NAME=external`, and for an in-process pool `,rate=N/s` or `,rate=N/m` with an optional
    /// `,burst=N` (default a tenth of N, at least 1). In the environment variable, `rate=` and
    /// `burst=` items belong to the pool before them.
    public mutating func setExecutors(_ specs: [String]) throws(ConfigurationError) {
        var groups: [[Substring]] = []
        for spec in specs {
            for item in spec.split(separator: ",", omittingEmptySubsequences: false) {
                if item.hasPrefix("rate=") || item.hasPrefix("burst="), !groups.isEmpty {
                    groups[groups.count - 1].append(item)
                } else {
                    groups.append([item])
                }
            }
        }
        var executors: [String: Int] = ["default": 8]
        var external: Set<String> = []
        var rates: [String: RateLimit] = [:]
        for group in groups {
            let spec = group.joined(separator: ",")
            let parts = group[0].split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else {
                throw ConfigurationError(
                    "--executor must be NAME=SIZE[,rate=N/s][,burst=N] or NAME=external, got \"\(spec)\""
                )
            }
            let name = String(parts[0])
            if parts[1] == "external" {
                guard group.count == 1 else {
                    throw ConfigurationError(
                        "--executor \(spec): rate limits apply to in-process pools; an external pool's workers set their own pace"
                    )
                }
                external.insert(name)
                continue
            }
            guard let size = Int(parts[1]) else {
                throw ConfigurationError(
                    "--executor must be NAME=SIZE[,rate=N/s][,burst=N] or NAME=external, got \"\(spec)\""
                )
            }
            executors[name] = size
            var rate: (count: Int, period: Duration)?
            var burst: Int?
            for option in group.dropFirst() {
                if option.hasPrefix("rate=") {
                    guard rate == nil else { throw ConfigurationError("--executor \(spec): rate= is given twice") }
                    rate = try Self.rate(option.dropFirst(5), spec: spec)
                } else {
                    guard burst == nil else { throw ConfigurationError("--executor \(spec): burst= is given twice") }
                    guard let value = Int(option.dropFirst(6)), value >= 1 else {
                        throw ConfigurationError("--executor \(spec): burst must be a positive integer")
                    }
                    burst = value
                }
            }
            if let burst, rate == nil {
                throw ConfigurationError("--executor \(spec): burst=\(burst) needs a rate=N/s or rate=N/m")
            }
            if let rate {
                if let burst, burst > rate.count {
                    throw ConfigurationError(
                        "--executor \(spec): burst must be from 1 to the rate's count (\(rate.count))"
                    )
                }
                rates[name] = RateLimit(count: rate.count, period: rate.period, burst: burst)
            }
        }
        self.executors = executors
        self.externalExecutors = external
        self.rates = rates
    }

    /// The most a rate may allow per second (a million: beyond that a limit limits nothing).
    public static let maxRatePerSecond = 1_000_000

    private static func rate(
        _ text: Substring,
        spec: String
    ) throws(ConfigurationError) -> (count: Int, period: Duration) {
        let parts = text.split(separator: "/", maxSplits: 1)
        let period: Duration? =
            parts.count == 2 ? (parts[1] == "s" ? .seconds(1) : parts[1] == "m" ? .seconds(60) : nil) : nil
        guard let period, let count = Int(parts[0]), count >= 1,
            count <= Self.maxRatePerSecond * (period == .seconds(60) ? 60 : 1)
        else {
            throw ConfigurationError(
                "--executor \(spec): rate must be N/s or N/m with N from 1 to \(Self.maxRatePerSecond) per second, such as rate=100/s"
            )
        }
        return (count, period)
    }

    public func validate() throws(ConfigurationError) {
        guard (0...65535).contains(self.port) else {
            throw ConfigurationError("--port must be from 0 to 65535, got \(self.port)")
        }
        guard !self.host.isEmpty else { throw ConfigurationError("--host must not be empty") }
        for name in self.externalExecutors {
            guard self.executors[name] == nil else {
                throw ConfigurationError("--executor \(name): configured both in-process and external")
            }
            guard name != "default" else {
                throw ConfigurationError(
                    "--executor default=external: the default pool runs built-ins; name the external pool"
                )
            }
        }
        for (name, size) in self.executors.merging(
            self.externalExecutors.map { ($0, 1) },
            uniquingKeysWith: { a, _ in a }
        ) {
            guard !name.isEmpty,
                name.utf8.allSatisfy({
                    $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || (0x30...0x39).contains($0)
                        || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
                })
            else {
                throw ConfigurationError("--executor: the name \"\(name)\" may only use letters, digits, - and _")
            }
            guard name != "immediate" else {
                throw ConfigurationError("--executor: \"immediate\" is built in and cannot be configured")
            }
            guard (1...4096).contains(size) else {
                throw ConfigurationError("--executor \(name)=\(size): the size must be from 1 to 4096")
            }
        }
        for name in self.rates.keys where self.executors[name] == nil {
            throw ConfigurationError("--executor \(name): a rate limit needs an in-process pool of that name")
        }
        guard (1...1_048_576).contains(self.maxConnections) else {
            throw ConfigurationError("--max-connections must be from 1 to 1048576, got \(self.maxConnections)")
        }
        guard (1024...(1 << 30)).contains(self.maxBodyBytes) else {
            throw ConfigurationError("--max-body-bytes must be from 1024 to 1073741824")
        }
        guard (1...10_000_000).contains(self.maxNodes) else {
            throw ConfigurationError("--max-nodes must be from 1 to 10000000")
        }
        if let dataPath, dataPath.isEmpty { throw ConfigurationError("--data must name a file") }
        if let retention, retention < .seconds(1) { throw ConfigurationError("--retention must be at least 1s") }
        for key in self.apiKeys {
            if key.utf8.count < 16 { throw ConfigurationError("--api-key: keys must be at least 16 characters long") }
            // What an `Authorization: Bearer` header can carry (RFC 6750 b64token); a key with a
            // space or a control character could never be sent, and the API would be locked.
            // The message never quotes the key.
            if !Self.isBearerToken(key) {
                throw ConfigurationError(
                    "--api-key: a key may hold only letters, digits and - . _ ~ + /, then = padding (RFC 6750), as an Authorization: Bearer header carries it"
                )
            }
        }
        if let url = self.webhooks.url, url.utf8.count > 2048 || !HTTPSyntax.isHTTPURL(url) {
            throw ConfigurationError(
                "--webhook-url must be an absolute http or https URL with a host, got \"\(url.prefix(200))\""
            )
        }
        if let secret = self.webhooks.secret {
            guard self.webhooks.url != nil else { throw ConfigurationError("--webhook-secret needs --webhook-url") }
            // The message never quotes the secret itself.
            if let problem = WebhookSignature.secretProblem(secret) {
                throw ConfigurationError("--webhook-secret: \(problem)")
            }
        }
        for (flag, ranges) in [("--outbound-allow", self.outbound.allow), ("--outbound-deny", self.outbound.deny)] {
            for range in ranges where CIDR(range) == nil {
                throw ConfigurationError(
                    "\(flag): \"\(range.prefix(100))\" is not an IP range; use CIDR notation such as 10.0.0.0/8, fd00::/8 or 192.0.2.7"
                )
            }
        }
        guard self.shutdownGrace >= .zero, self.shutdownGrace <= .seconds(3600) else {
            throw ConfigurationError("--shutdown-grace must be from 0s to 1h")
        }
        guard self.outbound.maxConcurrentTransfers >= 1, self.outbound.maxResponseBytes >= 1,
            self.webhooks.maxConcurrent >= 1, self.webhooks.maxConcurrentPerEndpoint >= 1
        else { throw ConfigurationError("outbound and webhook limits must be at least 1") }
    }
}

/// An invalid setting, with a message that names it.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Parses durations such as `90s`, `15m`, `24h`, `7d` or `500ms` (`--retention`, `--shutdown-grace`).
public func parseDuration(_ text: String) -> Duration? {
    let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
    for (suffix, factor) in units where text.hasSuffix(suffix) {
        let number = text.dropLast(suffix.count)
        // "ms" must not be read as "m" + "s": try the longer suffix first (it comes first above).
        guard let value = Int64(number), value >= 0, value <= Int64.max / factor / 1000 else { continue }
        return .milliseconds(value * factor)
    }
    return nil
}
