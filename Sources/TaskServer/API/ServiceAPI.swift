import NIOHTTP1
import TaskCore
import TaskGraph

/// Health, readiness, executors, metrics and the API document, as YAML and as JSON.
struct ServiceAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.GET, "/healthz", self.healthz)
        router.add(.GET, "/readyz", self.readyz)
        router.add(.GET, "/v1/executors", self.executors)
        router.add(.GET, "/metrics", self.metrics)
        router.add(.GET, "/openapi.yaml", self.openAPI)
        router.add(.GET, "/openapi.json", self.openAPIJSON)
    }

    @Sendable func healthz(_ request: Request) throws -> Future<Response> {
        Future(value: .json(["status": "ok"]))
    }

    @Sendable func readyz(_ request: Request) throws -> Future<Response> {
        if self.app.isDraining { return Future(value: .json(["status": "draining"], status: .serviceUnavailable)) }
        if !self.app.repository.isAvailable {
            return Future(value: .json(["status": "store unavailable"], status: .serviceUnavailable))
        }
        return Future(value: .json(["status": "ready"]))
    }

    @Sendable func executors(_ request: Request) throws -> Future<Response> {
        var items: [(name: String, item: JSONValue)] = self.app.executors.map { entry in
            let kind = entry.name == Engine.immediateExecutor ? "inline" : "pool"
            let statistics = entry.statistics
            var item: JSONObject = [
                "name": .string(entry.name), "kind": .string(kind), "size": .int(statistics.size),
                "running": .int(statistics.running),
                "queued": .int(statistics.queued), "completed": .int(statistics.completed),
                "queuedByPriority": Self.byPriority(statistics.queuedByPriority),
            ]
            if let rate = statistics.rate {
                item["rate"] = [
                    "limit": .int(rate.count), "per": rate.period == .seconds(60) ? "minute" : "second",
                    "burst": .int(rate.burst),
                    // Two decimals: a fraction says how close the next token is.
                    "tokens": .double(((statistics.tokens ?? 0) * 100).rounded(.down) / 100),
                    "share": .double(statistics.rateShare),
                ]
            }
            return (entry.name, .object(item))
        }
        for name in self.app.externalPools.names {
            guard let statistics = self.app.externalPools.statistics(name) else { continue }
            let item: JSONValue = [
                "name": .string(name), "kind": "external", "queued": .int(statistics.queued),
                "leased": .int(statistics.leased), "workers": .int(statistics.workers),
                "queuedByPriority": Self.byPriority(statistics.queuedByPriority),
            ]
            items.append((name, item))
        }
        items.sort { $0.name < $1.name }
        return Future(value: .json(["items": .array(items.map(\.item))]))
    }

    /// `{"9": 3, "5": 120}`: the priorities with something queued, highest first.
    static func byPriority(_ counts: [Int]) -> JSONValue {
        var object = JSONObject()
        for priority in counts.indices.reversed() where counts[priority] > 0 {
            object[String(priority)] = .int(counts[priority])
        }
        return .object(object)
    }

    @Sendable func metrics(_ request: Request) throws -> Future<Response> {
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "text/plain; version=0.0.4; charset=utf-8")
        let app = self.app
        let contentType = headers
        return self.app.repository.count().map { jobs in
            Response(status: .ok, headers: contentType, body: app.metrics.render(app: app, jobs: jobs))
        }
    }

    @Sendable func openAPI(_ request: Request) throws -> Future<Response> {
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/yaml")
        return Future(value: Response(status: .ok, headers: headers, body: PackageResources.openapi_yaml))
    }

    /// The contract as JSON, for clients and generators that read no YAML: the repository's
    /// openapi.json as embedded, which scripts/openapi-json.py generates from openapi.yaml.
    @Sendable func openAPIJSON(_ request: Request) throws -> Future<Response> {
        Future(value: .json(bytes: PackageResources.openapi_json))
    }
}
