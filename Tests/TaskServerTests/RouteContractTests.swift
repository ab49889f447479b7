import Foundation
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

#if canImport(Glibc)
import Glibc
#endif

/// The router and `openapi.yaml` describe the same API, and the binary serves that very document.
struct RouteContractTests {
    /// The repository root, found from this file's path (`<root>/Tests/TaskServerTests/…`).
    static let repositoryRoot: String = {
        var parts = "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(3)
        return parts.joined(separator: "/")
    }()

    static func readFile(_ path: String) throws -> String {
        guard let file = fopen(path, "rb") else { throw SocketError.system("fopen \(path)", errno) }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress!, 1, $0.count, file) }
            if count == 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func openAPIText() throws -> String {
        try self.readFile(self.repositoryRoot + "/openapi.yaml")
    }

    /// `(METHOD, /path)` pairs of the document's `paths:` section, read minimally: path lines are
    /// `  /…:` and method lines `    get:` (and friends) below them.
    static func documentedOperations(_ yaml: String) -> Set<String> {
        var operations: Set<String> = []
        var inPaths = false
        var currentPath: String?
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" {
                inPaths = true
                continue
            }
            guard inPaths else { continue }
            if let first = line.first, first != " ", first != "#" {
                break  // the next top-level key ends `paths:`
            }
            if line.hasPrefix("  /"), !line.hasPrefix("   "), line.hasSuffix(":") {
                currentPath = String(line.dropFirst(2).dropLast())
                continue
            }
            if let path = currentPath, line.hasPrefix("    "), !line.hasPrefix("     ") {
                let word = line.dropFirst(4)
                for method in ["get", "post", "delete", "put", "patch"] where word == "\(method):" {
                    operations.insert("\(method.uppercased()) \(path)")
                }
            }
        }
        return operations
    }

    @Test func theDocumentParserFindsPathsAndMethods() {
        let yaml = """
            openapi: 3.1.0
            paths:
              /a:
                parameters:
                  - name: x
                get:
                  responses: {}
                delete:
                  responses: {}
              /b/{id}:
                post:
                  summary: x
            components:
              /c:
                get:
            """
        #expect(Self.documentedOperations(yaml) == ["GET /a", "DELETE /a", "POST /b/{id}"])
    }

    @Test func everyRouteIsDocumentedAndEveryDocumentedOperationIsRouted() async throws {
        let server = try await TestServer.start()
        let routes = Set(server.app.router.table.map { "\($0.method) \($0.template)" })
        await server.stop()
        let documented = Self.documentedOperations(try Self.openAPIText())
        #expect(!documented.isEmpty)
        #expect(routes.subtracting(documented).sorted() == [], "routes missing from openapi.yaml")
        #expect(documented.subtracting(routes).sorted() == [], "operations of openapi.yaml the router does not serve")
    }

    @Test func theRoutesWithAPIKeysAreTheSameRoutes() async throws {
        let plain = try await TestServer.start()
        let protected = try await TestServer.start { $0.apiKeys = ["0123456789abcdef0123"] }
        let a = Set(plain.app.router.table.map { "\($0.method) \($0.template)" })
        let b = Set(protected.app.router.table.map { "\($0.method) \($0.template)" })
        await plain.stop()
        await protected.stop()
        #expect(a == b)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func getOpenAPIJSONServesTheSameDocumentAsJSON() async throws {
        try await withServer { server in
            let response = try await server.get("/openapi.json")
            #expect(response.status == 200)
            #expect(response.contentType == "application/json")
            let document = response.json
            #expect(document["openapi"]?.stringValue?.hasPrefix("3.1.") == true)
            #expect(document["info"]?["version"]?.stringValue == TaskServerVersion.current)
            let paths = document["paths"]?.objectValue.map { Set($0.keys) } ?? []
            #expect(paths.contains("/v1/jobs") && paths.contains("/openapi.json"))
            // Every operation the YAML lists is in the JSON (the YAML read by another reader).
            let operations = Self.documentedOperations(try Self.openAPIText())
            var fromJSON: Set<String> = []
            for (path, item) in document["paths"]?.objectValue?.members ?? [] {
                for method in item.objectValue?.keys ?? []
                where ["get", "post", "put", "patch", "delete"].contains(method) {
                    fromJSON.insert("\(method.uppercased()) \(path)")
                }
            }
            #expect(fromJSON == operations)
        }
    }

    @Test func theVersionIsTheContractsInfoVersion() throws {
        // Found another way than TaskServerVersion does: the line after "info:" that sets version.
        let text = try Self.openAPIText()
        let info = try #require(text.range(of: "\ninfo:\n"))
        let rest = text[info.upperBound...]
        let line = try #require(rest.split(separator: "\n").first { $0.hasPrefix("  version:") })
        let expected = line.dropFirst("  version:".count).trimmingCharacters(in: .whitespaces)
        #expect(TaskServerVersion.current == expected)
        #expect(
            TaskServerVersion.current.split(separator: ".").count == 3,
            "a semantic version: \(TaskServerVersion.current)"
        )
    }

    @Test func theVersionIsReadFromTheInfoMappingOnly() {
        let yaml = "openapi: 3.1.0\ninfo:\n  title: x\n  version: '2.3.4'\npaths:\n  /a:\n    get:\n      version: 9\n"
        #expect(TaskServerVersion.version(inOpenAPI: Array(yaml.utf8)) == "2.3.4")
        #expect(TaskServerVersion.version(inOpenAPI: Array("info:\n  title: x\nother:\n  version: 1\n".utf8)) == nil)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func getOpenAPIYamlServesTheDocumentAsYAML() async throws {
        try await withServer { server in
            let response = try await server.get("/openapi.yaml")
            #expect(response.status == 200)
            #expect(response.contentType == "application/yaml")
            #expect(response.text.hasPrefix("openapi: 3.1."))
            // Byte for byte the repository's file: the build embeds it, nothing copies it.
            #expect(response.text == (try Self.openAPIText()))
        }
    }
}
