import NIOHTTP1
import Synchronization
import TaskCore
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

#if canImport(Glibc)
import Glibc
#endif

/// The libcurl client against real receivers on loopback.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowdown)))
struct CurlClientTests {
    /// Runs `body` with a fresh client, shut down afterwards.
    @discardableResult
    func withClient<T>(
        _ configuration: CurlClient.Configuration = .init(),
        _ body: (CurlClient) async throws -> T
    ) async throws -> T {
        let client = CurlClient(configuration: configuration)
        defer { client.shutdown() }
        return try await body(client)
    }

    @Test func getReturnsStatusHeadersAndBody() async throws {
        let receiver = try await TestReceiver.start { request, _ in
            var headers = HTTPHeaders()
            headers.add(name: "X-Echo", value: request.header("x-token") ?? "none")
            return Future(value: Response(status: .ok, headers: headers, body: Array("hello \(request.uri)".utf8)))
        }
        defer { Task { await receiver.stop() } }
        try await withClient { client in
            let response = try await client.send(
                OutboundRequest(url: receiver.url + "/a?b=1", headers: [("X-Token", "t1")])
            ).value
            #expect(response.status == 200)
            #expect(response.header("x-echo") == "t1")
            #expect(response.header("X-ECHO") == "t1")
            #expect(String(decoding: response.body, as: UTF8.self) == "hello /a?b=1")
            let request = try #require(receiver.requests.first)
            #expect(request.method == "GET")
            #expect(request.header("user-agent") == "TaskServer/\(TaskServerVersion.current)")
            #expect(request.header("expect") == nil)
        }
    }

    @Test func postSendsTheBodyAsIsWithoutInventingAContentType() async throws {
        let receiver = try await TestReceiver.answering(.created)
        defer { Task { await receiver.stop() } }
        try await withClient { client in
            // Large enough that libcurl would otherwise send `Expect: 100-continue`.
            let body = [UInt8](repeating: UInt8(ascii: "z"), count: 5000) + [0, 1, 2]
            let response = try await client.send(OutboundRequest(method: "POST", url: receiver.url + "/p", body: body))
                .value
            #expect(response.status == 201)
            let request = try #require(receiver.requests.first)
            #expect(request.method == "POST")
            #expect(request.body == body)
            #expect(request.header("content-type") == nil)
            #expect(request.header("expect") == nil)
            _ = try await client.send(OutboundRequest(method: "DELETE", url: receiver.url + "/d")).value
            _ = try await client.send(
                OutboundRequest(
                    method: "PUT",
                    url: receiver.url + "/u",
                    headers: [("Content-Type", "text/plain")],
                    body: Array("x".utf8)
                )
            ).value
            let requests = receiver.requests
            #expect(requests.map(\.method) == ["POST", "DELETE", "PUT"])
            #expect(requests[2].header("content-type") == "text/plain")
            #expect(requests[2].text == "x")
        }
    }

    @Test func sequentialRequestsReuseOneKeepAliveConnection() async throws {
        let receiver = try await TestReceiver.answering(.ok)
        defer { Task { await receiver.stop() } }
        try await withClient { client in
            for index in 0..<20 {
                let response = try await client.send(OutboundRequest(url: receiver.url + "/\(index)")).value
                #expect(response.status == 200)
            }
            #expect(receiver.server.connectionCount == 1)
        }
    }

