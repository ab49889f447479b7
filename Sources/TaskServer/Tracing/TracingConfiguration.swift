/// Where spans go and which traces are recorded (issue #46), from `--otlp-endpoint` and the
/// OpenTelemetry SDK's standard environment variables.
///
/// | variable | meaning | default |
/// |---|---|---|
/// | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector's base URL; spans go to `<base>/v1/traces` | — (tracing off) |
/// | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the full URL of traces, instead | — |
/// | `OTEL_EXPORTER_OTLP_HEADERS`, `…_TRACES_HEADERS` | `key=value,…` sent with each export | none |
/// | `OTEL_EXPORTER_OTLP_TIMEOUT`, `…_TRACES_TIMEOUT` | one export's limit, ms | 10000 |
/// | `OTEL_SERVICE_NAME` | `service.name` | `taskserver` |
/// | `OTEL_RESOURCE_ATTRIBUTES` | `key=value,…` on every span's resource | none |
/// | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | see `Sampler` | `parentbased_always_on` |
/// | `OTEL_BSP_MAX_QUEUE_SIZE` | spans held for export; more are dropped and counted | 2048 |
/// | `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | spans per export | 512 |
/// | `OTEL_BSP_SCHEDULE_DELAY` | longest wait before a partial batch goes, ms | 5000 |
/// | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | tracing off | — |
///
/// Only OTLP over HTTP with protobuf bodies is spoken (`OTEL_EXPORTER_OTLP_PROTOCOL` other than
/// `http/protobuf` is refused at start-up rather than ignored).
public struct TracingConfiguration: Sendable {
    /// The URL spans are POSTed to (`…/v1/traces`).
    public var tracesURL: String
    /// Headers sent with every export (an API key of a hosted backend): never logged.
    public var headers: [(name: String, value: String)] = []
    public var exportTimeout: Duration = .seconds(10)
    public var serviceName = "taskserver"
    /// The resource's attributes besides `service.name` and `service.version`.
    public var resourceAttributes: [(key: String, value: String)] = []
    public var sampler = Sampler.parentBased(root: .alwaysOn)
    public var maxQueueSize = 2048
    public var maxBatchSize = 512
    public var scheduleDelay: Duration = .seconds(5)
    /// Whether attempt spans carry the task's input and result (`--trace-payloads`; off: they
    /// are users' data, which no span carries by default).
    public var includePayloads = false

    public init(tracesURL: String) {
        self.tracesURL = tracesURL
    }

