import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// How a `feed` row keeps its entries (`PostgresEventFeed.line`, `entries`): read back as written.
struct PostgresEventFeedTests {
    @Test func entriesAreReadBackAsWritten() throws {
        let events = [
            JobEvent(seq: 1, type: .jobCreated, time: Timestamp(milliseconds: 1_000)),
            JobEvent(
                seq: 7,
                type: .jobFailed,
                time: Timestamp(milliseconds: 2_000),
                data: ["error": ["code": "x.y", "message": "a\ttab and a\nnewline"]]
            ),
        ]
        var bytes: [UInt8] = []
        for (index, event) in events.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: "\n")) }
            PostgresEventFeed.line(jobID: "job\(index)", event, to: &bytes)
        }
        let read = try bytes.withUnsafeBytes { try PostgresEventFeed.entries($0) }
        #expect(read.map(\.jobID) == ["job0", "job1"])
        #expect(read.map(\.event) == events)
    }
}
