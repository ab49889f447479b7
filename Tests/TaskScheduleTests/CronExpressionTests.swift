import Testing

@testable import TaskSchedule

/// The language of SPEC §8: what parses, to which values, and what is refused with which message.
struct CronExpressionTests {
    /// A valid expression and the values of its five fields (day of week: 7 is stored as 0).
    struct Valid: Sendable, CustomTestStringConvertible {
        var text: String
        var minutes: [Int]
        var hours: [Int]
        var daysOfMonth: [Int]
        var months: [Int]
        var daysOfWeek: [Int]
        var testDescription: String { text.debugDescription }
    }

    static let all60 = Array(0...59)
    static let all24 = Array(0...23)
    static let all31 = Array(1...31)
    static let all12 = Array(1...12)
    static let all7 = Array(0...6)

    static let valid: [Valid] = [
        Valid(text: "* * * * *", minutes: all60, hours: all24, daysOfMonth: all31, months: all12, daysOfWeek: all7),
        Valid(text: "30 2 * * *", minutes: [30], hours: [2], daysOfMonth: all31, months: all12, daysOfWeek: all7),
        Valid(
            text: "*/15 * * * *",
            minutes: [0, 15, 30, 45],
            hours: all24,
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: all7
        ),
        Valid(
            text: "10-40/10 * * * *",
            minutes: [10, 20, 30, 40],
            hours: all24,
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: all7
        ),
        Valid(
            text: "1,2,3-5,*/20 0-23/6 * * *",
            minutes: [0, 1, 2, 3, 4, 5, 20, 40],
            hours: [0, 6, 12, 18],
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: all7
        ),
        Valid(
            text: "0 9-17 * * MON-FRI",
            minutes: [0],
            hours: Array(9...17),
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: [1, 2, 3, 4, 5]
        ),
        Valid(text: "0 0 1 jan,Jul *", minutes: [0], hours: [0], daysOfMonth: [1], months: [1, 7], daysOfWeek: all7),
        Valid(
            text: "0 0 * JAN-MAR/2,oCt *",
            minutes: [0],
            hours: [0],
            daysOfMonth: all31,
            months: [1, 3, 10],
            daysOfWeek: all7
        ),
        Valid(text: "0 0 * * sun", minutes: [0], hours: [0], daysOfMonth: all31, months: all12, daysOfWeek: [0]),
        Valid(text: "0 0 * * 7", minutes: [0], hours: [0], daysOfMonth: all31, months: all12, daysOfWeek: [0]),
        Valid(text: "0 0 * * 5-7", minutes: [0], hours: [0], daysOfMonth: all31, months: all12, daysOfWeek: [0, 5, 6]),
        Valid(text: "0 0 * * SAT-7", minutes: [0], hours: [0], daysOfMonth: all31, months: all12, daysOfWeek: [0, 6]),
        Valid(
            text: "0 0 * * */2",
            minutes: [0],
            hours: [0],
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: [0, 2, 4, 6]
        ),
        Valid(text: "0 0 * * */7", minutes: [0], hours: [0], daysOfMonth: all31, months: all12, daysOfWeek: [0]),
        Valid(
            text: "0 0 * * Mon-Wed/2",
            minutes: [0],
            hours: [0],
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: [1, 3]
        ),
        Valid(
            text: "0 0 */10 * 1",
            minutes: [0],
            hours: [0],
            daysOfMonth: [1, 11, 21, 31],
            months: all12,
            daysOfWeek: [1]
        ),
        // A step as large as the field's largest value (a larger one is refused, as cronie's
        // crontab does): the first value and the last.
        Valid(
            text: "*/59 * * * *",
            minutes: [0, 59],
            hours: all24,
            daysOfMonth: all31,
            months: all12,
            daysOfWeek: all7
        ),
        Valid(text: "05 007 * * *", minutes: [5], hours: [7], daysOfMonth: all31, months: all12, daysOfWeek: all7),
        Valid(
            text: " \t59  23\t31 12 7 ",
            minutes: [59],
            hours: [23],
            daysOfMonth: [31],
            months: [12],
            daysOfWeek: [0]
        ),
        Valid(text: "0 0 29 2 *", minutes: [0], hours: [0], daysOfMonth: [29], months: [2], daysOfWeek: all7),
        // The OR test: Mondays in February (and the 30th, which never comes).
        Valid(text: "0 0 30 2 1", minutes: [0], hours: [0], daysOfMonth: [30], months: [2], daysOfWeek: [1]),
        // The AND test with one possible day: 31 January.
        Valid(
            text: "0 0 30,31 1-2 *",
            minutes: [0],
            hours: [0],
            daysOfMonth: [30, 31],
            months: [1, 2],
            daysOfWeek: all7
        ),
    ]

