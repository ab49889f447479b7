/// TaskServer's version, from one source: `info.version` of openapi.yaml, which the build compiles
/// into the binary. `taskserver version`, the `User-Agent` of webhooks and `http` tasks, and the
/// served contract therefore never disagree.
public enum TaskServerVersion {
    /// The version, e.g. `1.1.0`.
    public static let current: String = version(inOpenAPI: PackageResources.openapi_yaml) ?? "0.0.0-unknown"

    /// The `version` of the top-level `info` mapping of an OpenAPI document in YAML (nil if none).
    static func version(inOpenAPI yaml: [UInt8]) -> String? {
        var inInfo = false
        for rawLine in yaml.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            let line = String(decoding: rawLine, as: UTF8.self)
            if line.first.map({ $0 != " " && $0 != "#" }) == true { inInfo = line.hasPrefix("info:") }
            guard inInfo, line.hasPrefix("  version:") else { continue }
            var value = line.dropFirst("  version:".count).trimmingSpaces
            if let quote = value.first, quote == "'" || quote == "\"", value.count >= 2, value.last == quote {
                value = value.dropFirst().dropLast()
            }
            return value.isEmpty ? nil : String(value)
        }
        return nil
    }
}
