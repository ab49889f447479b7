import Foundation
import Testing

@testable import TaskSchedule

/// An instant written in UTC: `2026-03-29T01:00Z` or with seconds, `2026-01-01T00:04:59.5Z`.
func utc(_ text: String) -> Date {
    var text = text
    if text.count == 17 { text.insert(contentsOf: ":00", at: text.index(text.startIndex, offsetBy: 16)) }
    let whole = text.prefix(19) + "Z"
    let fraction = text.count > 20 ? Double("0" + text.dropFirst(19).dropLast()) ?? 0 : 0
    return try! Date(String(whole), strategy: .iso8601) + fraction
}

/// `date` in UTC, to the minute (fires fall on whole minutes): `2026-03-29T01:00Z`.
func utcText(_ date: Date) -> String {
    let text = date.formatted(.iso8601)
    return text.hasSuffix(":00Z") ? String(text.dropLast(4)) + "Z" : text
}

/// The fires of `expression` on the wall clock of `zone`, in UTC, as `utcText` writes them.
func fires(_ expression: String, _ zone: String = "UTC", after: String, count: Int) throws -> [String] {
    try CronSchedule(parsing: expression, timeZoneName: zone).nextFires(after: utc(after), count: count).map(utcText)
}

/// One case of the tables below: the fires of `expression` in `zone` after `after`. Every
/// expectation is worked out by hand from SPEC §8 and the zone's offsets as `zdump` prints them.
struct FireCase: Sendable, CustomTestStringConvertible {
    var zone: String
    var expression: String
    var after: String
    var expected: [String]
    var why: String
    var testDescription: String { "\(zone) \(expression.debugDescription): \(why)" }
}

/// Fires on the UTC wall clock: the calendar, the day test, and `nextFires`' contract.
struct CronScheduleTests {
    @Test(arguments: [
        FireCase(
            zone: "UTC",
            expression: "0 0 29 2 *",
            after: "2025-03-01T00:00Z",
            expected: ["2028-02-29T00:00Z", "2032-02-29T00:00Z", "2036-02-29T00:00Z"],
            why: "29 February comes in leap years only"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 29 2 *",
            after: "2096-03-01T00:00Z",
            expected: ["2104-02-29T00:00Z"],
            why: "2100 is not a leap year"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 31 * *",
            after: "2026-01-31T00:00Z",
            expected: [
                "2026-03-31T00:00Z", "2026-05-31T00:00Z", "2026-07-31T00:00Z", "2026-08-31T00:00Z",
                "2026-10-31T00:00Z", "2026-12-31T00:00Z",
            ],
            why: "the 31st skips the shorter months; the instant itself is not after itself"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 13 * 5",
            after: "2026-04-30T12:00Z",
            expected: [
                "2026-05-01T00:00Z", "2026-05-08T00:00Z", "2026-05-13T00:00Z", "2026-05-15T00:00Z",
                "2026-05-22T00:00Z", "2026-05-29T00:00Z", "2026-06-05T00:00Z",
            ],
            why: "every 13th and every Friday (OR)"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 */10 * 1",
            after: "2026-05-01T00:00Z",
            expected: [
                "2026-05-11T00:00Z", "2026-06-01T00:00Z", "2026-08-31T00:00Z", "2026-09-21T00:00Z",
                "2026-12-21T00:00Z", "2027-01-11T00:00Z",
            ],
            why: "a 1st, 11th, 21st or 31st that is a Monday (AND: */10 begins with *)"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 29 2 1",
            after: "2028-02-20T00:00Z",
            expected: ["2028-02-21T00:00Z", "2028-02-28T00:00Z", "2028-02-29T00:00Z", "2029-02-05T00:00Z"],
            why: "the Mondays of February and 29 February (a Tuesday in 2028)"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 30 2 1",
            after: "2026-02-20T00:00Z",
            expected: ["2026-02-23T00:00Z", "2027-02-01T00:00Z"],
            why: "OR: the Mondays of February, the 30th never"
        ),
        FireCase(
            zone: "UTC",
            expression: "0 0 29 2 */7",
            after: "2060-03-01T00:00Z",
            expected: ["2088-02-29T00:00Z"],
            why: "a 29 February that is a Sunday: 28 years later, within the search span"
        ),
        FireCase(
            zone: "UTC",
            expression: "15,45 9-10 1 1 *",
            after: "2026-01-01T09:15Z",
            expected: ["2026-01-01T09:45Z", "2026-01-01T10:15Z", "2026-01-01T10:45Z", "2027-01-01T09:15Z"],
            why: "minutes within hours within days, strictly after the start"
        ),
        FireCase(
            zone: "UTC",
            expression: "@weekly",
            after: "2026-01-01T00:00Z",
            expected: ["2026-01-04T00:00Z", "2026-01-11T00:00Z"],
            why: "Sundays at midnight (2026-01-01 is a Thursday)"
        ),
        FireCase(
            zone: "UTC",
            expression: "@yearly",
            after: "2026-01-01T00:00Z",
            expected: ["2027-01-01T00:00Z", "2028-01-01T00:00Z"],
            why: "1 January at midnight"
        ),
    ])
    func firesInUTC(_ test: FireCase) throws {
        #expect(try fires(test.expression, test.zone, after: test.after, count: test.expected.count) == test.expected)
    }

