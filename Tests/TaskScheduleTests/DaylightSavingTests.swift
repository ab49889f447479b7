import Testing

@testable import TaskSchedule

/// SPEC §8 rules 3–5 on the real 2026 transitions, both hemispheres, whole, half and
/// three-quarter hours, and at midnight. The offsets, from `zdump -v -c 2026,2027 ZONE`:
///
/// - Europe/Paris: 2026-03-29T01:00Z, 01:59:59 CET (+1) → 03:00 CEST (+2);
///   2026-10-25T01:00Z, 02:59:59 CEST → 02:00 CET.
/// - America/New_York: 2026-03-08T07:00Z, 01:59:59 EST (−5) → 03:00 EDT (−4);
///   2026-11-01T06:00Z, 01:59:59 EDT → 01:00 EST.
/// - Australia/Sydney: 2026-04-04T16:00Z, 5 April 02:59:59 AEDT (+11) → 02:00 AEST (+10);
///   2026-10-03T16:00Z, 4 October 01:59:59 AEST → 03:00 AEDT.
/// - Australia/Lord_Howe: 2026-04-04T15:00Z, 5 April 01:59:59 +11 → 01:30 +10:30;
///   2026-10-03T15:30Z, 4 October 01:59:59 +10:30 → 02:30 +11.
/// - America/Santiago: 2026-04-05T03:00Z, 4 April 23:59:59 −03 → 23:00 −04;
///   2026-09-06T04:00Z, 5 September 23:59:59 −04 → 6 September 01:00 −03.
/// - Pacific/Chatham: 2026-04-04T14:00Z, 5 April 03:44:59 +13:45 → 02:45 +12:45;
///   2026-09-26T14:00Z, 27 September 02:44:59 +12:45 → 03:45 +13:45.
/// - Pacific/Apia (2011, a skipped day): 2011-12-30T10:00Z, 29 December 23:59:59 −10 →
///   31 December 00:00 +14.
struct DaylightSavingTests {
    static let paris: [FireCase] = [
        FireCase(
            zone: "Europe/Paris",
            expression: "30 2 * * *",
            after: "2026-03-27T12:00Z",
            expected: ["2026-03-28T01:30Z", "2026-03-29T01:00Z", "2026-03-30T00:30Z"],
            why: "spring forward: 02:30 is skipped and fires at 03:00 CEST"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "30 2 * * *",
            after: "2026-10-23T12:00Z",
            expected: ["2026-10-24T00:30Z", "2026-10-25T00:30Z", "2026-10-26T01:30Z"],
            why: "fall back: 02:30 fires once, at its first occurrence (CEST)"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "*/30 2 * * *",
            after: "2026-03-28T00:00Z",
            expected: ["2026-03-28T01:00Z", "2026-03-28T01:30Z", "2026-03-30T00:00Z"],
            why: "spring forward: a wildcard never fires at skipped times"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "*/30 2 * * *",
            after: "2026-10-24T12:00Z",
            expected: [
                "2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T01:00Z", "2026-10-25T01:30Z",
                "2026-10-26T01:00Z",
            ],
            why: "fall back: a wildcard fires 02:00 and 02:30 twice"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "*/30 * * * *",
            after: "2026-10-24T23:45Z",
            expected: [
                "2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T01:00Z", "2026-10-25T01:30Z",
                "2026-10-25T02:00Z",
            ],
            why: "fall back: 02:00 CEST, 02:30 CEST, 02:00 CET, 02:30 CET, 03:00 CET"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "0 2,3 * * *",
            after: "2026-03-28T12:00Z",
            expected: ["2026-03-29T01:00Z", "2026-03-30T00:00Z", "2026-03-30T01:00Z"],
            why: "spring forward: skipped 02:00 and real 03:00 are the same instant, one fire"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "0 2,3 * * *",
            after: "2026-10-24T12:00Z",
            expected: ["2026-10-25T00:00Z", "2026-10-25T02:00Z", "2026-10-26T01:00Z"],
            why: "fall back: 02:00 CEST once, then 03:00 CET"
        ),
        FireCase(
            zone: "Europe/Paris",
            expression: "@daily",
            after: "2026-03-28T12:00Z",
            expected: ["2026-03-28T23:00Z", "2026-03-29T22:00Z"],
            why: "midnight is untouched by the jump at 02:00"
        ),
    ]

