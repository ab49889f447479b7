/// The values one field of a cron expression matches, as a set of small numbers.
public struct CronValueSet: Sendable, Hashable {
    /// Bit `n` is set when the field matches `n`.
    public let bits: UInt64

    /// A set of the values whose bits are set in `bits`.
    public init(bits: UInt64) { self.bits = bits }

    /// Whether the field matches `value`.
    public func contains(_ value: Int) -> Bool { (0..<64).contains(value) && bits & (1 << UInt64(value)) != 0 }

    /// The values, ascending.
    public var values: [Int] { (0..<64).filter { contains($0) } }
}

/// A cron expression (SPEC §8), parsed and checked: five fields — minute, hour, day of month,
/// month, day of week — or one of the shorthands `@yearly` `@annually` `@monthly` `@weekly`
/// `@daily` `@midnight` `@hourly`, each exactly its five-field form.
///
/// The language is cronie's (the cron of Debian and Fedora): an item is `*`, `N` or `A-B` with
/// `A ≤ B`, optionally followed by `/S` (`S ≥ 1`) after `*` or a range; items are joined by commas;
/// months and days of the week may be written as three-letter names in any case (`JAN`–`DEC`,
/// `SUN`–`SAT`), also as the ends of a range (`MON-FRI`); day of week 7 is Sunday, like 0.
/// Everything else is an error: `?`, `L`, `W`, `#`, full names, six or seven fields, `@reboot`,
/// out-of-range values, and a day of month that none of the months has when the day test is AND.
///
/// The expression says nothing about time zones; ``CronSchedule`` reads it on a zone's wall clock.
public struct CronExpression: Sendable, Hashable {
    /// The minutes, 0–59.
    public let minutes: CronValueSet
    /// The hours, 0–23.
    public let hours: CronValueSet
    /// The days of the month, 1–31.
    public let daysOfMonth: CronValueSet
    /// The months, 1–12.
    public let months: CronValueSet
    /// The days of the week, 0–6 with Sunday 0 (a 7 in the text is stored as 0).
    public let daysOfWeek: CronValueSet

    /// Whether neither the minute field nor the hour field begins with `*` (`30 2 * * *`,
    /// `0 0-23/2 * * *`, `@daily`). Such an expression fires once for each matching local date and
    /// time, even when a daylight-saving jump skips or repeats it; a *wildcard* expression (the
    /// others: `*/15 * * * *`, `0 */2 * * *`, `@hourly`) fires at every real minute that matches.
    public let isFixedTime: Bool

    /// Whether a day matches when its day of month *or* its day of week does: when neither of the
    /// two fields begins with `*` (`0 0 13 * 5`: every 13th and every Friday). Otherwise both must
    /// match (`0 0 */10 * 1`: a 1st, 11th, 21st or 31st that is a Monday). Cronie tests the first
    /// character only, so `*/10` counts as `*`.
    public let daysAreAlternatives: Bool

    /// The shorthands and the five-field forms they stand for.
    public static let shorthands: KeyValuePairs<String, String> = [
        "@yearly": "0 0 1 1 *",
        "@annually": "0 0 1 1 *",
        "@monthly": "0 0 1 * *",
        "@weekly": "0 0 * * 0",
        "@daily": "0 0 * * *",
        "@midnight": "0 0 * * *",
        "@hourly": "0 * * * *",
    ]

    /// Parses `text`: five fields separated by spaces or tabs (blanks around them are ignored), or
    /// a shorthand in lower case. Throws the first problem found, naming the field and the item.
    public init(parsing text: String) throws(CronError) {
        let trimmed = text.trimmingBlanks
        if trimmed.isEmpty {
            throw CronError(.expression, "the expression is empty")
        }
        if trimmed.hasPrefix("@") {
            guard let form = Self.shorthands.first(where: { $0.key == trimmed })?.value else {
                throw CronError(
                    .expression,
                    "\"\(trimmed)\" is not supported: the shorthands are @yearly, @annually, @monthly, "
                        + "@weekly, @daily, @midnight and @hourly, in lower case"
                )
            }
            try self.init(fields: form.split(separator: " "))
            return
        }
        let fields = trimmed.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard fields.count == 5 else {
            throw CronError(.expression, "expected 5 fields, got \(fields.count)")
        }
        try self.init(fields: fields)
    }