    @Test func firesAreStrictlyAfterTheStart() throws {
        #expect(
            try fires("*/5 * * * *", after: "2026-01-01T00:05Z", count: 3) == [
                "2026-01-01T00:10Z", "2026-01-01T00:15Z", "2026-01-01T00:20Z",
            ]
        )
        #expect(try fires("*/5 * * * *", after: "2026-01-01T00:04:59.5Z", count: 1) == ["2026-01-01T00:05Z"])
        #expect(try fires("*/5 * * * *", after: "2026-01-01T00:05:00.5Z", count: 1) == ["2026-01-01T00:10Z"])
        #expect(try fires("*/5 * * * *", after: "1969-12-31T23:59:59.5Z", count: 1) == ["1970-01-01T00:00Z"])
        let schedule = try CronSchedule(parsing: "*/5 * * * *")
        #expect(schedule.nextFire(after: utc("2026-01-01T00:04:59Z")) == utc("2026-01-01T00:05Z"))
    }

    @Test func aCountBelowOneIsNoFires() throws {
        let schedule = try CronSchedule(parsing: "* * * * *")
        #expect(schedule.nextFires(after: utc("2026-01-01T00:00Z"), count: 0).isEmpty)
        #expect(schedule.nextFires(after: utc("2026-01-01T00:00Z"), count: -1).isEmpty)
    }

    /// The search goes 400 years (the Gregorian cycle) past the start and past each fire, and
    /// stops at the last instant RFC 3339 writes.
    @Test func theSearchFindsTheRarestFiresAndStopsAtTheYear9999() throws {
        // The 29 Februaries that are Sundays: 2032, 2060, 2088, then 2128 (40 years: 2100 is no
        // leap year).
        let rare = try CronSchedule(parsing: "0 0 29 2 */7")
        #expect(rare.nextFire(after: utc("2088-03-01T00:00Z")) == utc("2128-02-29T00:00Z"))
        #expect(
            rare.nextFires(after: utc("2026-01-01T00:00Z"), count: 3)
                == [utc("2032-02-29T00:00Z"), utc("2060-02-29T00:00Z"), utc("2088-02-29T00:00Z")]
        )
        // Twenty 29 Februaries span 80 years: the search is per fire, not from the start.
        let leap = try CronSchedule(parsing: "0 0 29 2 *")
        let twenty = leap.nextFires(after: utc("2026-01-01T00:00Z"), count: 20)
        #expect(twenty.count == 20)
        #expect(twenty.last == utc("2108-02-29T00:00Z"))
        // Nothing past 9999-12-31T23:59:59Z (it would be written as the year 0000, or 10000).
        let always = try CronSchedule(parsing: "* * * * *")
        #expect(always.nextFires(after: utc("9999-12-31T23:58Z"), count: 5) == [utc("9999-12-31T23:59Z")])
        #expect(always.nextFires(after: utc("9999-12-31T23:59Z"), count: 5).isEmpty)
        #expect(leap.nextFire(after: utc("9996-03-01T00:00Z")) == nil)
        // Out-of-the-way starts give no fires rather than a trap.
        #expect(always.nextFires(after: Date(timeIntervalSince1970: .infinity), count: 1).isEmpty)
        #expect(always.nextFires(after: Date(timeIntervalSince1970: .nan), count: 1).isEmpty)
        #expect(always.nextFire(after: .distantFuture) != nil)
    }

    /// Whatever the zone and the expression, fires ascend strictly, come after the start, and fall
    /// on whole minutes; and a wildcard expression's fires read on the zone's wall clock (per
    /// Foundation's Calendar, not our arithmetic) as times that match.
    @Test(arguments: [
        "UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Pacific/Chatham",
    ])
    func firesAscendWithoutDuplicates(_ zone: String) throws {
        let timeZone = try CronSchedule.timeZone(named: zone)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        for text in [
            "*/7 */3 * * *", "0 2,3 * * *", "30 0-3 * * *", "45 2 * * 0", "0,30 1-3 1-10 * *", "*/20 2-3 * * *",
        ] {
            let schedule = CronSchedule(try CronExpression(parsing: text), timeZone: timeZone)
            let start = utc("2026-03-01T00:00Z")
            let all = schedule.nextFires(after: start, count: 600)
            #expect(all.count == 600)
            #expect(zip(all, all.dropFirst()).allSatisfy { $0 < $1 }, "\(text)")
            #expect(all.allSatisfy { $0 > start && $0.timeIntervalSince1970.truncatingRemainder(dividingBy: 60) == 0 })
            for fire in all {
                let local = calendar.dateComponents([.hour, .minute], from: fire)
                let matches = schedule.expression.matches(hour: local.hour!, minute: local.minute!)
                // A fixed-time expression may also fire where a forward jump ends.
                let jumpEnds = timeZone.secondsFromGMT(for: fire - 1) < timeZone.secondsFromGMT(for: fire)
                #expect(matches || (schedule.expression.isFixedTime && jumpEnds), "\(text) \(fire)")
            }
            // Asking again from any fire gives the rest.
            #expect(schedule.nextFires(after: all[300], count: 5) == Array(all[301...305]))
        }
    }

    /// In a zone whose offsets are all whole quarter hours, `*/15 * * * *` fires on every quarter
    /// hour of real time, whatever the clocks do (SPEC §8 rule 3).
    @Test(arguments: [
        ("Europe/Paris", "2026-03-28T12:00Z"),
        ("Europe/Paris", "2026-10-24T12:00Z"),
        ("Australia/Lord_Howe", "2026-04-04T00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T00:00Z"),
        ("America/Santiago", "2026-09-05T12:00Z"),
        ("Pacific/Chatham", "2026-09-26T00:00Z"),
        ("Asia/Kathmandu", "2026-03-28T12:00Z"),
    ])
    func aQuarterHourlyWildcardFiresEveryQuarterHour(_ zone: String, _ after: String) throws {
        let all = try CronSchedule(parsing: "*/15 * * * *", timeZoneName: zone).nextFires(after: utc(after), count: 200)
        let expected = (1...200).map { utc(after) + TimeInterval($0 * 900) }
        #expect(all == expected)
    }

    /// A sanity check of the cost, not a timed test: these take milliseconds.
    @Test func manyFiresAreCheap() throws {
        let start = utc("2026-01-01T00:00Z")
        #expect(try CronSchedule(parsing: "*/5 * * * *").nextFires(after: start, count: 100).count == 100)
        #expect(try CronSchedule(parsing: "0 0 29 2 1").nextFires(after: start, count: 100).count == 100)
        #expect(
            try CronSchedule(parsing: "* * * * *", timeZoneName: "Europe/Paris").nextFires(after: start, count: 100_000)
                .count == 100_000
        )
        #expect(
            try CronSchedule(parsing: "@daily", timeZoneName: "America/Santiago").nextFires(after: start, count: 5000)
                .count == 5000
        )
        // Days searched one by one across gaps of 28 and 40 years.
        #expect(
            try CronSchedule(parsing: "0 0 29 2 */7", timeZoneName: "Europe/Paris").nextFires(
                after: utc("2088-03-01T00:00Z"),
                count: 10
            ).count == 10
        )
    }
}
