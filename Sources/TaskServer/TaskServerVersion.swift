import TaskGraph

/// TaskServer's version, from one source: `info.version` of the API contract, which the build
/// compiles into the binary (read from openapi.json, the generated JSON twin of openapi.yaml).
/// `taskserver version`, the `User-Agent` of webhooks and `http` tasks, and the served contract
/// therefore never disagree.
public enum TaskServerVersion {
    /// The version, e.g. `1.1.0`.
    public static let current: String = version(inOpenAPI: PackageResources.openapi_json) ?? "0.0.0-unknown"

    /// The `version` of the top-level `info` object of an OpenAPI document in JSON (nil if none).
    static func version(inOpenAPI json: [UInt8]) -> String? {
        guard let document = try? JSONParser.parse(json) else { return nil }
        return document["info"]?["version"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
    }
}