    @Test(arguments: valid)
    func validExpressions(_ valid: Valid) throws {
        let expression = try CronExpression(parsing: valid.text)
        #expect(expression.minutes.values == valid.minutes)
        #expect(expression.hours.values == valid.hours)
        #expect(expression.daysOfMonth.values == valid.daysOfMonth)
        #expect(expression.months.values == valid.months)
        #expect(expression.daysOfWeek.values == valid.daysOfWeek)
    }

    @Test(arguments: [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("  @daily\t", "0 0 * * *"),
    ])
    func shorthandsAreTheirFiveFieldForms(_ shorthand: String, _ form: String) throws {
        #expect(try CronExpression(parsing: shorthand) == CronExpression(parsing: form))
    }

    @Test func sundayIsZeroOrSevenOrSun() throws {
        let zero = try CronExpression(parsing: "0 0 * * 0")
        #expect(try CronExpression(parsing: "0 0 * * 7") == zero)
        #expect(try CronExpression(parsing: "0 0 * * SUN") == zero)
        #expect(try CronExpression(parsing: "0 0 * * 0,7") == zero)
    }

    /// SPEC §8 rule 2: fixed-time when neither the minute field nor the hour field begins with `*`.
    @Test(arguments: [
        ("30 2 * * *", true),
        ("0 0-23/2 * * *", true),
        ("@daily", true),
        ("@midnight", true),
        ("@weekly", true),
        ("@monthly", true),
        ("@yearly", true),
        ("0,30 1-3 * * *", true),
        ("*/15 * * * *", false),
        ("30 * * * *", false),
        ("0 */2 * * *", false),
        ("*/15 2 * * *", false),
        ("@hourly", false),
        ("* * * * *", false),
    ])
    func fixedTimeOrWildcard(_ text: String, _ isFixedTime: Bool) throws {
        #expect(try CronExpression(parsing: text).isFixedTime == isFixedTime)
    }

