import Testing

@testable import TaskServerWorker

/// The worker's HTTP client: what it accepts as a server, and how it words failures.
struct WorkerClientTests {
    @Test func onlyHTTPAndHTTPSServersAreAccepted() throws {
        #expect(throws: WorkerClientError.self) { try WorkerClient(server: "ftp://h", apiKey: nil, caFile: nil) }
        #expect(throws: WorkerClientError.self) { try WorkerClient(server: "nonsense", apiKey: nil, caFile: nil) }
        _ = try WorkerClient(server: "https://example.org:8443/base/", apiKey: "k", caFile: "/dev/null")
    }

    @Test func aClosedPortIsReportedAsNoServer() async throws {
        let client = try WorkerClient(server: "http://127.0.0.1:1", apiKey: nil, caFile: nil)
        let error = try await onThread { () -> WorkerClientError? in
            do {
                _ = try client.post("/v1/leases/heartbeat", json: [], timeout: .seconds(5))
                return nil
            } catch let error as WorkerClientError {
                return error
            }
        }
        #expect(error?.description.hasPrefix("cannot connect to http://127.0.0.1:1: ") == true)
        #expect(error?.description.hasSuffix("(is the server running? set --server or TASKSERVER_URL)") == true)
    }

    @Test func aProblemReadsAsItsStatusCodeDetailAndPointers() {
        let body = #"{"code":"request.invalid","detail":"bad","errors":[{"pointer":"/max","message":"too big"}]}"#
        let problem = WorkerClientError(
            problem: WorkerClient.Response(status: 422, headers: [], body: Array(body.utf8))
        )
        #expect(problem.description == "422 request.invalid: bad\n  /max  too big")
        let plain = WorkerClientError(
            problem: WorkerClient.Response(status: 502, headers: [], body: Array("oops".utf8))
        )
        #expect(plain.description == "the server answered 502: oops")
        let retry = WorkerClient.Response(status: 429, headers: [("retry-after", "2")], body: [])
        #expect(retry.retryAfter == .seconds(2))
    }
}
