import Testing

@testable import TaskGraph

/// `Timestamp(rfc3339:)`: what `runAt` and a schedule preview's `from` accept.
struct TimestampTests {
    @Test(arguments: [
        ("1970-01-01T00:00:00Z", Int64(0)),
        ("2026-11-27T02:30:00Z", Int64(1_795_746_600_000)),
        ("2026-11-27T02:30:00.5Z", Int64(1_795_746_600_500)),
        ("2026-11-27T02:30:00.123456789Z", Int64(1_795_746_600_123)),
        ("2026-11-27t03:30:00+01:00", Int64(1_795_746_600_000)),
        ("2026-11-26T21:00:00-05:30", Int64(1_795_746_600_000)),
        ("2026-11-27T02:30:00z", Int64(1_795_746_600_000)),
        ("2028-02-29T00:00:00Z", Int64(1_835_395_200_000)),
        ("1969-12-31T23:59:59.999Z", Int64(-1)),
    ])
    func readsRFC3339(_ text: String, _ milliseconds: Int64) {
        #expect(Timestamp(rfc3339: text)?.milliseconds == milliseconds)
    }

    @Test func readsWhatItWrites() {
        let now = Timestamp.now()
        #expect(Timestamp(rfc3339: now.rfc3339) == now)
    }

    @Test(arguments: [
        "", "2026-11-27", "2026-11-27T02:30Z", "2026-11-27T02:30:00", "2026-11-27 02:30:00Z",
        "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-11-27T24:00:00Z",
        "2026-11-27T23:60:00Z", "2026-12-31T23:59:60Z", "2026-11-27T02:30:00.Z", "2026-11-27T02:30:00+0100",
        "2026-11-27T02:30:00+24:00", "2026-11-27T02:30:00Zjunk", "+2026-11-27T02:30:00Z", "２026-11-27T02:30:00Z",
    ])
    func refusesWhatIsNotRFC3339(_ text: String) {
        #expect(Timestamp(rfc3339: text) == nil)
    }
}