    /// Everything SPEC §8 leaves out of the language, each with its message.
    @Test(arguments: [
        ("", "the expression is empty"),
        (" \t ", "the expression is empty"),
        ("* * * *", "expected 5 fields, got 4"),
        ("* * * * * *", "expected 5 fields, got 6"),
        ("0 0 12 * * ? 2025", "expected 5 fields, got 7"),
        ("0 0 * * * /bin/true", "expected 5 fields, got 6"),
        ("@reboot", shorthandMessage("@reboot")),
        ("@every 5m", shorthandMessage("@every 5m")),
        ("@DAILY", shorthandMessage("@DAILY")),
        ("@Hourly", shorthandMessage("@Hourly")),
        ("@daily 0", shorthandMessage("@daily 0")),
        ("@", shorthandMessage("@")),
        // Quartz and other crons' extensions.
        ("0 0 ? * MON", #"day-of-month "?" is not supported"#),
        ("0 0 * * ?", #"day-of-week "?" is not supported"#),
        ("0 0 L * *", #"day-of-month "L" is not supported"#),
        ("0 0 l * *", #"day-of-month "l" is not supported"#),
        ("0 0 L-3 * *", #"day-of-month "L-3" is not supported"#),
        ("0 0 LW * *", #"day-of-month "LW" is not supported"#),
        ("0 0 15W * *", #"day-of-month "15W" is not supported"#),
        ("0 0 W * *", #"day-of-month "W" is not supported"#),
        ("0 0 * * 5L", #"day-of-week "5L" is not supported"#),
        ("0 0 * * L", #"day-of-week "L" is not supported"#),
        ("0 0 * * 5#3", #"day-of-week "5#3" is not supported"#),
        ("0 0 * * FRI#2", #"day-of-week "FRI#2" is not supported"#),
        // Full and unknown names; names where none are allowed.
        ("0 0 * * MONDAY", #"day-of-week "MONDAY": names are three letters, like "MON""#),
        ("0 0 * * thursday", #"day-of-week "thursday": names are three letters, like "THU""#),
        ("0 0 1 January *", #"month "January": names are three letters, like "JAN""#),
        ("0 0 1 Sept *", #"month "Sept": names are three letters, like "SEP""#),
        ("0 0 * * FOO", #"day-of-week "FOO" is not a day name (SUN–SAT)"#),
        ("0 0 * * MO", #"day-of-week "MO" is not a day name (SUN–SAT)"#),
        ("0 0 1 FOO *", #"month "FOO" is not a month name (JAN–DEC)"#),
        ("0 0 1 * JAN", #"day-of-week "JAN" is not a day name (SUN–SAT)"#),
        ("0 0 1 MON *", #"month "MON" is not a month name (JAN–DEC)"#),
        ("MON * * * *", #"minute "MON" is not a number"#),
        ("0 noon * * *", #"hour "noon" is not a number"#),
        ("0 0 first * *", #"day-of-month "first" is not a number"#),
        // Out of range, in every field.
        ("60 * * * *", #"minute "60" is out of range 0–59"#),
        ("* 24 * * *", #"hour "24" is out of range 0–23"#),
        ("0 0 0 * *", #"day-of-month "0" is out of range 1–31"#),
        ("0 0 32 * *", #"day-of-month "32" is out of range 1–31"#),
        ("0 0 * 0 *", #"month "0" is out of range 1–12"#),
        ("0 0 * 13 *", #"month "13" is out of range 1–12"#),
        ("0 0 * * 8", #"day-of-week "8" is out of range 0–7"#),
        ("0 0 * * 1-8", #"day-of-week "8" in "1-8" is out of range 0–7"#),
        ("50-60 * * * *", #"minute "60" in "50-60" is out of range 0–59"#),
        ("99999999999999999999 * * * *", #"minute "99999999999999999999" is out of range 0–59"#),
        // Steps and ranges.
        ("5/15 * * * *", #"minute "5/15": a step needs * or a range before it"#),
        ("0 0 * * MON/2", #"day-of-week "MON/2": a step needs * or a range before it"#),
        ("*/0 * * * *", #"minute "*/0": the step must be at least 1"#),
        ("0 1-5/0 * * *", #"hour "1-5/0": the step must be at least 1"#),
        // Larger than the field's largest value, as cronie's crontab refuses it (it would act
        // as the first value only).
        ("*/60 * * * *", #"minute "*/60": the step must be at most 59"#),
        ("0 */24 * * *", #"hour "*/24": the step must be at most 23"#),
        ("0 0 1-5/32 * *", #"day-of-month "1-5/32": the step must be at most 31"#),
        ("0 0 1 */13 *", #"month "*/13": the step must be at most 12"#),
        ("0 0 * * */8", #"day-of-week "*/8": the step must be at most 7"#),
        ("0 0 * * */MON", #"day-of-week "*/MON": the step "MON" is not a number"#),
        ("*/-1 * * * *", #"minute "*/-1": the step "-1" is not a number"#),
        ("0 22-2 * * *", #"hour "22-2": a range must not run backwards (22 > 2)"#),
        ("0 0 * * FRI-SUN", #"day-of-week "FRI-SUN": a range must not run backwards (5 > 0)"#),
        ("0 0 * NOV-FEB *", #"month "NOV-FEB": a range must not run backwards (11 > 2)"#),
        // Malformed items.
        ("*/ * * * *", #"minute "*/" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("*/5/2 * * * *", #"minute "*/5/2" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("1-2-3 * * * *", #"minute "1-2-3" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("-5 * * * *", #"minute "-5" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("5- * * * *", #"minute "5-" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("*-5 * * * *", #"minute "*-5" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("** * * * *", #"minute "**" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("+5 * * * *", #"minute "+5" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("٣ * * * *", #"minute "٣" is not a valid item: expected *, N or A-B, optionally followed by /S"#),
        ("1,,2 * * * *", #"minute "1,,2" has an empty list item"#),
        ("1, * * * *", #"minute "1," has an empty list item"#),
        ("0 0 ,1 * *", #"day-of-month ",1" has an empty list item"#),
        // With the AND test, a day of month that none of the months has.
        ("0 0 30 2 *", #"day-of-month "30" never occurs in month "2""#),
        ("0 0 31 4,6 *", #"day-of-month "31" never occurs in month "4,6""#),
        ("0 0 30,31 feb *", #"day-of-month "30,31" never occurs in month "feb""#),
        ("0 0 31 APR-JUN/2 */2", #"day-of-month "31" never occurs in month "APR-JUN/2""#),
    ])
    func invalidExpressions(_ text: String, _ message: String) {
        #expect(throws: CronError.self) { try CronExpression(parsing: text) }
        do {
            _ = try CronExpression(parsing: text)
        } catch {
            #expect(error.description == message)
        }
    }

    static func shorthandMessage(_ text: String) -> String {
        "\"\(text)\" is not supported: the shorthands are @yearly, @annually, @monthly, @weekly, @daily, "
            + "@midnight and @hourly, in lower case"
    }

    @Test func errorsSayWhatTheyAreAbout() {
        #expect(throws: CronError(.expression, "expected 5 fields, got 6")) {
            try CronExpression(parsing: "* * * * * *")
        }
        #expect(throws: CronError(.field(.hour), #"hour "24" is out of range 0–23"#)) {
            try CronExpression(parsing: "0 24 * * *")
        }
        #expect(throws: CronError(.field(.dayOfMonth), #"day-of-month "30" never occurs in month "2""#)) {
            try CronExpression(parsing: "0 0 30 2 *")
        }
    }

    /// SPEC §8 rule 6: the day test is AND when either day field begins with `*`, else OR.
    struct DayCase: Sendable, CustomTestStringConvertible {
        var expression: String
        var date: (year: Int, month: Int, day: Int)
        var matches: Bool
        var testDescription: String { "\(expression) on \(date.year)-\(date.month)-\(date.day)" }
    }

    @Test(arguments: [
        // Every 13th and every Friday. 2026-02-13 and 2026-03-13 are Fridays, 2026-05-13 a Wednesday.
        DayCase(expression: "0 0 13 * 5", date: (2026, 2, 13), matches: true),
        DayCase(expression: "0 0 13 * 5", date: (2026, 5, 13), matches: true),
        DayCase(expression: "0 0 13 * 5", date: (2026, 5, 15), matches: true),
        DayCase(expression: "0 0 13 * 5", date: (2026, 5, 14), matches: false),
        DayCase(expression: "0 0 13 * FRI", date: (2026, 5, 22), matches: true),
        // A 1st, 11th, 21st or 31st that is a Monday: 2026-06-01 and 2026-08-31 are Mondays;
        // 2026-06-11 is a Thursday, 2026-06-08 a Monday that is none of those days.
        DayCase(expression: "0 0 */10 * 1", date: (2026, 6, 1), matches: true),
        DayCase(expression: "0 0 */10 * 1", date: (2026, 8, 31), matches: true),
        DayCase(expression: "0 0 */10 * 1", date: (2026, 6, 11), matches: false),
        DayCase(expression: "0 0 */10 * 1", date: (2026, 6, 8), matches: false),
        // Mondays only; 1sts only.
        DayCase(expression: "0 0 * * 1", date: (2026, 6, 8), matches: true),
        DayCase(expression: "0 0 * * 1", date: (2026, 6, 9), matches: false),
        DayCase(expression: "0 0 1 * *", date: (2026, 8, 1), matches: true),
        DayCase(expression: "0 0 1 * *", date: (2026, 8, 3), matches: false),
        // Day of week beginning with `*`: AND as well (2026-08-01 is a Saturday).
        DayCase(expression: "0 0 1 * */6", date: (2026, 8, 1), matches: true),
        DayCase(expression: "0 0 1 * */6", date: (2026, 6, 1), matches: false),
        // The month always has to match.
        DayCase(expression: "0 0 13 1 5", date: (2026, 2, 13), matches: false),
        DayCase(expression: "0 0 13 2 5", date: (2026, 2, 20), matches: true),
        // Leap days: 2028 and 2000 are leap years, 2100 and 2026 are not.
        DayCase(expression: "0 0 29 2 *", date: (2028, 2, 29), matches: true),
        DayCase(expression: "0 0 29 2 *", date: (2000, 2, 29), matches: true),
        DayCase(expression: "0 0 29 2 *", date: (2100, 2, 29), matches: false),
        DayCase(expression: "0 0 29 2 *", date: (2026, 2, 29), matches: false),
        DayCase(expression: "0 0 31 * *", date: (2026, 4, 31), matches: false),
    ])
    func dayTest(_ test: DayCase) throws {
        let expression = try CronExpression(parsing: test.expression)
        #expect(expression.matches(year: test.date.year, month: test.date.month, day: test.date.day) == test.matches)
    }

    @Test func theDayTestIsOrOnlyWhenNeitherDayFieldBeginsWithAStar() throws {
        #expect(try CronExpression(parsing: "0 0 13 * 5").daysAreAlternatives)
        #expect(try CronExpression(parsing: "0 0 1-31 * 0-7").daysAreAlternatives)
        #expect(try !CronExpression(parsing: "0 0 */10 * 1").daysAreAlternatives)
        #expect(try !CronExpression(parsing: "0 0 13 * */1").daysAreAlternatives)
        #expect(try !CronExpression(parsing: "0 0 * * 1").daysAreAlternatives)
        #expect(try !CronExpression(parsing: "@weekly").daysAreAlternatives)
    }

    @Test func timeTest() throws {
        let expression = try CronExpression(parsing: "*/20 9-17 * * *")
        #expect(expression.matches(hour: 9, minute: 40))
        #expect(!expression.matches(hour: 9, minute: 41))
        #expect(!expression.matches(hour: 18, minute: 0))
    }
}

/// Howard Hinnant's day arithmetic, against dates counted by Python's `datetime`.
struct CivilDateTests {
    @Test(arguments: [
        (1970, 1, 1, 0, 4),
        (1969, 12, 31, -1, 3),
        (2026, 3, 29, 20541, 0),
        (2000, 2, 29, 11016, 2),
        (2000, 3, 1, 11017, 3),
        (2100, 3, 1, 47541, 1),
        (1600, 2, 29, -135081, 2),
        (1, 1, 1, -719162, 1),
        (9999, 12, 31, 2_932_896, 5),
    ])
    func knownDays(_ year: Int, _ month: Int, _ day: Int, _ days: Int, _ weekday: Int) {
        #expect(CivilDate(year: year, month: month, day: day).daysSinceEpoch == days)
        #expect(CivilDate(daysSinceEpoch: days) == CivilDate(year: year, month: month, day: day))
        #expect(CivilDate.weekday(daysSinceEpoch: days) == weekday)
    }

    @Test func consecutiveDaysAreConsecutiveDates() {
        var expected = CivilDate(year: 1599, month: 1, day: 1)
        for days in CivilDate(year: 1599, month: 1, day: 1)
            .daysSinceEpoch...CivilDate(year: 2401, month: 3, day: 1)
            .daysSinceEpoch
        {
            #expect(CivilDate(daysSinceEpoch: days) == expected)
            if expected.day < CivilDate.daysInMonth(expected.month, year: expected.year) {
                expected.day += 1
            } else if expected.month < 12 {
                expected = CivilDate(year: expected.year, month: expected.month + 1, day: 1)
            } else {
                expected = CivilDate(year: expected.year + 1, month: 1, day: 1)
            }
        }
    }
}