    @Test func connectionRefusedIsAConnectError() async throws {
        let port = try closedPort()
        try await withClient { client in
            await #expect(throws: OutboundError(.connect, "")) {
                try await client.send(OutboundRequest(url: "http://127.0.0.1:\(port)/x")).value
            }
        }
    }

    @Test func aReceiverThatNeverAnswersTimesOut() async throws {
        let receiver = try await TestReceiver.start { _, _ in never() }
        defer { Task { await receiver.stop() } }
        try await withClient { client in
            let (result, ms) = await elapsedMilliseconds {
                await capture {
                    try await client.send(OutboundRequest(url: receiver.url + "/slow", timeout: .milliseconds(300)))
                        .value
                }
            }
            #expect(throws: OutboundError(.timeout, "")) { try result.get() }
            #expect(ms >= 250)
            // Without the timeout this would wait forever; the bound only has to tell the two apart.
            // The landing machine once took 5.4 s here with ~240 tests sharing two cores.
            #expect(ms < TestTiming.ms(20000))
            // The client closed the connection it gave up on.
            let closed = try await receiver.waitForNoConnections()
            #expect(closed)
        }
    }

    @Test func cancellationAbortsATransferInFlightAndClosesItsConnection() async throws {
        let receiver = try await TestReceiver.start { _, _ in never() }
        defer { Task { await receiver.stop() } }
        try await withClient { client in
            let source = CancellationTokenSource()
            let future = client.send(
                OutboundRequest(url: receiver.url + "/hang", timeout: .seconds(60)),
                cancellationToken: source.token
            )
            _ = try await receiver.waitForRequests(1)
            #expect(receiver.server.connectionCount == 1)
            let (_, ms) = await elapsedMilliseconds {
                source.cancel()
                _ = try? await future.value
            }
            #expect(future.isCancelled)
            // At once, in practice a few milliseconds; generous for a loaded machine.
            #expect(ms < TestTiming.ms(20000))
            #expect(try await receiver.waitForNoConnections())
            #expect(client.statistics.active == 0)
            // A token cancelled before sending never reaches the receiver.
            let early = client.send(OutboundRequest(url: receiver.url + "/never"), cancellationToken: source.token)
            #expect(early.isCancelled)
            #expect(receiver.requests.count == 1)
        }
    }

    @Test func aMetadataAddressIsRefusedWithoutAConnection() async throws {
        try await withClient { client in
            for url in [
                "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]:80/", "http://100.100.100.200/",
                "http://[::ffff:169.254.169.254]/",
            ] {
                do {
                    _ = try await client.send(OutboundRequest(url: url, timeout: .seconds(5))).value
                    Issue.record("\(url) was not refused")
                } catch let error as OutboundError {
                    #expect(error.kind == .refusedByPolicy, "\(url): \(error)")
                    #expect(error.message.contains("built-in rule"), "\(error)")
                }
            }
        }
    }

    @Test func denyAndAllowRangesApplyToTheResolvedAddress() async throws {
        let receiver = try await TestReceiver.answering(.ok)
        defer { Task { await receiver.stop() } }
        // Loopback denied, but one /32 inside it re-opened: the most specific range wins.
        let policy = AddressPolicy(allow: [CIDR("127.0.0.1/32")!], deny: [CIDR("127.0.0.0/8")!, CIDR("::1/128")!])
        try await withClient(.init(policy: policy)) { client in
            let allowed = try await client.send(OutboundRequest(url: "http://127.0.0.1:\(receiver.port)/ok")).value
            #expect(allowed.status == 200)
            // The receiver listens on 127.0.0.1 only, but 127.0.0.2 is denied before any connection.
            do {
                _ = try await client.send(OutboundRequest(url: "http://127.0.0.2:\(receiver.port)/no")).value
                Issue.record("127.0.0.2 was not refused")
            } catch let error as OutboundError {
                #expect(error.kind == .refusedByPolicy)
                #expect(error.address == "127.0.0.2")
                #expect(error.message.contains("--outbound-deny 127.0.0.0/8"), "\(error)")
            }
        }
        // A host name is judged by the address it resolves to: deny all of loopback and
        // `localhost` is refused, although its name says nothing about the address.
        let strict = AddressPolicy(deny: [CIDR("127.0.0.0/8")!, CIDR("::1/128")!])
        try await withClient(.init(policy: strict)) { client in
            await #expect(throws: OutboundError(.refusedByPolicy, "")) {
                try await client.send(OutboundRequest(url: "http://localhost:\(receiver.port)/name")).value
            }
        }
        #expect(receiver.requests.count == 1)
    }

    @Test func aResponseBodyOverTheLimitAbortsTheTransfer() async throws {
        let receiver = try await TestReceiver.start { _, _ in
            Future(value: Response(status: .ok, body: [UInt8](repeating: 65, count: 300_000)))
        }
        defer { Task { await receiver.stop() } }
        try await withClient(.init(maxResponseBytes: 100_000)) { client in
            await #expect(throws: OutboundError(.responseTooLarge, "")) {
                try await client.send(OutboundRequest(url: receiver.url + "/big")).value
            }
            let fits = try await client.send(OutboundRequest(url: receiver.url + "/big", maxResponseBytes: 400_000))
                .value
            #expect(fits.body.count == 300_000)
        }
    }

    @Test func redirectsAreNotFollowedUnlessAsked() async throws {
        let receiver = try await TestReceiver.start { request, _ in
            if request.uri == "/from" {
                var headers = HTTPHeaders()
                headers.add(name: "location", value: "/to")
                return Future(value: Response(status: .found, headers: headers))
            }
            return Future(value: Response(status: .ok, body: Array("arrived".utf8)))
        }
        defer { Task { await receiver.stop() } }
        try await withClient { client in
            let plain = try await client.send(OutboundRequest(url: receiver.url + "/from")).value
            #expect(plain.status == 302)
            let followed = try await client.send(OutboundRequest(url: receiver.url + "/from", followRedirects: true))
                .value
            #expect(followed.status == 200)
            #expect(String(decoding: followed.body, as: UTF8.self) == "arrived")
        }
    }

    @Test func invalidRequestsFailWithoutASocket() async throws {
        try await withClient { client in
            await #expect(throws: OutboundError(.invalidRequest, "")) {
                try await client.send(OutboundRequest(url: "ftp://127.0.0.1/file")).value
            }
            await #expect(throws: OutboundError(.invalidRequest, "")) {
                try await client.send(
                    OutboundRequest(url: "http://127.0.0.1:1/", headers: [("X-Bad", "a\r\nInjected: 1")])
                ).value
            }
        }
    }

    @Test func concurrencyIsBoundedAndTheRestWaits() async throws {
        let receiver = try await TestReceiver.start { _, _ in delayed(.milliseconds(50), Response(status: .ok)) }
        defer { Task { await receiver.stop() } }
        try await withClient(.init(maxConcurrentTransfers: 4)) { client in
            let futures = (0..<40).map { client.send(OutboundRequest(url: receiver.url + "/\($0)")) }
            for future in futures {
                let response = try await future.value
                #expect(response.status == 200)
            }
            #expect(receiver.requests.count == 40)
            #expect(receiver.maxInFlight <= 4)
            #expect(receiver.maxInFlight >= 2)
            #expect(client.statistics == CurlClient.Statistics(active: 0, queued: 0, completed: 40))
        }
    }

    @Test func queuedRequestsStartInFIFOOrder() async throws {
        let receiver = try await TestReceiver.start { _, _ in delayed(.milliseconds(5), Response(status: .ok)) }
        defer { Task { await receiver.stop() } }
        // One transfer at a time: each request reaches the receiver only after the previous answer.
        try await withClient(.init(maxConcurrentTransfers: 1)) { client in
            let futures = (0..<8).map { client.send(OutboundRequest(url: receiver.url + "/\($0)")) }
            for future in futures { _ = try await future.value }
            #expect(receiver.requests.map(\.uri) == (0..<8).map { "/\($0)" })
            #expect(receiver.maxInFlight == 1)
        }
    }

    @Test func aRequestQueuedPastItsDeadlineTimesOutWithoutBeingSent() async throws {
        let receiver = try await TestReceiver.start { _, _ in never() }
        defer { Task { await receiver.stop() } }
        try await withClient(.init(maxConcurrentTransfers: 1)) { client in
            let source = CancellationTokenSource()
            let blocker = client.send(
                OutboundRequest(url: receiver.url + "/blocker", timeout: .seconds(60)),
                cancellationToken: source.token
            )
            _ = try await receiver.waitForRequests(1)
            await #expect(throws: OutboundError(.timeout, "")) {
                try await client.send(OutboundRequest(url: receiver.url + "/queued", timeout: .milliseconds(200))).value
            }
            source.cancel()
            _ = try? await blocker.value
            #expect(blocker.isCancelled)
            #expect(receiver.requests.map(\.uri) == ["/blocker"])
        }
    }

    @Test func shutdownFailsWhatIsInFlightAndRefusesNewRequests() async throws {
        let receiver = try await TestReceiver.start { _, _ in never() }
        defer { Task { await receiver.stop() } }
        let client = CurlClient()
        let inFlight = client.send(OutboundRequest(url: receiver.url + "/hang"))
        _ = try await receiver.waitForRequests(1)
        client.shutdown()
        await #expect(throws: OutboundError(.shutdown, "")) { try await inFlight.value }
        await #expect(throws: OutboundError(.shutdown, "")) {
            try await client.send(OutboundRequest(url: receiver.url + "/late")).value
        }
        #expect(try await receiver.waitForNoConnections())
    }
}

/// A loopback port with no listener: a socket bound to it that never listens (and is never closed).
func closedPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw SocketError.system("socket", errno) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
            bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        throw SocketError.system("bind", errno)
    }
    // The socket stays open, bound and not listening, for the rest of the process: a connection
    // to it is refused, and no server of another test can take the port meanwhile (closed at
    // once, it was taken now and then under TSan, and the test saw that server's answer).
    return Int(UInt16(bigEndian: address.sin_port))
}

/// The outcome of `body` as a `Result`.
func capture<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do { return .success(try await body()) } catch { return .failure(error) }
}
