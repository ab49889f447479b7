import Foundation
import Testing

@testable import TaskSchedule

/// Time zone names: those of the IANA tz database, and nothing else Foundation would take.
struct TimeZoneNameTests {
    @Test(arguments: [
        ("UTC", 0),
        ("Etc/UTC", 0),
        ("Europe/Paris", 3600),
        ("America/New_York", -18000),
        ("Australia/Lord_Howe", 39600),
        ("Pacific/Chatham", 49500),
        ("Asia/Kathmandu", 20700),
        // Links the database keeps for old names.
        ("US/Eastern", -18000),
        ("Asia/Calcutta", 19800),
        ("EST", -18000),
        ("CET", 3600),
        // POSIX signs: Etc/GMT+2 is two hours behind UTC.
        ("Etc/GMT+2", -7200),
    ])
    func databaseNamesAreAccepted(_ name: String, _ offsetOnNewYearsDay2026: Int) throws {
        let zone = try CronSchedule.timeZone(named: name)
        #expect(zone.secondsFromGMT(for: utc("2026-01-01T00:00Z")) == offsetOnNewYearsDay2026)
    }

    @Test(arguments: [
        "Mars/Olympus",
        "GMT+2",
        "UTC+01:00",
        "+01:00",
        "PST",
        "IST",
        "utc",
        "europe/paris",
        "Europe/Paris ",
        " UTC",
        "Europe//Paris",
        "/Europe/Paris",
        "Europe/",
        "posixrules",
        "localtime",
        "posix/Europe/Paris",
        "right/Europe/Paris",
        "zone.tab",
        "Europe",
        "../zoneinfo/UTC",
        "Europe/../UTC",
    ])
    func otherNamesAreRefused(_ name: String) {
        #expect(
            throws: CronError(
                .timeZone,
                "unknown time zone \"\(name)\": expected a name of the IANA tz database, such as \"Europe/Paris\" or \"UTC\""
            )
        ) { try CronSchedule.timeZone(named: name) }
    }

    @Test func theEmptyNameIsRefused() {
        #expect(throws: CronError(.timeZone, "the time zone name is empty")) { try CronSchedule.timeZone(named: "") }
    }

    @Test func aScheduleIsInUTCUnlessToldOtherwise() throws {
        let schedule = try CronSchedule(parsing: "@daily")
        #expect(schedule.timeZone.secondsFromGMT(for: utc("2026-07-01T00:00Z")) == 0)
        #expect(schedule.nextFire(after: utc("2026-07-01T00:00Z")) == utc("2026-07-02T00:00Z"))
        #expect(throws: CronError.self) { try CronSchedule(parsing: "@daily", timeZoneName: "Mars/Olympus") }
    }
}
