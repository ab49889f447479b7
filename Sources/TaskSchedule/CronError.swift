/// Why a cron expression or a time zone name was refused (SPEC §8), with a message for people:
/// it names the field and quotes the bad item, e.g. `day-of-month "32" is out of range 1–31`.
public struct CronError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the error is about.
    public enum Subject: Sendable, Equatable {
        /// The expression as a whole: empty, the wrong number of fields, an unknown shorthand.
        case expression
        /// One of the five fields.
        case field(CronField)
        /// The time zone name.
        case timeZone
    }

    /// What the error is about.
    public let subject: Subject
    /// The message, a sentence without a final period.
    public let description: String

    /// An error about `subject`, explained by `description`.
    public init(_ subject: Subject, _ description: String) {
        self.subject = subject
        self.description = description
    }
}

/// The five fields of a cron expression, in order, with their names and their ranges.
public enum CronField: Int, Sendable, CaseIterable {
    case minute
    case hour
    case dayOfMonth
    case month
    case dayOfWeek

    /// The field's name in messages: `minute`, `hour`, `day-of-month`, `month`, `day-of-week`.
    public var name: String {
        switch self {
        case .minute: "minute"
        case .hour: "hour"
        case .dayOfMonth: "day-of-month"
        case .month: "month"
        case .dayOfWeek: "day-of-week"
        }
    }

    /// The values the field's items may name (`dayOfWeek`: 0–7, both 0 and 7 being Sunday).
    public var range: ClosedRange<Int> {
        switch self {
        case .minute: 0...59
        case .hour: 0...23
        case .dayOfMonth: 1...31
        case .month: 1...12
        case .dayOfWeek: 0...7
        }
    }

    /// The three-letter names the field accepts in any case, the first one standing for
    /// `range.lowerBound` (months: `JAN` is 1; days: `SUN` is 0); empty for the numeric fields.
    var names: [String] {
        switch self {
        case .month: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
        case .dayOfWeek: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
        default: []
        }
    }
}
