/// Where decoding checks report what they find: a whole decoding run (`DecodeState`, which keeps
/// the first `JobDecoder.maxProblems`) or the check of one value (`ProblemList`, which keeps all).
///
/// The checks in the extension below are shared, so that what is decoded outside TaskGraph (the
/// server's `webhook`) reports in the decoder's own words.
package protocol ProblemReporter {
    /// Every problem reported so far, also those that were not kept.
    var problemCount: Int { get }

    /// Records a problem at `pointer`; pointer and message are only rendered when kept.
    mutating func report(pointer: @autoclosure () -> String, _ message: @autoclosure () -> String)
}

/// Every problem reported, in order.
package struct ProblemList: ProblemReporter {
    /// The first problems found, rendered: at most `JobDecoder.maxProblems`, as the decoder keeps.
    package private(set) var problems: [ValidationProblem] = []
    /// Problems found past that cap, counted but never rendered.
    package private(set) var unreported = 0

    package init() {}

    package var problemCount: Int { self.problems.count + self.unreported }

    package mutating func report(pointer: @autoclosure () -> String, _ message: @autoclosure () -> String) {
        guard self.problems.count < JobDecoder.maxProblems else {
            self.unreported += 1
            return
        }
        self.problems.append(ValidationProblem(pointer: pointer(), message: message()))
    }

    /// The problems found as an error (nil when there are none).
    package var error: ValidationError? {
        self.problemCount == 0 ? nil : ValidationError(self.problems, unreported: self.unreported)
    }
}

extension ProblemReporter {
    /// Records a problem at `base/field` (`field` needs no escaping).
    package mutating func report(_ base: String, _ field: String, _ message: @autoclosure () -> String) {
        self.report(pointer: base + "/" + field, message())
    }

    /// Reports the members of `object` that `isKnown` rejects, in document order, suggesting the
    /// nearest of `known`.
    package mutating func reportUnknownFields(
        _ object: JSONObject,
        at base: String,
        known: [String],
        isKnown: (String) -> Bool
    ) {
        for member in object.members where !isKnown(member.key) {
            self.report(
                pointer: base + "/" + JSONValue.escapePointerToken(member.key),
                Self.unknownFieldMessage(member.key, known: known)
            )
        }
    }

    package static func unknownFieldMessage(_ key: String, known: [String]) -> String {
        var message = "unknown field " + TemplateExpression.quoted(key)
        if let suggestion = FieldSuggestion.suggestion(for: key, among: known) {
            message += "; did you mean " + TemplateExpression.quoted(suggestion) + "?"
        }
        return message
    }

    // MARK: Scalars

    /// The integer at `base/field` within `min…max`, or `nil` after reporting a problem.
    package mutating func integer(
        _ value: JSONValue,
        _ base: String,
        _ field: String,
        min: Int,
        max: Int? = nil,
        note: String = ""
    ) -> Int? {
        if let int = value.intValue, int >= min, max.map({ int <= $0 }) ?? true { return int }
        self.report(base, field, Self.integerMessage(min: min, max: max) + note)
        return nil
    }

    package static func integerMessage(min: Int, max: Int?) -> String {
        if let max { return "must be an integer from \(min) to \(max)" }
        if min == 1 { return "must be a positive integer" }
        if min == 0 { return "must be a non-negative integer" }
        return "must be an integer of at least \(min)"
    }

    /// The boolean at `base/field`, or `nil` after reporting a problem.
    package mutating func boolean(_ value: JSONValue, _ base: String, _ field: String) -> Bool? {
        if case .bool(let bool) = value { return bool }
        self.report(base, field, "must be a boolean")
        return nil
    }

    /// The string at `base/field` if it is one of `options` (listed in the message), else `nil`.
    package mutating func choice<T>(
        _ value: JSONValue,
        _ base: String,
        _ field: String,
        _ parse: (String) -> T?,
        _ options: String
    ) -> T? {
        if case .string(let text) = value, let parsed = parse(text) { return parsed }
        self.report(base, field, "must be one of " + options)
        return nil
    }

    // MARK: Retry

    /// The `retry` object at `pointer`, read by `rules` (a task's, or a webhook's).
    package mutating func decodeRetry(
        _ value: JSONValue,
        at pointer: String,
        rules: JobDecoder.RetryRules
    ) -> RetrySpec? {
        guard case .object(let object) = value else {
            self.report(pointer: pointer, "must be an object")
            return nil
        }
        let before = self.problemCount
        var retry = rules.defaults
        let known = rules.fields
        var unknown = false
        for member in object.members {
            let value = member.value
            switch member.key {
            case "maxAttempts":
                retry.maxAttempts = self.integer(value, pointer, "maxAttempts", min: 1, max: 100) ?? retry.maxAttempts
            case "delayMs":
                retry.delayMs =
                    self.integer(value, pointer, "delayMs", min: 0, max: rules.delayMsLimit) ?? retry.delayMs
            case "backoff":
                if let number = value.doubleValue, number >= 1, number <= 100 {
                    retry.backoff = number
                } else {
                    self.report(pointer, "backoff", "must be a number from 1 to 100")
                }
            case "maxDelayMs":
                retry.maxDelayMs =
                    self.integer(value, pointer, "maxDelayMs", min: 0, max: 86_400_000) ?? retry.maxDelayMs
            case "jitter":
                retry.jitter = self.boolean(value, pointer, "jitter") ?? retry.jitter
            case "on" where rules.allowsErrorCodes:
                guard case .array(let codes) = value else {
                    self.report(pointer, "on", "must be an array of error codes")
                    break
                }
                var on: [String] = []
                on.reserveCapacity(codes.count)
                for (index, code) in codes.enumerated() {
                    if case .string(let text) = code, !text.isEmpty {
                        on.append(text)
                    } else {
                        self.report(pointer: pointer + "/on/" + String(index), "must be a non-empty string")
                    }
                }
                retry.on = on
            default:
                unknown = true
            }
        }
        if unknown {
            self.reportUnknownFields(object, at: pointer, known: known, isKnown: { known.contains($0) })
        }
        return self.problemCount == before ? retry : nil
    }
}
