import Synchronization
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// Mutated job bodies never make the server answer 5xx, and every refusal is a problem document
/// with a `code` (SPEC §3.9: "The server never answers 500 to any input").
@Suite(.timeLimit(.minutes(1 * TestTiming.slowdown)))
struct FuzzTests {
    /// Valid jobs covering every node type; they finish quickly when run.
    static let seedTexts: [String] = [
        #"""
        {"name": "import", "input": {"items": [1, 2, 3], "user": "ann"}, "labels": {"team": "data"}, "timeoutMs": 10000,
         "graph": {"type": "series", "id": "main", "steps": [
            {"type": "task", "id": "pick", "action": "value", "params": {"value": "${input.items}"}, "retry": {"maxAttempts": 2, "delayMs": 1}},
            {"type": "map", "id": "each", "mode": "parallel", "maxConcurrency": 2,
             "template": {"type": "task", "id": "echo", "action": "value", "executor": "immediate", "params": {"value": {"item": "${input}", "job": "${job.id}"}}}}]}}
        """#,
        #"""
        {"graph": {"type": "parallel", "id": "fan", "mode": "settled", "failFast": false, "branches": [
            {"type": "task", "id": "ok", "action": "value", "params": {"value": 1}},
            {"type": "task", "id": "bad", "action": "fail", "params": {"code": "x.bad", "message": "no", "details": {"n": 1}}},
            {"type": "task", "id": "nap", "action": "delay", "params": {"ms": 1}, "timeoutMs": 1000}]}}
        """#,
        #"""
        {"input": 5,
         "graph": {"type": "continuation", "id": "guard", "on": "failure",
            "antecedent": {"type": "task", "id": "try", "action": "fail", "params": {"message": "boom"}},
            "then": {"type": "task", "id": "recover", "action": "value", "input": "${input}", "params": {"value": "recovered ${tasks.try.state}"}}}}
        """#,
        #"""
        {"graph": {"type": "dynamic", "id": "dyn",
            "source": {"type": "task", "id": "plan", "action": "value",
                "params": {"value": {"graph": {"type": "task", "id": "x", "action": "value", "params": {"value": [true, null, 1.5, "s"]}}, "input": 3}}}}}
        """#,
        #"""
        {"graph": {"type": "parallel", "mode": "any", "maxConcurrency": 2, "branches": [
            {"type": "series", "steps": [{"type": "task", "action": "value"}, {"type": "task", "action": "value", "params": {"value": "$${literal}"}}]},
            {"type": "map", "items": [1, 2], "mode": "series", "template": {"type": "task", "action": "fail", "params": {"code": "m.x"}}}]}}
        """#,
    ]

    static let seeds: [JSONValue] = seedTexts.map(jsonValue)

    /// Values of every JSON type, including awkward ones, for type swaps.
    static let replacements: [JSONValue] =
        (jsonValue(
            #"""
            [null, true, false, 0, -1, 1, 86400001, 9223372036854775807, -9223372036854775808, 1.5, -0.0, 1e308, "", "x", "${", "${input",
             "${nope.x}", "$${x}", "task", "series", "parallel", "map", "dynamic", "continuation", "value", "fail", "delay", "await", "http",
             "default", "immediate", [], [1], [[]], {}, {"type": "task"}, {"type": "task", "action": "value"},
             [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
            """#
        ).arrayValue ?? []) + [.string(String(repeating: "é", count: 300))]

    /// Mutates `seed` in one of several ways.
    static func mutate(_ seed: JSONValue, _ random: inout SplitMix64) -> [UInt8] {
        var bytes = seed.jsonBytes
        switch random.next() % 8 {
        case 0:  // flip bytes
            for _ in 0..<Int(random.next() % 4 + 1) where !bytes.isEmpty {
                bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
            }
        case 1:  // delete a range
            guard !bytes.isEmpty else { break }
            let start = Int(random.next() % UInt64(bytes.count))
            let end = min(bytes.count, start + Int(random.next() % 16) + 1)
            bytes.removeSubrange(start..<end)
        case 2:  // truncate
            bytes = Array(bytes.prefix(Int(random.next() % UInt64(bytes.count + 1))))
        case 3:  // insert structural characters
            let noise: [UInt8] = Array("{}[],:\"\\0-e.tfn \u{0}".utf8)
            for _ in 0..<Int(random.next() % 4 + 1) {
                let at = Int(random.next() % UInt64(bytes.count + 1))
                bytes.insert(noise[Int(random.next() % UInt64(noise.count))], at: at)
            }
        case 4, 5:  // swap the type of one value
            bytes = Self.replaceRandomValue(in: seed, &random).jsonBytes
        case 6:  // drop a member
            bytes = Self.dropRandomMember(in: seed, &random).jsonBytes
        default:  // several swaps at once
            var value = seed
            for _ in 0..<3 { value = Self.replaceRandomValue(in: value, &random) }
            bytes = value.jsonBytes
        }
        return bytes
    }

    /// Every path to a value inside `value` (object keys and array indices).
    static func paths(_ value: JSONValue, prefix: [PathStep] = []) -> [[PathStep]] {
        var out: [[PathStep]] = [prefix]
        switch value {
        case .object(let object):
            for (key, child) in object { out += self.paths(child, prefix: prefix + [.key(key)]) }
        case .array(let items):
            for (index, child) in items.enumerated() { out += self.paths(child, prefix: prefix + [.index(index)]) }
        default:
            break
        }
        return out
    }

    enum PathStep {
        case key(String)
        case index(Int)
    }

    static func replacing(
        _ value: JSONValue,
        at path: ArraySlice<PathStep>,
        with transform: (JSONValue) -> JSONValue?
    ) -> JSONValue? {
        guard let step = path.first else { return transform(value) }
        switch (step, value) {
        case (.key(let key), .object(var object)):
            guard let child = object[key] else { return value }
            object[key] = self.replacing(child, at: path.dropFirst(), with: transform)
            return .object(object)
        case (.index(let index), .array(var items)):
            guard index < items.count else { return value }
            if let replaced = self.replacing(items[index], at: path.dropFirst(), with: transform) {
                items[index] = replaced
            } else {
                items.remove(at: index)
            }
            return .array(items)
        default:
            return value
        }
    }

    static func replaceRandomValue(in value: JSONValue, _ random: inout SplitMix64) -> JSONValue {
        let all = self.paths(value)
        let path = all[Int(random.next() % UInt64(all.count))]
        let replacement = self.replacements[Int(random.next() % UInt64(self.replacements.count))]
        return self.replacing(value, at: path[...]) { _ in replacement } ?? replacement
    }

    static func dropRandomMember(in value: JSONValue, _ random: inout SplitMix64) -> JSONValue {
        let all = self.paths(value).filter { !$0.isEmpty }
        guard !all.isEmpty else { return value }
        let path = all[Int(random.next() % UInt64(all.count))]
        return self.replacing(value, at: path[...]) { _ in nil } ?? value
    }

    /// What went wrong with one answer, or nil when it is acceptable.
    static func complaint(about response: HTTPResponse, target: String) -> String? {
        if response.status >= 500 { return "\(response.status) from \(target)" }
        if (200..<300).contains(response.status) {
            let expected = target.hasPrefix("/v1/jobs") ? 201 : 200
            return response.status == expected ? nil : "unexpected \(response.status) from \(target)"
        }
        guard response.contentType == "application/problem+json" else {
            return "\(response.status) without a problem document"
        }
        let body = response.json
        guard let code = body["code"]?.stringValue, !code.isEmpty else {
            return "problem without a code: \(response.text.prefix(200))"
        }
        guard body["status"] == .int(response.status) else {
            return "problem status differs: \(response.text.prefix(200))"
        }
        guard [400, 413, 415, 422].contains(response.status) else { return "unexpected \(response.status) \(code)" }
        if response.status == 422, code == "graph.invalid", (body["errors"]?.arrayValue ?? []).isEmpty {
            return "graph.invalid without errors"
        }
        return nil
    }

    @Test func thousandsOfMutatedJobsNeverGetA5xxAndEveryRefusalIsAProblem() async throws {
        try await withServer({ $0.executors = ["default": 4] }) { server in
            let workers = 4
            let perWorker = 700
            let results = try await withThrowingTaskGroup(
                of: (sent: Int, statuses: [Int: Int], complaints: [String]).self
            ) { group in
                for worker in 0..<workers {
                    group.addTask {
                        try await server.raw { connection in
                            var random = SplitMix64(seed: 0xF022 &+ UInt64(worker))
                            var connection = connection
                            var reconnections: [SocketConnection] = []
                            var statuses: [Int: Int] = [:]
                            var complaints: [String] = []
                            for n in 0..<perWorker {
                                let seed = Self.seeds[Int(random.next() % UInt64(Self.seeds.count))]
                                let body = Self.mutate(seed, &random)
                                let target = n % 2 == 0 ? "/v1/graphs/validate" : "/v1/jobs"
                                try connection.send(
                                    HTTPRequestBytes.make(
                                        "POST",
                                        target,
                                        headers: [("Content-Type", "application/json")],
                                        body: body
                                    )
                                )
                                guard let response = try connection.readResponse() else {
                                    complaints.append(
                                        "connection closed after \(String(decoding: body, as: UTF8.self).prefix(200))"
                                    )
                                    connection = try SocketConnection(port: server.port)
                                    reconnections.append(connection)
                                    continue
                                }
                                statuses[response.status, default: 0] += 1
                                if let complaint = Self.complaint(about: response, target: target) {
                                    complaints.append(
                                        "\(complaint) — body: \(String(decoding: body, as: UTF8.self).prefix(300))"
                                    )
                                }
                                if response.header("connection") == "close" {
                                    connection = try SocketConnection(port: server.port)
                                    reconnections.append(connection)
                                }
                            }
                            for extra in reconnections { extra.close() }
                            return (perWorker, statuses, complaints)
                        }
                    }
                }
                var sent = 0
                var statuses: [Int: Int] = [:]
                var complaints: [String] = []
                for try await result in group {
                    sent += result.sent
                    statuses.merge(result.statuses, uniquingKeysWith: +)
                    complaints += result.complaints
                }
                return (sent, statuses, complaints)
            }
            #expect(results.0 == workers * perWorker)
            #expect(results.2.isEmpty, "\(results.2.count) bad answers, first: \(results.2.prefix(5))")
            // The mutations reach every layer: parse errors, validation errors and accepted jobs.
            #expect(results.1[400, default: 0] > 50, "\(results.1)")
            #expect(results.1[422, default: 0] > 50, "\(results.1)")
            #expect(results.1[200, default: 0] + results.1[201, default: 0] > 50, "\(results.1)")
            #expect(try await server.isHealthy())
        }
    }

    @Test func theSeedsAreValidJobsThatRun() async throws {
        try await withServer { server in
            for seed in Self.seeds {
                let response = try await server.post("/v1/jobs?waitMs=10000", json: seed)
                #expect(response.status == 201, "\(response)")
                #expect(["succeeded", "failed"].contains(response.json["state"]?.stringValue ?? ""), "\(response)")
            }
        }
    }

    @Test func deeplyNestedAndWideBodiesAreRefusedCleanly() async throws {
        try await withServer { server in
            var bodies: [String] = []
            bodies.append(String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000))
            bodies.append(
                "{\"graph\":" + String(repeating: "{\"type\":\"series\",\"steps\":[", count: 300)
                    + "{\"type\":\"task\",\"action\":\"value\"}" + String(repeating: "]}", count: 300) + "}"
            )
            bodies.append(
                "{\"graph\": {\"type\": \"parallel\", \"branches\": ["
                    + Array(repeating: "{\"type\":\"task\",\"action\":\"value\"}", count: 12_000).joined(separator: ",")
                    + "]}}"
            )
            bodies.append("{\"a\": 1, \"a\": 2}")
            bodies.append("\"\\ud800\"")
            bodies.append("{\"graph\": {\"type\": \"task\", \"action\": \"value\", \"params\": {\"value\": 1e999999}}}")
            bodies.append(
                "{\"graph\": {\"type\": \"task\", \"action\": \"value\", \"params\": {\"value\": 123456789012345678901234567890}}}"
            )
            bodies.append("\u{FEFF}{\"graph\": {\"type\": \"task\", \"action\": \"value\"}}")
            for body in bodies {
                for target in ["/v1/graphs/validate", "/v1/jobs"] {
                    let response = try await server.post(target, text: body)
                    #expect(
                        Self.complaint(about: response, target: target) == nil,
                        "\(response) for \(body.prefix(80))"
                    )
                }
            }
            #expect(try await server.isHealthy())
        }
    }
}
