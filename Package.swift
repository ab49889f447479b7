// swift-tools-version:6.1
import PackageDescription

/// One list of settings for every target, so that no target slips into weaker checking.
///
/// Release builds use cross-module optimization: TaskCore's generic futures are then specialized in
/// the modules that use them. Without it every continuation looked up generic metadata at run time
/// and a 1M-link chain took 3.4 s instead of ~70 ms (measured with `taskcore-bench`).
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "TaskServer",
    products: [
        .library(name: "TaskCore", targets: ["TaskCore"]),
        .library(name: "TaskGraph", targets: ["TaskGraph"]),
        .library(name: "TaskWorkerProtocol", targets: ["TaskWorkerProtocol"]),
        .library(name: "TaskSchedule", targets: ["TaskSchedule"]),
        .library(name: "TaskServer", targets: ["TaskServer"]),
        .executable(name: "taskserver", targets: ["taskserver"]),
        .executable(name: "taskcore-bench", targets: ["taskcore-bench"]),
        .executable(name: "taskgraph-bench", targets: ["taskgraph-bench"]),
        .executable(name: "bare-nio", targets: ["bare-nio"]),
        .executable(name: "outbound-bench", targets: ["outbound-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        // Metrics: swift-metrics' API, rendered by swift-prometheus (both small; swift-atomics,
        // their only other dependency, comes with NIO already).
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Tracing: swift-distributed-tracing's API (no dependencies; ~11 s of a clean debug build).
        // The OTLP exporter is our own, on libcurl: swift-otel measured +179 s per clean debug build
        // here (issue #46; README "Traces").
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        .target(name: "TaskCore"),
        // System libraries from Debian: libcurl4-openssl-dev, libssl-dev (libcrypto), libsqlite3-dev, libpq-dev.
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // PostgreSQL's own client library for the PostgreSQL store (issue #30 says why not postgres-nio).
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .target(name: "TaskGraph", dependencies: ["TaskCore"]),
        // The worker protocol's bodies and rules (SPEC §6), shared by the server (WorkersAPI,
        // TasksAPI) and `taskserver worker`: JSON values only, no NIO, no HTTP.
        .target(name: "TaskWorkerProtocol", dependencies: ["TaskCore", "TaskGraph"]),
        // The cron engine of schedules (SPEC §8): expressions, time zones and daylight saving as
        // cronie has them, and the next fires. Plain Swift; Foundation only for TimeZone and Date.
        .target(name: "TaskSchedule"),
        .target(
            name: "TaskServer",
            dependencies: [
                "TaskCore",
                "TaskGraph",
                "TaskWorkerProtocol",
                "TaskSchedule",
                "CCurl",
                "CCrypto",
                "CSQLite",
                "CPostgres",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            // The API contract, served at /openapi.yaml and /openapi.json, is compiled into the
            // binary from the repository's own files (Resources/ links to them): openapi.json is
            // generated from openapi.yaml by scripts/openapi-json.py, and `make test` checks it is
            // current. So is the dashboard (SPEC §7): static files of our own, served at /ui/.
            resources: [
                .embedInCode("Resources/openapi.yaml"),
                .embedInCode("Resources/openapi.json"),
                .embedInCode("Resources/ui/index.html"),
                .embedInCode("Resources/ui/app.js"),
                .embedInCode("Resources/ui/states.js"),
                .embedInCode("Resources/ui/dom.js"),
                .embedInCode("Resources/ui/api.js"),
                .embedInCode("Resources/ui/sse.js"),
                .embedInCode("Resources/ui/dialogs.js"),
                .embedInCode("Resources/ui/jobs-view.js"),
                .embedInCode("Resources/ui/job-view.js"),
                .embedInCode("Resources/ui/job-events.js"),
                .embedInCode("Resources/ui/node-details.js"),
                .embedInCode("Resources/ui/executors-view.js"),
                .embedInCode("Resources/ui/schedules-view.js"),
                .embedInCode("Resources/ui/graph.js"),
                .embedInCode("Resources/ui/style.css"),
                .embedInCode("Resources/ui/favicon.svg"),
            ]
        ),
        // The runtime of `taskserver worker` (a worker of an external pool that runs a command per
        // task). It uses TaskServer only for CurlClient; moving that client into a target of its
        // own would spare the worker none of the executable's dependencies.
        .target(
            name: "TaskServerWorker",
            dependencies: [
                "TaskCore",
                "TaskGraph",
                "TaskWorkerProtocol",
                "TaskServer",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "taskserver",
            dependencies: [
                "TaskServer",
                "TaskServerWorker",
                "TaskWorkerProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .executableTarget(name: "taskcore-bench", dependencies: ["TaskCore"], path: "Benchmarks/taskcore-bench"),
        .executableTarget(
            name: "taskgraph-bench",
            dependencies: ["TaskGraph", "TaskSchedule"],
            path: "Benchmarks/taskgraph-bench"
        ),
        .executableTarget(
            name: "bare-nio",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Benchmarks/bare-nio"
        ),
        .executableTarget(
            name: "outbound-bench",
            dependencies: [
                "TaskServer",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/outbound-bench"
        ),
        // Helpers shared by the test targets (a seeded generator); never shipped.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "TaskCoreTests", dependencies: ["TaskCore", "TestSupport"]),
        .testTarget(name: "TaskGraphTests", dependencies: ["TaskGraph", "TestSupport"]),
        .testTarget(name: "TaskWorkerProtocolTests", dependencies: ["TaskWorkerProtocol", "TaskGraph", "TaskCore"]),
        .testTarget(name: "TaskScheduleTests", dependencies: ["TaskSchedule"]),
        .testTarget(
            name: "TaskServerWorkerTests",
            dependencies: [
                "TaskServerWorker",
                "TaskServer",
                "TaskWorkerProtocol",
                "TaskGraph",
                "TaskCore",
                "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "TaskServerTests",
            dependencies: [
                "TaskServer",
                "TestSupport",
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
    ]
)

for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + swiftSettings
}
