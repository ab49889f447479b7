import Testing

@testable import TaskServerWorker

/// The client of the API that the worker and the terminal commands share: what it accepts as a
/// server, and how it words failures.
struct ServerClientTests {
    @Test func onlyHTTPAndHTTPSServersAreAccepted() throws {
        #expect(throws: ServerClientError.self) { try ServerClient(server: "ftp://h", apiKey: nil, caFile: nil) }
        #expect(throws: ServerClientError.self) { try ServerClient(server: "nonsense", apiKey: nil, caFile: nil) }
        _ = try ServerClient(server: "https://example.org:8443/base/", apiKey: "k", caFile: "/dev/null")
    }

    @Test func aClosedPortIsReportedAsNoServer() async throws {
        let client = try ServerClient(server: "http://127.0.0.1:1", apiKey: nil, caFile: nil)
        let error = try await onThread { () -> ServerClientError? in
            do {
                _ = try client.post("/v1/leases/heartbeat", json: [], timeout: .seconds(5))
                return nil
            } catch let error as ServerClientError {
                return error
            }
        }
        #expect(error?.description.hasPrefix("cannot connect to http://127.0.0.1:1: ") == true)
        #expect(error?.description.hasSuffix("(is the server running? set --server or TASKSERVER_URL)") == true)
    }

    @Test func aProblemReadsAsItsStatusCodeDetailAndPointers() {
        let body = #"{"code":"request.invalid","detail":"bad","errors":[{"pointer":"/max","message":"too big"}]}"#
        let problem = ServerClientError(
            problem: ServerClient.Response(status: 422, headers: [], body: Array(body.utf8))
        )
        #expect(problem.description == "422 request.invalid: bad\n  /max  too big")
        let plain = ServerClientError(
            problem: ServerClient.Response(status: 502, headers: [], body: Array("oops".utf8))
        )
        #expect(plain.description == "the server answered 502: oops")
        let retry = ServerClient.Response(status: 429, headers: [("retry-after", "2")], body: [])
        #expect(retry.retryAfter == .seconds(2))
    }
}
