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
        let local = self.app.executorItems()
        guard let cluster = self.app.repository.cluster else {
            return Future(value: .json(["items": .array(local.map(JSONValue.object))]))
        }
        let items = Self.clusterView(local, server: cluster.nodeName, peers: cluster.peerExecutors())
        return Future(value: .json(["items": .array(items.map(JSONValue.object))]))
    }

    /// The counts that add up over a cluster's servers.
    static let summedFields = ["size", "running", "queued", "completed", "leased", "workers"]

    /// Each of this server's executors with the cluster's totals, and a per-server breakdown
    /// (`servers`: this server's counts now, the others' as of their last heartbeat, at most a
    /// second old). Servers are identical, so each pool is this server's by name.
    static func clusterView(_ local: [JSONObject], server: String, peers: [String: [JSONObject]]) -> [JSONObject] {
        local.map { item in
            var total = item
            var servers: [JSONValue] = []
            var byPriority = [Int](repeating: 0, count: 10)
            func add(_ counts: JSONObject, of name: String, isLocal: Bool) {
                var entry: JSONObject = ["server": .string(name)]
                for field in Self.summedFields {
                    guard let value = counts[field]?.intValue else { continue }
                    entry[field] = .int(value)
                    if !isLocal { total[field] = .int((total[field]?.intValue ?? 0) + value) }
                }
                if case .object(let queued)? = counts["queuedByPriority"] {
                    for (priority, count) in queued {
                        if let lane = Int(priority), (0...9).contains(lane) { byPriority[lane] += count.intValue ?? 0 }
                    }
                    entry["queuedByPriority"] = .object(queued)
                }
                if let share = counts["rate"]?["share"] { entry["rateShare"] = share }
                servers.append(.object(entry))
            }
            add(item, of: server, isLocal: true)
            for (peer, pools) in peers.sorted(by: { $0.key < $1.key }) {
                if let theirs = pools.first(where: { $0["name"] == item["name"] }) {
                    add(theirs, of: peer, isLocal: false)
                }
            }
            total["queuedByPriority"] = Self.byPriority(byPriority)
            total["servers"] = .array(servers)
            return total
        }
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