    /// The configuration `environment` and the flags describe; nil when tracing is off (no
    /// endpoint, or the SDK disabled).
    public static func resolve(
        endpoint flag: String?,
        includePayloads: Bool,
        environment: [String: String]
    ) throws(ConfigurationError) -> TracingConfiguration? {
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return nil }
        if let exporter = environment["OTEL_TRACES_EXPORTER"]?.lowercased() {
            if exporter == "none" { return nil }
            guard exporter == "otlp" else {
                throw ConfigurationError("OTEL_TRACES_EXPORTER=\(exporter): only otlp (or none) is supported")
            }
        }
        let url: String
        if let flag {
            url = Self.tracesURL(base: flag)
        } else if let full = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] {
            url = full
        } else if let base = environment["OTEL_EXPORTER_OTLP_ENDPOINT"] {
            url = Self.tracesURL(base: base)
        } else {
            return nil
        }
        guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
            throw ConfigurationError("the OTLP endpoint must be an http:// or https:// URL")
        }
        let protocolName =
            environment["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] ?? environment["OTEL_EXPORTER_OTLP_PROTOCOL"]
        if let protocolName, protocolName != "http/protobuf" {
            throw ConfigurationError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=\(protocolName): TaskServer exports OTLP as http/protobuf only"
            )
        }
        var configuration = TracingConfiguration(tracesURL: url)
        configuration.includePayloads = includePayloads
        if let headers = environment["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] ?? environment["OTEL_EXPORTER_OTLP_HEADERS"] {
            configuration.headers = try Self.pairs(headers, "OTEL_EXPORTER_OTLP_HEADERS").map { ($0.key, $0.value) }
        }
        if let timeout = environment["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"] ?? environment["OTEL_EXPORTER_OTLP_TIMEOUT"] {
            configuration.exportTimeout = .milliseconds(
                try Self.integer(timeout, "OTEL_EXPORTER_OTLP_TIMEOUT", 1...600_000)
            )
        }
        if let name = environment["OTEL_SERVICE_NAME"] { configuration.serviceName = name }
        if let attributes = environment["OTEL_RESOURCE_ATTRIBUTES"] {
            configuration.resourceAttributes = try Self.pairs(attributes, "OTEL_RESOURCE_ATTRIBUTES")
            // OTEL_SERVICE_NAME wins over a service.name among the attributes, as the SDKs have it.
            if environment["OTEL_SERVICE_NAME"] == nil,
                let name = configuration.resourceAttributes.last(where: { $0.key == "service.name" })?.value
            {
                configuration.serviceName = name
            }
            configuration.resourceAttributes.removeAll { $0.key == "service.name" }
        }
        configuration.sampler = try Sampler(
            name: environment["OTEL_TRACES_SAMPLER"],
            argument: environment["OTEL_TRACES_SAMPLER_ARG"]
        )
        if let size = environment["OTEL_BSP_MAX_QUEUE_SIZE"] {
            configuration.maxQueueSize = try Self.integer(size, "OTEL_BSP_MAX_QUEUE_SIZE", 1...1_000_000)
        }
        if let size = environment["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] {
            configuration.maxBatchSize = try Self.integer(size, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1...100_000)
        }
        configuration.maxBatchSize = min(configuration.maxBatchSize, configuration.maxQueueSize)
        if let delay = environment["OTEL_BSP_SCHEDULE_DELAY"] {
            configuration.scheduleDelay = .milliseconds(try Self.integer(delay, "OTEL_BSP_SCHEDULE_DELAY", 1...600_000))
        }
        return configuration
    }

    /// `<base>/v1/traces`, as the OTLP exporter specification builds it from the base endpoint.
    static func tracesURL(base: String) -> String {
        base.hasSuffix("/") ? base + "v1/traces" : base + "/v1/traces"
    }

    /// `key=value,…` (W3C Baggage-like, values percent-decoded) as the OTel variables write them.
    static func pairs(_ text: String, _ name: String) throws(ConfigurationError) -> [(key: String, value: String)] {
        var pairs: [(key: String, value: String)] = []
        for item in text.split(separator: ",") {
            let parts = item.split(separator: "=", maxSplits: 1)
            let key = parts.first.map { String($0.trimmingSpaces) } ?? ""
            guard parts.count == 2, !key.isEmpty else {
                // The value may be a secret (an API key header): never echoed.
                throw ConfigurationError("\(name) must be key=value pairs separated by commas")
            }
            let raw = String(parts[1].trimmingSpaces)
            let value = percentDecode(Substring(raw)) ?? raw
            pairs.append((key, value))
        }
        return pairs
    }

    static func integer(_ text: String, _ name: String, _ range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError("\(name) must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}

/// Which new traces are recorded: OpenTelemetry's samplers, by their `OTEL_TRACES_SAMPLER` names.
///
/// `always_on`, `always_off`, `traceidratio` (with `OTEL_TRACES_SAMPLER_ARG` a ratio from 0 to 1,
/// default 1), and each of them `parentbased_…` (the default, `parentbased_always_on`): a request
/// that carries a `traceparent` is recorded exactly when its caller's was (its sampled flag), and
/// the root sampler decides only for traces that start here. The ratio decision is made from the
/// trace id (its low 63 bits below ratio × 2⁶³), so every server of a cluster decides alike.
public indirect enum Sampler: Sendable, Equatable {
    case alwaysOn
    case alwaysOff
    case ratio(Double)
    case parentBased(root: Sampler)

    init(name: String?, argument: String?) throws(ConfigurationError) {
        func ratio() throws(ConfigurationError) -> Double {
            guard let argument else { return 1 }
            guard let value = Double(argument), (0...1).contains(value) else {
                throw ConfigurationError("OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1")
            }
            return value
        }
        switch name?.lowercased() ?? "parentbased_always_on" {
        case "always_on": self = .alwaysOn
        case "always_off": self = .alwaysOff
        case "traceidratio": self = .ratio(try ratio())
        case "parentbased_always_on": self = .parentBased(root: .alwaysOn)
        case "parentbased_always_off": self = .parentBased(root: .alwaysOff)
        case "parentbased_traceidratio": self = .parentBased(root: .ratio(try ratio()))
        case let other:
            throw ConfigurationError(
                "OTEL_TRACES_SAMPLER=\(other): use always_on, always_off, traceidratio or parentbased_ with one of them"
            )
        }
    }

    /// Whether a span of trace `traceID` whose parent is `parentSampled` (nil: a root) is recorded.
    func samples(_ traceID: TraceID, parentSampled: Bool?) -> Bool {
        switch self {
        case .alwaysOn: return true
        case .alwaysOff: return false
        case .ratio(let ratio):
            if ratio >= 1 { return true }
            if ratio <= 0 { return false }
            return Double(traceID.low & 0x7fff_ffff_ffff_ffff) < ratio * 0x1p63
        case .parentBased(let root):
            if let parentSampled { return parentSampled }
            return root.samples(traceID, parentSampled: nil)
        }
    }
}
