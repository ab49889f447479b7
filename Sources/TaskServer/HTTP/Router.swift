import NIOCore
import NIOHTTP1
import TaskCore

/// A request handler: returns a future of the response, or throws an `HTTPProblem`.
public typealias Handler = @Sendable (Request) throws -> Future<Response>

/// Routes requests by method and path template (`/v1/jobs/{id}/tasks/{taskId}`).
///
/// A path that matches a template but not its method is answered `405` with an `Allow` header
/// listing the methods the template declares, and `HEAD` with `GET` (TRACE never).
public struct Router: Sendable {
    struct Route: Sendable {
        let template: String
        let segments: [Segment]
        var handlers: [String: Handler]
        /// The path holds a capability (a lease id): logs and error messages show the template.
        let redactsPath: Bool
    }

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    private var routes: [Route] = []

    public init() {}

    /// Adds `handler` for `method` on `template`; `{name}` segments are parameters.
    /// Adds `handler` for `method` on `template`. `redactsPath`: the path's parameters are secrets
    /// (a lease id is a capability, SPEC §6): no log line and no error message shows such a path —
    /// nor any path under the template's leading literal segments, matched or not.
    public mutating func add(
        _ method: HTTPMethod,
        _ template: String,
        redactsPath: Bool = false,
        _ handler: @escaping Handler
    ) {
        if let index = self.routes.firstIndex(where: { $0.template == template }) {
            self.routes[index].handlers[method.rawValue] = handler
            return
        }
        let segments: [Segment] = template.split(separator: "/").map { part in
            if part.hasPrefix("{"), part.hasSuffix("}") { return .parameter(String(part.dropFirst().dropLast())) }
            return .literal(String(part))
        }
        self.routes.append(
            Route(
                template: template,
                segments: segments,
                handlers: [method.rawValue: handler],
                redactsPath: redactsPath
            )
        )
    }

    /// The same routes, each handler replaced by `transform(template, handler)`.
    func wrapping(_ transform: (_ template: String, _ handler: @escaping Handler) -> Handler) -> Router {
        var router = self
        for index in router.routes.indices {
            let template = router.routes[index].template
            router.routes[index].handlers = router.routes[index].handlers.mapValues { transform(template, $0) }
        }
        return router
    }

    /// How a request's path may be shown (logs, error messages): as it is, or — under a route
    /// that redacts its path — as the matched template, else the redacted prefix and `…`.
    func shownPath(_ path: String, segments: [String], template: String?) -> String {
        for route in self.routes where route.redactsPath {
            let literals = route.segments.prefix { if case .literal = $0 { true } else { false } }
            guard segments.count >= literals.count,
                zip(literals, segments).allSatisfy({ $0 == .literal($1) })
            else { continue }
            if let template { return template }
            let prefix = literals.map { segment -> String in
                if case .literal(let text) = segment { return text }
                return ""
            }
            return "/" + prefix.joined(separator: "/") + "/…"
        }
        return path
    }

    /// Every (method, template) pair, for the test that compares routes with the contract.
    public var table: [(method: String, template: String)] {
        self.routes.flatMap { route in route.handlers.keys.sorted().map { ($0, route.template) } }
    }

    /// The outcome of matching a request.
    enum Match {
        case handler(Handler, parameters: [String: String], template: String)
        case methodNotAllowed(allowed: [String], template: String)
        case notFound
    }

    /// `HEAD` is answered by a template's `GET` handler (the response goes out without its body,
    /// RFC 9110 §9.3.2), and listed in `Allow` wherever `GET` is. A parameter may be empty (`//` in
    /// a path): the handler answers for it (e.g. `lease.notFound`), as for any other value.
    func match(_ method: HTTPMethod, _ segments: [String]) -> Match {
        for route in self.routes where route.segments.count == segments.count {
            var parameters: [String: String] = [:]
            var matched = true
            for (segment, actual) in zip(route.segments, segments) {
                switch segment {
                case .literal(let literal):
                    if literal != actual { matched = false }
                case .parameter(let name):
                    parameters[name] = actual
                }
                if !matched { break }
            }
            guard matched else { continue }
            if let handler = route.handlers[method.rawValue] ?? (method == .HEAD ? route.handlers["GET"] : nil) {
                return .handler(handler, parameters: parameters, template: route.template)
            }
            var allowed = Array(route.handlers.keys)
            if route.handlers["GET"] != nil { allowed.append("HEAD") }
            return .methodNotAllowed(allowed: allowed.sorted(), template: route.template)
        }
        return .notFound
    }
}
