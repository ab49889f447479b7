import NIOHTTP1
import TaskCore
import TaskGraph

/// `/v1/definitions` (issue #45): named workflow definitions and their immutable versions —
/// store a version, read the latest or any one, list them, retire a name.
struct DefinitionsAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.GET, "/v1/definitions", self.list)
        router.add(.PUT, "/v1/definitions/{name}", self.put)
        router.add(.GET, "/v1/definitions/{name}", self.get)
        router.add(.DELETE, "/v1/definitions/{name}", self.retire)
        router.add(.GET, "/v1/definitions/{name}/versions", self.versions)
        router.add(.GET, "/v1/definitions/{name}/versions/{version}", self.version)
    }

    /// `201` with the new version (and its `Location`), or `200` with the latest when the body
    /// defines what it does already.
    @Sendable func put(_ request: Request) throws -> Future<Response> {
        let name = request.parameter("name")
        return try self.app.definitions.put(name, self.app.jsonBody(request)).map { put -> Response in
            switch put {
            case .created(let stored):
                var headers = HTTPHeaders()
                headers.add(name: "location", value: "/v1/definitions/\(name)/versions/\(stored.version)")
                return .json(WorkflowDefinition.representation(stored), status: .created, headers: headers)
            case .unchanged(let stored):
                return .json(WorkflowDefinition.representation(stored))
            }
        }
    }

    @Sendable func get(_ request: Request) throws -> Future<Response> {
        let name = request.parameter("name")
        return self.app.definitions.latest(name).map { stored -> Response in
            guard let stored else { throw Definitions.notFound(name) }
            return .json(WorkflowDefinition.representation(stored))
        }
    }

    /// `204`; `404` when there is no such name (or it is retired already).
    @Sendable func retire(_ request: Request) throws -> Future<Response> {
        let name = request.parameter("name")
        return self.app.definitions.retire(name).map { retired -> Response in
            guard retired else { throw Definitions.notFound(name) }
            return Response(status: .noContent)
        }
    }

    /// The latest version of each name, by name: `{"items", "nextCursor"}`.
    @Sendable func list(_ request: Request) throws -> Future<Response> {
        let limit = try request.integerQuery("limit", in: 1...self.app.configuration.maxListLimit) ?? 100
        let after = request.query["cursor"]
        return self.app.definitions.list(limit: limit + 1, after: after).map { items -> Response in
            Self.page(items, limit: limit) { .string($0.name) }
        }
    }

    /// The versions of one name, newest first (a retired name's too).
    @Sendable func versions(_ request: Request) throws -> Future<Response> {
        let name = request.parameter("name")
        let limit = try request.integerQuery("limit", in: 1...self.app.configuration.maxListLimit) ?? 100
        var before: Int?
        if let cursor = request.query["cursor"] {
            guard let version = Int(cursor), version >= 1 else {
                throw HTTPProblem.badQuery("cursor is not one this server issued")
            }
            before = version
        }
        let first = before == nil
        return self.app.definitions.versions(name, limit: limit + 1, before: before).map { items -> Response in
            if items.isEmpty, first { throw Definitions.notFound(name) }
            return Self.page(items, limit: limit) { .string(String($0.version)) }
        }
    }

    /// One version, retired or not.
    @Sendable func version(_ request: Request) throws -> Future<Response> {
        let name = request.parameter("name")
        let text = request.parameter("version")
        guard let number = Int(text), number >= 1 else {
            throw HTTPProblem.notFound("definition.notFound", "no version \(text.prefix(20)) of \(name.prefix(100))")
        }
        return self.app.definitions.version(name, number).map { stored -> Response in
            guard let stored else {
                throw HTTPProblem.notFound("definition.notFound", "no version \(number) of \(name.prefix(100))")
            }
            return .json(WorkflowDefinition.representation(stored))
        }
    }

    /// A page of at most `limit` of `items` (fetched with one more, to know whether more follow).
    private static func page(
        _ items: [StoredDefinition],
        limit: Int,
        cursor: (StoredDefinition) -> JSONValue
    ) -> Response {
        let shown = Array(items.prefix(limit))
        let next: JSONValue = items.count > limit ? shown.last.map(cursor) ?? .null : .null
        return .json(["items": .array(shown.map(WorkflowDefinition.representation)), "nextCursor": next])
    }
}
