import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// API keys (`--api-key`): `/v1/*` needs `Authorization: Bearer KEY`; the service routes stay open
/// (SPEC §3.9, §5).
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct AuthenticationTests {
    static let keys = ["first-key-0123456789", "second-key-abcdefghij"]

    static func withKeys(_ body: (TestServer) async throws -> Void) async throws {
        try await withServer({ $0.apiKeys = Self.keys }, body)
    }

    static func bearer(_ key: String) -> [(String, String)] { [("Authorization", "Bearer \(key)")] }

    @Test func aRequestWithoutAKeyIs401AuthRequired() async throws {
        try await Self.withKeys { server in
            let response = try await server.get("/v1/jobs")
            expectProblem(response, 401, "auth.required", detail: "send Authorization: Bearer <API key>")
            #expect(response.header("www-authenticate")?.hasPrefix("Bearer") == true)
            // Even for jobs that do not exist: a client without a key learns nothing.
            expectProblem(
                try await server.get("/v1/jobs/nope"),
                401,
                "auth.required",
                detail: "send Authorization: Bearer <API key>"
            )
            expectProblem(
                try await server.post("/v1/jobs", json: Jobs.value(1)),
                401,
                "auth.required",
                detail: "send Authorization: Bearer <API key>"
            )
        }
    }

    @Test(arguments: [
        "wrong-key-0123456789", "first-key-012345678", "first-key-01234567890", "FIRST-KEY-0123456789",
        " first-key-0123456789",
    ])
    func aWrongKeyIs401AuthInvalid(_ key: String) async throws {
        try await Self.withKeys { server in
            let response = try await server.get("/v1/jobs", headers: Self.bearer(key))
            expectProblem(response, 401, "auth.invalid", detail: "the API key is not valid")
            #expect(response.header("www-authenticate")?.hasPrefix("Bearer") == true)
        }
    }

    /// openapi.yaml: `WWW-Authenticate` is "`Bearer`, with an `error` attribute when the token is
    /// wrong" (RFC 6750 §3: `error="invalid_token"`).
    @Test func aWrongKeysChallengeNamesTheError() async throws {
        try await Self.withKeys { server in
            let response = try await server.get("/v1/jobs", headers: Self.bearer("wrong-key-0123456789"))
            #expect(response.status == 401)
            #expect(response.header("www-authenticate") == #"Bearer error="invalid_token""#)
            let missing = try await server.get("/v1/jobs")
            #expect(missing.header("www-authenticate") == "Bearer")
        }
    }

    @Test(arguments: ["Basic Zmlyc3Q6a2V5", "Bearer", "Bearer ", "first-key-0123456789", "Token first-key-0123456789"])
    func anAuthorizationThatIsNotBearerIs401AuthInvalid(_ value: String) async throws {
        try await Self.withKeys { server in
            let response = try await server.get("/v1/jobs", headers: [("Authorization", value)])
            expectProblem(response, 401, "auth.invalid", detail: "the Authorization header must be Bearer <API key>")
            #expect(response.header("www-authenticate") == #"Bearer error="invalid_request""#)
        }
    }

    @Test func everyConfiguredKeyIsAcceptedAndTheSchemeIsCaseInsensitive() async throws {
        try await Self.withKeys { server in
            let created = try await server.post(
                "/v1/jobs?waitMs=10000",
                json: Jobs.value(1),
                headers: Self.bearer(Self.keys[0])
            )
            #expect(created.status == 201)
            let id = try #require(created.json["id"]?.stringValue)
            #expect(try await server.get("/v1/jobs/\(id)", headers: Self.bearer(Self.keys[1])).status == 200)
            #expect(
                try await server.get("/v1/jobs/\(id)", headers: [("Authorization", "bearer \(Self.keys[1])")]).status
                    == 200
            )
            #expect(
                try await server.get("/v1/jobs/\(id)", headers: [("Authorization", "BEARER \(Self.keys[0])")]).status
                    == 200
            )
        }
    }

    @Test func theServiceRoutesStayOpen() async throws {
        try await Self.withKeys { server async throws in
            #expect(try await server.get("/healthz").status == 200)
            #expect(try await server.get("/readyz").status == 200)
            #expect(try await server.get("/metrics").status == 200)
            #expect(try await server.get("/openapi.yaml").status == 200)
        }
    }

    @Test func everyV1RouteRequiresAKey() async throws {
        try await Self.withKeys { server in
            let routes = server.app.router.table.filter { $0.template.hasPrefix("/v1/") }
            #expect(routes.count >= 12)
            for route in routes {
                let target = route.template.replacingOccurrences(of: "{id}", with: "j1").replacingOccurrences(
                    of: "{taskId}",
                    with: "t1"
                )
                let body: [UInt8]? = route.method == "POST" ? Jobs.value(1).jsonBytes : nil
                let headers: [(String, String)] = body == nil ? [] : [("Content-Type", "application/json")]
                let response = try await server.request(route.method, target, headers: headers, body: body)
                expectProblem(response, 401, "auth.required", detail: "send Authorization: Bearer <API key>")
            }
            #expect(try await server.get("/v1/jobs").status == 401)
            #expect(try await server.get("/v1/jobs", headers: Self.bearer(Self.keys[0])).status == 200)
        }
    }

    @Test func withoutKeysNothingIsRequired() async throws {
        try await withServer { server async throws in
            #expect(try await server.get("/v1/jobs").status == 200)
            #expect(try await server.get("/v1/jobs", headers: Self.bearer("anything-at-all-here")).status == 200)
        }
    }

    // MARK: - Constant-time comparison

    @Test func constantTimeEqualsComparesWholeKeys() {
        func equal(_ a: String, _ b: String) -> Bool { Authentication.constantTimeEquals(Array(a.utf8), Array(b.utf8)) }
        #expect(equal("first-key-0123456789", "first-key-0123456789"))
        #expect(equal("", ""))
        #expect(!equal("first-key-0123456789", "first-key-012345678"))
        #expect(!equal("first-key-012345678", "first-key-0123456789"))
        #expect(!equal("first-key-0123456789", "first-key-0123456780"))
        #expect(!equal("first-key-0123456789", "xirst-key-0123456789"))
        #expect(!equal("a", ""))
        #expect(!equal("", "a"))
        #expect(!equal("ab", "ba"))
    }

    @Test func constantTimeEqualsIsNotFooledByLengthsThatDifferByAMultipleOf256() {
        let key = Array("first-key-0123456789".utf8)
        let padded = key + [UInt8](repeating: 0, count: 256)
        #expect(!Authentication.constantTimeEquals(key, padded))
        #expect(!Authentication.constantTimeEquals(padded, key))
        #expect(!Authentication.constantTimeEquals([], [UInt8](repeating: 0, count: 512)))
    }
}
