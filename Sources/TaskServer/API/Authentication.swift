import NIOHTTP1
import TaskCore

/// Bearer API keys (`--api-key`): `/v1/*` requires `Authorization: Bearer KEY`; `/healthz`,
/// `/readyz`, `/metrics`, `/openapi.yaml` and `/openapi.json` stay open. Keys are compared in constant time.
struct Authentication: Sendable {
    let keys: [[UInt8]]

    init(keys: [String]) {
        self.keys = keys.map { Array($0.utf8) }
    }

    /// `router` with every `/v1/` handler wrapped in the key check.
    func protect(_ router: Router) -> Router {
        router.wrapping { template, handler in
            guard template.hasPrefix("/v1/") else { return handler }
            return { request in
                try self.check(request)
                return try handler(request)
            }
        }
    }

    func check(_ request: Request) throws(HTTPProblem) {
        var headers = HTTPHeaders()
        headers.add(name: "www-authenticate", value: "Bearer")
        guard let authorization = request.headers.first(name: "authorization") else {
            throw HTTPProblem(
                .unauthorized,
                code: "auth.required",
                detail: "send Authorization: Bearer <API key>",
                headers: headers
            )
        }
        let prefix = "bearer "
        guard authorization.count > prefix.count, authorization.lowercased().hasPrefix(prefix) else {
            headers.replaceOrAdd(name: "www-authenticate", value: "Bearer error=\"invalid_request\"")
            throw HTTPProblem(
                .unauthorized,
                code: "auth.invalid",
                detail: "the Authorization header must be Bearer <API key>",
                headers: headers
            )
        }
        let presented = Array(authorization.utf8.dropFirst(prefix.utf8.count))
        var matched = false
        for key in self.keys where Self.constantTimeEquals(key, presented) { matched = true }
        guard matched else {
            headers.replaceOrAdd(name: "www-authenticate", value: "Bearer error=\"invalid_token\"")
            throw HTTPProblem(.unauthorized, code: "auth.invalid", detail: "the API key is not valid", headers: headers)
        }
    }

    /// Compares without an early exit, so the time taken does not reveal how much of a key matched.
    static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        // The length difference is kept whole: truncated to a byte, lengths 256 apart compared equal.
        var difference = UInt(bitPattern: a.count ^ b.count)
        let count = max(a.count, b.count)
        for i in 0..<count {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= UInt(x ^ y)
        }
        return difference == 0
    }
}