    /// Parses the five fields.
    private init(fields: [Substring]) throws(CronError) {
        minutes = CronValueSet(bits: try Self.parseField(fields[0], .minute))
        hours = CronValueSet(bits: try Self.parseField(fields[1], .hour))
        let dayBits = try Self.parseField(fields[2], .dayOfMonth)
        months = CronValueSet(bits: try Self.parseField(fields[3], .month))
        var weekBits = try Self.parseField(fields[4], .dayOfWeek)
        if weekBits & (1 << 7) != 0 {
            weekBits = weekBits & ~(1 << 7) | 1
        }
        daysOfMonth = CronValueSet(bits: dayBits)
        daysOfWeek = CronValueSet(bits: weekBits)
        isFixedTime = !fields[0].hasPrefix("*") && !fields[1].hasPrefix("*")
        let dayOfMonthStar = fields[2].hasPrefix("*")
        let dayOfWeekStar = fields[4].hasPrefix("*")
        daysAreAlternatives = !dayOfMonthStar && !dayOfWeekStar
        // With the AND test a day of month that none of the months has would never fire. (A field
        // beginning with `*` always holds the 1st, so only an explicit day-of-month can do that.)
        if !dayOfMonthStar && dayOfWeekStar {
            var possible: UInt64 = 0
            for month in months.values {
                possible |= (1 << UInt64(CivilDate.daysInMonth(month, leapYear: true) + 1)) - 2
            }
            if dayBits & possible == 0 {
                throw CronError(
                    .field(.dayOfMonth),
                    "day-of-month \"\(fields[2])\" never occurs in month \"\(fields[3])\""
                )
            }
        }
    }

    /// Whether the expression's day test accepts the date `year`-`month`-`day` (proleptic
    /// Gregorian; false for a date that does not exist, such as February 30).
    public func matches(year: Int, month: Int, day: Int) -> Bool {
        guard (1...12).contains(month), day >= 1, day <= CivilDate.daysInMonth(month, year: year) else {
            return false
        }
        let days = CivilDate(year: year, month: month, day: day).daysSinceEpoch
        return matchesDay(month: month, day: day, weekday: CivilDate.weekday(daysSinceEpoch: days))
    }

    /// Whether the expression's time fields accept `hour`:`minute`.
    public func matches(hour: Int, minute: Int) -> Bool {
        hours.contains(hour) && minutes.contains(minute)
    }

    /// The day test of SPEC §8 rule 6, for a day whose weekday (Sunday 0) is already known.
    func matchesDay(month: Int, day: Int, weekday: Int) -> Bool {
        guard months.contains(month) else { return false }
        let byDay = daysOfMonth.contains(day)
        let byWeekday = daysOfWeek.contains(weekday)
        return daysAreAlternatives ? byDay || byWeekday : byDay && byWeekday
    }
}

// MARK: - Parsing

