import Testing

@testable import TaskServer

/// The cluster channel's payloads (`NOTIFY taskserver`), parsed once into `ClusterNotice`: each
/// kind round-trips, the forms the SQL statements build parse, and anything else is ignored.
@Suite struct ClusterNoticeTests {
    @Test func everyNoticeRoundTrips() {
        let notices: [ClusterNotice] = [
            .cancel(job: "01abc"), .command(id: 42, target: .job("01abc")), .command(id: 7, target: .server("n2")),
            .answered(id: 9), .ended(jobs: ["a", "b"]), .changed(jobs: ["c"]), .schedule(id: "nightly"),
            .queued(server: "n1", count: 3, pool: "images"), .freed(key: "customer 42"), .left(server: "n2"),
        ]
        for notice in notices { #expect(ClusterNotice(payload: notice.payload) == notice) }
    }

    @Test func theFormsTheStatementsBuildParse() {
        // `'command ' || id || ' ' || coalesce(job_id, '@' || server)`, `'answered ' || id`, …
        #expect(ClusterNotice(payload: "command 12 @n1") == .command(id: 12, target: .server("n1")))
        #expect(ClusterNotice(payload: "command 12 01xyz") == .command(id: 12, target: .job("01xyz")))
        #expect(ClusterNotice(payload: "answered 3") == .answered(id: 3))
        #expect(ClusterNotice(payload: "cancel 01xyz") == .cancel(job: "01xyz"))
        #expect(ClusterNotice(payload: "schedule s-1") == .schedule(id: "s-1"))
        #expect(ClusterNotice(payload: "freed " + "k") == .freed(key: "k"))
        #expect(ClusterNotice(payload: "left n3") == .left(server: "n3"))
    }

    @Test func malformedPayloadsAreIgnored() {
        for payload in [
            "", "ended", "changed", "command x 1", "command 1", "answered", "answered x", "hello 1", "cancel",
        ] {
            #expect(ClusterNotice(payload: payload) == nil, "\(payload)")
        }
    }

    @Test func longListsAreSplitBelowPostgreSQLsLimit() {
        let ids = (0..<2000).map { "01job\($0)" }
        let payloads = ClusterNotice.listPayloads("changed", ids)
        #expect(payloads.count > 1)
        #expect(payloads.allSatisfy { $0.utf8.count <= ClusterNotice.maxPayloadBytes })
        let parsed = payloads.flatMap { payload -> [String] in
            guard case .changed(let jobs) = ClusterNotice(payload: payload) else { return [] }
            return jobs
        }
        #expect(parsed == ids)
        #expect(ClusterNotice.listPayloads("ended", []).isEmpty)
    }
}
