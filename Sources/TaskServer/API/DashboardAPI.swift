import NIOHTTP1
import TaskCore
import TaskGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `/ui/`: the dashboard (SPEC §7), static files compiled into the binary, served with a strict
/// Content-Security-Policy: scripts and styles from this origin only, no inline script, no eval.
/// The pages speak to the public API like any client; they are not behind the API keys (the page
/// asks for a key and sends it with its API calls).
struct DashboardAPI: Sendable {
    let files: DashboardFiles

    func register(in router: inout Router) {
        router.add(.GET, "/ui/", self.index)
        router.add(.GET, "/ui/{file}", self.file)
    }

    /// `/ui/` (the router matches `/ui` too: segments ignore a trailing slash). `/ui` is sent to
    /// `/ui/`, where the page's relative links to its files resolve.
    @Sendable func index(_ request: Request) throws -> Future<Response> {
        let path = request.uri.prefix { $0 != "?" && $0 != "#" }
        guard path.hasSuffix("/") else {
            var headers = HTTPHeaders()
            headers.add(name: "location", value: "/ui/")
            return Future(value: Response(status: .permanentRedirect, headers: headers))
        }
        return Future(value: try self.serve("index.html"))
    }

    @Sendable func file(_ request: Request) throws -> Future<Response> {
        Future(value: try self.serve(request.parameter("file")))
    }

    private func serve(_ name: String) throws(HTTPProblem) -> Response {
        guard let file = self.files.files[name] else {
            throw HTTPProblem.notFound("route.notFound", "the dashboard has no file \(name.prefix(100))")
        }
        var headers = Self.headers
        headers.add(name: "content-type", value: file.contentType)
        return Response(status: .ok, headers: headers, body: file.bytes)
    }

    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

    static let headers: HTTPHeaders = {
        var headers = HTTPHeaders()
        headers.add(name: "content-security-policy", value: Self.contentSecurityPolicy)
        headers.add(name: "x-content-type-options", value: "nosniff")
        headers.add(name: "referrer-policy", value: "no-referrer")
        headers.add(name: "cache-control", value: "no-cache")
        return headers
    }()
}

/// The dashboard's files: the ones compiled in, or — for working on the dashboard — the same
/// names read from a directory when the server starts (`TASKSERVER_UI_DIR`).
public struct DashboardFiles: Sendable {
    struct File: Sendable {
        let bytes: [UInt8]
        let contentType: String
    }

    let files: [String: File]

    static let names: [(name: String, contentType: String)] = [
        ("index.html", "text/html; charset=utf-8"),
        ("app.js", "text/javascript; charset=utf-8"),
        ("states.js", "text/javascript; charset=utf-8"),
        ("dom.js", "text/javascript; charset=utf-8"),
        ("api.js", "text/javascript; charset=utf-8"),
        ("sse.js", "text/javascript; charset=utf-8"),
        ("dialogs.js", "text/javascript; charset=utf-8"),
        ("jobs-view.js", "text/javascript; charset=utf-8"),
        ("job-view.js", "text/javascript; charset=utf-8"),
        ("job-events.js", "text/javascript; charset=utf-8"),
        ("node-details.js", "text/javascript; charset=utf-8"),
        ("executors-view.js", "text/javascript; charset=utf-8"),
        ("schedules-view.js", "text/javascript; charset=utf-8"),
        ("graph.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ]

    /// The files compiled into the binary.
    public static let embedded = DashboardFiles(
        files: Dictionary(
            uniqueKeysWithValues: zip(
                Self.names,
                [
                    PackageResources.index_html, PackageResources.app_js, PackageResources.states_js,
                    PackageResources.dom_js, PackageResources.api_js, PackageResources.sse_js,
                    PackageResources.dialogs_js, PackageResources.jobs_view_js, PackageResources.job_view_js,
                    PackageResources.job_events_js, PackageResources.node_details_js,
                    PackageResources.executors_view_js, PackageResources.schedules_view_js, PackageResources.graph_js,
                    PackageResources.style_css,
                    PackageResources.favicon_svg,
                ]
            ).map { ($0.0.name, File(bytes: $0.1, contentType: $0.0.contentType)) }
        )
    )

    /// The same files read from `directory` (once: restart the server to see edits).
    public static func reading(_ directory: String) throws(ConfigurationError) -> DashboardFiles {
        var files: [String: File] = [:]
        for (name, contentType) in Self.names {
            let path = directory + "/" + name
            guard let handle = fopen(path, "rb") else {
                throw ConfigurationError("TASKSERVER_UI_DIR: cannot read \(path)")
            }
            defer { fclose(handle) }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = fread(&chunk, 1, chunk.count, handle)
                if count <= 0 { break }
                bytes.append(contentsOf: chunk[0..<count])
            }
            files[name] = File(bytes: bytes, contentType: contentType)
        }
        return DashboardFiles(files: files)
    }
}
