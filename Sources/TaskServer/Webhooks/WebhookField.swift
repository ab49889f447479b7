import TaskGraph

// The job's `webhook` (SPEC §4), which TaskGraph's `JobDecoder` decodes through the `JobField` hook
// that the server's engine is given (see `Application`).
//
// Choices where the spec is silent (also described in `openapi.yaml`):
// - A webhook `secret` starting with `whsec_` must continue with standard base64 (padding optional)
//   that decodes to 1…64 bytes (the Standard Webhooks form); any other non-empty string of at most
//   256 characters is used as raw key bytes. Webhook `events` entries are event types of §3.4 or
//   patterns ending in `*` that match at least one of them (`job.*`, `task.*`, `*`). The webhook
//   `retry` object also accepts `jitter` (a boolean, default true).

/// Decodes a job's `webhook` object into a `WebhookSpec`, read back as `JobSpec.webhook`.
public struct WebhookField: JobField {
    static let fields = ["url", "secret", "events", "headers", "retry"]
    static let eventTypes = [
        "job.created", "job.started", "job.succeeded", "job.failed", "job.cancelled",
        "task.started", "task.succeeded", "task.failed", "task.cancelled", "task.skipped", "task.retrying",
    ]
    static let reservedHeaders: Set<String> = [
        "webhook-id", "webhook-timestamp", "webhook-signature", "content-type", "content-length", "host",
    ]

    /// The field, to give the engine's decoder (`EngineConfiguration.jobFields`).
    public init() {}

    /// `webhook`.
    public var name: String { "webhook" }

    /// Decodes and validates a job's `webhook` object at `pointer` (`/webhook`).
    ///
    /// - Throws: a `ValidationError` with every problem found, each at the pointer of the offending value.
    public func decode(_ value: JSONValue, at pointer: String) throws(ValidationError) -> WebhookSpec {
        var problems = ProblemList()
        let spec = problems.decodeWebhook(value, at: pointer)
        if let error = problems.error { throw error }
        guard let spec else { throw ValidationError([ValidationProblem(pointer: pointer, message: "invalid")]) }
        return spec
    }

    /// Whether `text` is an event type of SPEC §3.4 or a `*`-suffixed pattern matching at least one.
    static func isEventPattern(_ text: String) -> Bool {
        if WebhookField.eventTypes.contains(text) { return true }
        guard text.hasSuffix("*") else { return false }
        let prefix = text.dropLast()
        guard !prefix.contains("*") else { return false }
        return WebhookField.eventTypes.contains { $0.hasPrefix(prefix) }
    }
}

extension JobSpec {
    /// The job's own `webhook`, if it has one (decoded by `WebhookField`).
    public var webhook: WebhookSpec? { self.fields[WebhookField.self] }
}

extension JobDecoder.RetryRules {
    /// A webhook's `retry`: its own defaults, a first delay of at most an hour, and no `on`.
    static let webhook = JobDecoder.RetryRules(
        defaults: WebhookSpec(url: "").retry,
        delayMsLimit: 3_600_000,
        allowsErrorCodes: false
    )
}

extension ProblemReporter {
    /// The job's `webhook` (SPEC §4).
    mutating func decodeWebhook(_ value: JSONValue, at pointer: String) -> WebhookSpec? {
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object")
            return nil
        }
        let before = self.problemCount
        var spec = WebhookSpec(url: "")
        var sawURL = false
        var unknown = false
        for member in object.members {
            switch member.key {
            case "url", "secret", "events", "headers", "retry": break
            default: unknown = true
            }
        }
        if unknown {
            self.reportUnknownFields(
                object,
                at: pointer,
                known: WebhookField.fields,
                isKnown: { WebhookField.fields.contains($0) }
            )
        }
        if let url = object["url"] {
            sawURL = true
            if case .string(let text) = url {
                if text.utf8.count > 2048 {
                    self.report(pointer, "url", "must be at most 2048 characters")
                } else if !HTTPSyntax.isHTTPURL(text) {
                    self.report(pointer, "url", "must be an absolute http or https URL with a host")
                }
                spec.url = text
            } else {
                self.report(pointer, "url", "must be a string")
            }
        }
        if !sawURL { self.report(pointer, "url", "required") }

        if let secret = object["secret"] {
            if case .string(let text) = secret {
                if let problem = WebhookSignature.secretProblem(text) { self.report(pointer, "secret", problem) }
                spec.secret = text
            } else {
                self.report(pointer, "secret", "must be a string")
            }
        }

        if let events = object["events"] {
            if case .array(let items) = events {
                if items.isEmpty { self.report(pointer, "events", "must not be empty") }
                var patterns: [String] = []
                for (index, item) in items.enumerated() {
                    guard case .string(let text) = item else {
                        self.report(pointer: pointer + "/events/" + String(index), "must be a string")
                        continue
                    }
                    if !WebhookField.isEventPattern(text) {
                        self.report(
                            pointer: pointer + "/events/" + String(index),
                            "unknown event type \(TemplateExpression.quoted(text)); expected one of "
                                + WebhookField.eventTypes.joined(separator: ", ") + ", or a pattern such as \"job.*\""
                        )
                    }
                    patterns.append(text)
                }
                spec.events = patterns
            } else {
                self.report(pointer, "events", "must be an array of event types")
            }
        }

        if let headers = object["headers"] {
            if case .object(let members) = headers {
                var seen: [String: String] = [:]
                for member in members {
                    let name = member.key
                    let headerPointer = { pointer + "/headers/" + JSONValue.escapePointerToken(name) }
                    guard HTTPSyntax.isHeaderName(name) else {
                        self.report(
                            pointer: headerPointer(),
                            "invalid header name \(TemplateExpression.quoted(name)): use letters, digits and !#$%&'*+-.^_`|~"
                        )
                        continue
                    }
                    let lower = name.lowercasedASCII
                    if WebhookField.reservedHeaders.contains(lower) {
                        self.report(
                            pointer: headerPointer(),
                            "header \(TemplateExpression.quoted(name)) is set by the server and cannot be overridden"
                        )
                        continue
                    }
                    if let first = seen[lower] {
                        self.report(
                            pointer: headerPointer(),
                            "duplicate header \(TemplateExpression.quoted(name)) (header names are case-insensitive; first given as \(TemplateExpression.quoted(first)))"
                        )
                        continue
                    }
                    seen[lower] = name
                    guard case .string(let text) = member.value else {
                        self.report(pointer: headerPointer(), "must be a string")
                        continue
                    }
                    if text.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
                        self.report(pointer: headerPointer(), "must not contain CR, LF or NUL")
                        continue
                    }
                    spec.headers[name] = text
                }
            } else {
                self.report(pointer, "headers", "must be an object")
            }
        }

        if let retry = object["retry"] {
            if let decoded = self.decodeRetry(retry, at: pointer + "/retry", rules: .webhook) { spec.retry = decoded }
        }
        return self.problemCount == before ? spec : nil
    }
}
