import TaskGraph

/// Everything `taskserver serve` can be told (SPEC §5). Every field has a safe default.
public struct ServerConfiguration: Sendable {
    /// Address to bind (default `127.0.0.1`: a developer machine is never exposed by accident).
    public var host: String = "127.0.0.1"
    /// Port (default 8080; 0 picks a free one).
    public var port: Int = 8080
    /// Worker pools by name and size (default `default=8`).
    public var executors: [String: Int] = ["default": 8]
    /// API keys; when any is set, `/v1/*` requires `Authorization: Bearer KEY`.
    public var apiKeys: [String] = []
    /// Largest request body (default 1 MiB).
    public var maxBodyBytes: Int = 1 << 20
    /// Most nodes per job, map instances and dynamic graphs included (default 10,000).
    public var maxNodes: Int = 10_000
    /// Deepest graph nesting (default 100).
    public var maxDepth: Int = 100
    /// Longest long-poll (`waitMs`, default and cap 60,000).
    public var maxWaitMs: Int = 60_000
    /// Largest page of `GET /v1/jobs` (default 1,000).
    public var maxListLimit: Int = 1000
    /// Most concurrent connections (default 4,096).
    public var maxConnections: Int = 4096
    /// The SQLite file of the durable store (`--data`); nil keeps jobs in memory (`--memory`).
    /// `taskserver serve` defaults to `./data/taskserver.sqlite`; tests default to memory.
    public var dataPath: String?
    /// Finished jobs older than this are deleted in the background (`--retention`; nil keeps them).
    public var retention: Duration?
    /// `true`: every store commit is fsynced (`--sync full`, default); `false`: `--sync normal`.
    public var syncFull = true
    /// Check the data file's integrity when opening it (`--check-integrity`).
    public var checkIntegrity = false

    public init() {}

    /// Checks the values; the message names the setting and why it is wrong.
    public func validate() throws(ConfigurationError) {
        guard (0...65535).contains(self.port) else { throw ConfigurationError("--port must be from 0 to 65535, got \(self.port)") }
        guard !self.host.isEmpty else { throw ConfigurationError("--host must not be empty") }
        for (name, size) in self.executors {
            guard !name.isEmpty, name.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else {
                throw ConfigurationError("--executor: the name \"\(name)\" may only use letters, digits, - and _")
            }
            guard name != "immediate" else { throw ConfigurationError("--executor: \"immediate\" is built in and cannot be configured") }
            guard (1...4096).contains(size) else { throw ConfigurationError("--executor \(name)=\(size): the size must be from 1 to 4096") }
        }
        guard (1024...(1 << 30)).contains(self.maxBodyBytes) else { throw ConfigurationError("--max-body-bytes must be from 1024 to 1073741824") }
        guard (1...10_000_000).contains(self.maxNodes) else { throw ConfigurationError("--max-nodes must be from 1 to 10000000") }
        if let dataPath, dataPath.isEmpty { throw ConfigurationError("--data must name a file") }
        if let retention, retention < .seconds(1) { throw ConfigurationError("--retention must be at least 1s") }
        for key in self.apiKeys where key.utf8.count < 16 {
            throw ConfigurationError("--api-key: keys must be at least 16 characters long")
        }
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
