import NIOCore
import NIOHTTP1
import TaskCore

/// A request handler: returns a future of the response, or throws an `HTTPProblem`.
public typealias Handler = @Sendable (Request) throws -> Future<Response>

/// Routes requests by method and path template (`/v1/jobs/{id}/tasks/{taskId}`).
///
/// A path that matches a template but not its method is answered `405` with an `Allow` header
/// listing the methods the template declares (HEAD is never declared; TRACE neither).
public struct Router: Sendable {
    struct Route: Sendable {
        let template: String
        let segments: [Segment]
        var handlers: [String: Handler]
    }

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    private var routes: [Route] = []

    public init() {}

    /// Adds `handler` for `method` on `template`; `{name}` segments are parameters.
    public mutating func add(_ method: HTTPMethod, _ template: String, _ handler: @escaping Handler) {
        if let index = self.routes.firstIndex(where: { $0.template == template }) {
            self.routes[index].handlers[method.rawValue] = handler
            return
        }
        let segments: [Segment] = template.split(separator: "/").map { part in
            if part.hasPrefix("{"), part.hasSuffix("}") { return .parameter(String(part.dropFirst().dropLast())) }
            return .literal(String(part))
        }
        self.routes.append(Route(template: template, segments: segments, handlers: [method.rawValue: handler]))
    }

    /// Every (method, template) pair, for the test that compares routes with the contract.
    public var table: [(method: String, template: String)] {
        self.routes.flatMap { route in route.handlers.keys.sorted().map { ($0, route.template) } }
    }

    /// The handler registered for exactly `method` on `template`.
    func handler(_ method: HTTPMethod, _ template: String) -> Handler? {
        self.routes.first { $0.template == template }?.handlers[method.rawValue]
    }

    /// The outcome of matching a request.
    enum Match {
        case handler(Handler, parameters: [String: String], template: String)
        case methodNotAllowed(allowed: [String], template: String)
        case notFound
    }

    func match(_ method: HTTPMethod, _ segments: [String]) -> Match {
        for route in self.routes where route.segments.count == segments.count {
            var parameters: [String: String] = [:]
            var matched = true
            for (segment, actual) in zip(route.segments, segments) {
                switch segment {
                case .literal(let literal):
                    if literal != actual { matched = false }
                case .parameter(let name):
                    if actual.isEmpty { matched = false }
                    parameters[name] = actual
                }
                if !matched { break }
            }
            guard matched else { continue }
            if let handler = route.handlers[method.rawValue] {
                return .handler(handler, parameters: parameters, template: route.template)
            }
            return .methodNotAllowed(allowed: route.handlers.keys.sorted(), template: route.template)
        }
        return .notFound
    }
}