    static let newYork: [FireCase] = [
        FireCase(
            zone: "America/New_York",
            expression: "0 * * * *",
            after: "2026-11-01T03:30Z",
            expected: ["2026-11-01T04:00Z", "2026-11-01T05:00Z", "2026-11-01T06:00Z", "2026-11-01T07:00Z"],
            why: "fall back: an hourly job fires at 01:00 EDT and again at 01:00 EST"
        ),
        FireCase(
            zone: "America/New_York",
            expression: "@hourly",
            after: "2026-03-08T05:30Z",
            expected: ["2026-03-08T06:00Z", "2026-03-08T07:00Z", "2026-03-08T08:00Z"],
            why: "spring forward: 01:00 EST, 03:00 EDT, 04:00 EDT; 02:00 never comes"
        ),
        FireCase(
            zone: "America/New_York",
            expression: "30 2 * * *",
            after: "2026-03-07T00:00Z",
            expected: ["2026-03-07T07:30Z", "2026-03-08T07:00Z", "2026-03-09T06:30Z"],
            why: "spring forward: 02:30 fires at 03:00 EDT"
        ),
        FireCase(
            zone: "America/New_York",
            expression: "30 1 * * *",
            after: "2026-10-31T00:00Z",
            expected: ["2026-10-31T05:30Z", "2026-11-01T05:30Z", "2026-11-02T06:30Z"],
            why: "fall back: 01:30 fires once, in EDT"
        ),
        FireCase(
            zone: "America/New_York",
            expression: "*/30 1 * * *",
            after: "2026-11-01T00:00Z",
            expected: [
                "2026-11-01T05:00Z", "2026-11-01T05:30Z", "2026-11-01T06:00Z", "2026-11-01T06:30Z",
                "2026-11-02T06:00Z",
            ],
            why: "fall back: a wildcard fires 01:00 and 01:30 in EDT, then in EST"
        ),
    ]

    static let sydney: [FireCase] = [
        FireCase(
            zone: "Australia/Sydney",
            expression: "30 2 * * *",
            after: "2026-04-03T00:00Z",
            expected: ["2026-04-03T15:30Z", "2026-04-04T15:30Z", "2026-04-05T16:30Z"],
            why: "fall back (April): 02:30 fires once, in AEDT"
        ),
        FireCase(
            zone: "Australia/Sydney",
            expression: "30 2 * * *",
            after: "2026-10-02T00:00Z",
            expected: ["2026-10-02T16:30Z", "2026-10-03T16:00Z", "2026-10-04T15:30Z"],
            why: "spring forward (October): 02:30 fires at 03:00 AEDT"
        ),
        FireCase(
            zone: "Australia/Sydney",
            expression: "*/30 2 * * *",
            after: "2026-04-04T12:00Z",
            expected: [
                "2026-04-04T15:00Z", "2026-04-04T15:30Z", "2026-04-04T16:00Z", "2026-04-04T16:30Z",
                "2026-04-05T16:00Z",
            ],
            why: "fall back: a wildcard fires 02:00 and 02:30 twice"
        ),
        FireCase(
            zone: "Australia/Sydney",
            expression: "*/30 2 * * *",
            after: "2026-10-03T00:00Z",
            expected: ["2026-10-04T15:00Z", "2026-10-04T15:30Z"],
            why: "spring forward: a wildcard skips 4 October"
        ),
    ]

    static let lordHowe: [FireCase] = [
        FireCase(
            zone: "Australia/Lord_Howe",
            expression: "15 2 * * *",
            after: "2026-10-02T00:00Z",
            expected: ["2026-10-02T15:45Z", "2026-10-03T15:30Z", "2026-10-04T15:15Z"],
            why: "half-hour spring forward: 02:15 fires at 02:30 +11"
        ),
        FireCase(
            zone: "Australia/Lord_Howe",
            expression: "*/15 2 * * *",
            after: "2026-10-03T12:00Z",
            expected: ["2026-10-03T15:30Z", "2026-10-03T15:45Z", "2026-10-04T15:00Z"],
            why: "half-hour spring forward: a wildcard skips 02:00 and 02:15"
        ),
        FireCase(
            zone: "Australia/Lord_Howe",
            expression: "*/15 1 * * *",
            after: "2026-04-04T12:00Z",
            expected: [
                "2026-04-04T14:00Z", "2026-04-04T14:15Z", "2026-04-04T14:30Z", "2026-04-04T14:45Z",
                "2026-04-04T15:00Z", "2026-04-04T15:15Z", "2026-04-05T14:30Z",
            ],
            why: "half-hour fall back: a wildcard fires 01:30 and 01:45 twice, 01:00 and 01:15 once"
        ),
        FireCase(
            zone: "Australia/Lord_Howe",
            expression: "45 1 * * *",
            after: "2026-04-04T00:00Z",
            expected: ["2026-04-04T14:45Z", "2026-04-05T15:15Z"],
            why: "half-hour fall back: 01:45 fires once, at +11"
        ),
    ]

