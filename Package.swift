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
        .executable(name: "taskcore-bench", targets: ["taskcore-bench"]),
        .executable(name: "taskgraph-bench", targets: ["taskgraph-bench"]),
    ],
    targets: [
        .target(name: "TaskCore"),
        .target(name: "TaskGraph", dependencies: ["TaskCore"]),
        .executableTarget(name: "taskcore-bench", dependencies: ["TaskCore"], path: "Benchmarks/taskcore-bench"),
        .executableTarget(name: "taskgraph-bench", dependencies: ["TaskGraph"], path: "Benchmarks/taskgraph-bench"),
        .testTarget(name: "TaskCoreTests", dependencies: ["TaskCore"]),
        .testTarget(name: "TaskGraphTests", dependencies: ["TaskGraph"]),
    ]
)

for target in package.targets {
    target.swiftSettings = (target.swiftSettings ?? []) + swiftSettings
}