extension CronExpression {
    /// The values of one field: a comma-separated list of items.
    static func parseField(_ text: Substring, _ field: CronField) throws(CronError) -> UInt64 {
        var bits: UInt64 = 0
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            if item.isEmpty {
                throw CronError(.field(field), "\(field.name) \"\(text)\" has an empty list item")
            }
            bits |= try parseItem(item, field)
        }
        return bits
    }

    /// The values of one item: `*`, `N` or `A-B`, optionally followed by `/S` after `*` or `A-B`.
    static func parseItem(_ item: Substring, _ field: CronField) throws(CronError) -> UInt64 {
        let quoted = "\(field.name) \"\(item)\""
        if item.contains(where: { $0 == "?" || $0 == "#" }) {
            throw CronError(.field(field), "\(quoted) is not supported")
        }
        let malformed = CronError(
            .field(field),
            "\(quoted) is not a valid item: expected *, N or A-B, optionally followed by /S"
        )
        let parts = item.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, !parts[0].isEmpty else { throw malformed }
        var low = field.range.lowerBound
        var high = field.range.upperBound
        var isSingleValue = false
        if parts[0] != "*" {
            let ends = parts[0].split(separator: "-", omittingEmptySubsequences: false)
            guard ends.count <= 2, ends.allSatisfy({ !$0.isEmpty }) else { throw malformed }
            low = try value(ends[0], in: item, field)
            high = ends.count == 2 ? try value(ends[1], in: item, field) : low
            isSingleValue = ends.count == 1
            if low > high {
                throw CronError(.field(field), "\(quoted): a range must not run backwards (\(low) > \(high))")
            }
        }
        var step = 1
        if parts.count == 2 {
            if isSingleValue {
                throw CronError(.field(field), "\(quoted): a step needs * or a range before it")
            }
            guard let number = decimal(parts[1]) else {
                if parts[1].isEmpty { throw malformed }
                throw CronError(.field(field), "\(quoted): the step \"\(parts[1])\" is not a number")
            }
            guard number >= 1 else {
                throw CronError(.field(field), "\(quoted): the step must be at least 1")
            }
            // As cronie's crontab: a larger step would act as the first value only.
            guard number <= field.range.upperBound else {
                throw CronError(.field(field), "\(quoted): the step must be at most \(field.range.upperBound)")
            }
            step = number
        }
        var bits: UInt64 = 0
        for value in stride(from: low, through: high, by: step) {
            bits |= 1 << UInt64(value)
        }
        return bits
    }

    /// One value of an item: a number in the field's range, or a three-letter name.
    static func value(_ token: Substring, in item: Substring, _ field: CronField) throws(CronError) -> Int {
        let range = field.range
        if let number = decimal(token) {
            guard range.contains(number) else {
                let which = token == item ? "\"\(token)\"" : "\"\(token)\" in \"\(item)\""
                throw CronError(
                    .field(field),
                    "\(field.name) \(which) is out of range \(range.lowerBound)–\(range.upperBound)"
                )
            }
            return number
        }
        let quoted = "\(field.name) \"\(item)\""
        let upper = token.uppercased()
        let isLetters = token.utf8.allSatisfy { (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }
        // Quartz's L (last), W (nearest weekday), and forms like 15W, 5L, LW.
        let isQuartzDay =
            (field == .dayOfMonth || field == .dayOfWeek)
            && (upper.hasSuffix("L") || upper.hasSuffix("W"))
            && upper.dropLast().allSatisfy { $0.isASCII && ($0.isNumber || $0 == "L") }
        if isLetters && !field.names.isEmpty {
            if upper.count == 3, let index = field.names.firstIndex(of: upper) {
                return range.lowerBound + index
            }
            if upper.count > 3, field.names.contains(String(upper.prefix(3))) {
                throw CronError(
                    .field(field),
                    "\(quoted): names are three letters, like \"\(upper.prefix(3))\""
                )
            }
        }
        if isQuartzDay {
            throw CronError(.field(field), "\(quoted) is not supported")
        }
        if isLetters && field == .month {
            throw CronError(.field(field), "\(quoted) is not a month name (JAN–DEC)")
        }
        if isLetters && field == .dayOfWeek {
            throw CronError(.field(field), "\(quoted) is not a day name (SUN–SAT)")
        }
        if isLetters {
            throw CronError(.field(field), "\(quoted) is not a number")
        }
        throw CronError(
            .field(field),
            "\(quoted) is not a valid item: expected *, N or A-B, optionally followed by /S"
        )
    }

    /// The value of a string of ASCII digits (at most 1,000,000,000: larger is out of every
    /// range anyway), or nil.
    static func decimal(_ text: Substring) -> Int? {
        guard !text.isEmpty else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard (0x30...0x39).contains(byte) else { return nil }
            value = min(value * 10 + Int(byte - 0x30), 1_000_000_000)
        }
        return value
    }
}

extension String {
    /// The string without the spaces and tabs at its ends.
    var trimmingBlanks: String {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