    static let santiago: [FireCase] = [
        FireCase(
            zone: "America/Santiago",
            expression: "0 0 * * *",
            after: "2026-09-04T12:00Z",
            expected: ["2026-09-05T04:00Z", "2026-09-06T04:00Z", "2026-09-07T03:00Z"],
            why: "spring forward at midnight: 00:00 fires at 01:00 −03"
        ),
        FireCase(
            zone: "America/Santiago",
            expression: "0 0 * * *",
            after: "2026-04-03T12:00Z",
            expected: ["2026-04-04T03:00Z", "2026-04-05T04:00Z", "2026-04-06T04:00Z"],
            why: "fall back at midnight: 00:00 of 5 April comes once, after the repeated hour"
        ),
        FireCase(
            zone: "America/Santiago",
            expression: "0 * * * *",
            after: "2026-04-05T01:30Z",
            expected: ["2026-04-05T02:00Z", "2026-04-05T03:00Z", "2026-04-05T04:00Z"],
            why: "fall back: a wildcard fires 23:00 twice, −03 then −04"
        ),
        FireCase(
            zone: "America/Santiago",
            expression: "0 23 * * *",
            after: "2026-04-04T12:00Z",
            expected: ["2026-04-05T02:00Z", "2026-04-06T03:00Z"],
            why: "fall back: 23:00 fires once, at −03"
        ),
        FireCase(
            zone: "America/Santiago",
            expression: "*/30 0 * * *",
            after: "2026-09-05T12:00Z",
            expected: ["2026-09-07T03:00Z", "2026-09-07T03:30Z"],
            why: "spring forward: a wildcard skips the missing hour after midnight"
        ),
    ]

    static let chatham: [FireCase] = [
        FireCase(
            zone: "Pacific/Chatham",
            expression: "0 3 * * *",
            after: "2026-09-25T00:00Z",
            expected: ["2026-09-25T14:15Z", "2026-09-26T14:00Z", "2026-09-27T13:15Z"],
            why: "spring forward at 02:45: 03:00 fires at 03:45 +13:45"
        ),
        FireCase(
            zone: "Pacific/Chatham",
            expression: "0,45 3 * * *",
            after: "2026-09-26T00:00Z",
            expected: ["2026-09-26T14:00Z", "2026-09-27T13:15Z", "2026-09-27T14:00Z"],
            why: "spring forward: skipped 03:00 and real 03:45 are one fire"
        ),
        FireCase(
            zone: "Pacific/Chatham",
            expression: "50 2 * * *",
            after: "2026-09-26T00:00Z",
            expected: ["2026-09-26T14:00Z", "2026-09-27T13:05Z"],
            why: "spring forward: 02:50 is skipped too"
        ),
        FireCase(
            zone: "Pacific/Chatham",
            expression: "0 3 * * *",
            after: "2026-04-04T00:00Z",
            expected: ["2026-04-04T13:15Z", "2026-04-05T14:15Z"],
            why: "fall back at 03:45: 03:00 fires once, at +13:45"
        ),
        FireCase(
            zone: "Pacific/Chatham",
            expression: "0 * * * *",
            after: "2026-04-04T12:00Z",
            expected: ["2026-04-04T12:15Z", "2026-04-04T13:15Z", "2026-04-04T14:15Z", "2026-04-04T15:15Z"],
            why: "fall back: a wildcard fires 03:00 twice"
        ),
    ]

    static let apia: [FireCase] = [
        FireCase(
            zone: "Pacific/Apia",
            expression: "0 0 * * *",
            after: "2011-12-28T12:00Z",
            expected: ["2011-12-29T10:00Z", "2011-12-30T10:00Z", "2011-12-31T10:00Z"],
            why: "30 December 2011 never was: its midnight and 31 December's are one fire"
        ),
        FireCase(
            zone: "Pacific/Apia",
            expression: "0 * * * *",
            after: "2011-12-30T08:30Z",
            expected: ["2011-12-30T09:00Z", "2011-12-30T10:00Z", "2011-12-30T11:00Z"],
            why: "a wildcard goes from 23:00 on the 29th to 00:00 on the 31st"
        ),
    ]

    @Test(arguments: paris + newYork + sydney + lordHowe + santiago + chatham + apia)
    func firesAroundTransitions(_ test: FireCase) throws {
        #expect(try fires(test.expression, test.zone, after: test.after, count: test.expected.count) == test.expected)
    }

    /// The 23-hour and 25-hour days of Paris: `*/30 * * * *` fires 46 and 50 times between the
    /// local midnights.
    @Test func aWildcardFiresOnTheRealMinutesOfShortAndLongDays() throws {
        let spring = try fires("*/30 * * * *", "Europe/Paris", after: "2026-03-28T22:59Z", count: 47)
        #expect(spring.first == "2026-03-28T23:00Z")  // 00:00 CET, 29 March
        #expect(spring[45] == "2026-03-29T21:30Z")  // 23:30 CEST
        #expect(spring[46] == "2026-03-29T22:00Z")  // 00:00 CEST, 30 March
        let autumn = try fires("*/30 * * * *", "Europe/Paris", after: "2026-10-24T21:59Z", count: 51)
        #expect(autumn.first == "2026-10-24T22:00Z")  // 00:00 CEST, 25 October
        #expect(autumn[49] == "2026-10-25T22:30Z")  // 23:30 CET
        #expect(autumn[50] == "2026-10-25T23:00Z")  // 00:00 CET, 26 October
    }
}
