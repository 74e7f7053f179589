// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Requests",
    platforms: [.macOS(.v12), .iOS(.v15), .tvOS(.v15), .watchOS(.v8)],
    products: [
        .library(name: "Requests", targets: ["Requests"]),
        // The durable outbox and its journal: requests kept on disk until the server answers.
        .library(name: "RequestsOutbox", targets: ["RequestsOutbox"]),
        // For users' own tests: URLProtocol stubs, a stubbed URLSession, and the loopback HTTP server.
        .library(name: "RequestsTesting", targets: ["RequestsTesting", "RequestsTestServer"]),
        .executable(name: "requests-demo", targets: ["RequestsDemo"]),
        .executable(name: "requests-bench", targets: ["RequestsBenchmark"]),
    ],
    targets: [
        .target(name: "Requests"),
        .target(name: "RequestsOutbox", dependencies: ["Requests"]),
        // A dependency-free HTTP/1.1 server on 127.0.0.1, for tests, the demo and the benchmark.
        .target(name: "RequestsTestServer"),
        .target(name: "RequestsTesting", dependencies: ["Requests", "RequestsTestServer"]),
        .executableTarget(name: "RequestsDemo", dependencies: ["Requests", "RequestsOutbox", "RequestsTestServer"]),
        .executableTarget(name: "RequestsBenchmark", dependencies: ["Requests", "RequestsOutbox", "RequestsTestServer"]),
        .testTarget(name: "RequestsTests", dependencies: ["Requests", "RequestsOutbox", "RequestsTestServer"]),
        // Fixtures/ holds the HAR file the recording article's example replays (read by path, not as a resource).
        .testTarget(
            name: "RequestsTestingTests", dependencies: ["Requests", "RequestsTesting", "RequestsTestServer"], exclude: ["Fixtures"]),
        // Compiles the code of the DocC articles (Sources/Requests/Requests.docc and
        // Sources/RequestsOutbox/RequestsOutbox.docc) and the README, verbatim, and checks that every such block is
        // compiled here or, for the testing article, in RequestsTestingTests.
        .testTarget(name: "RequestsDocsTests", dependencies: ["Requests", "RequestsOutbox", "RequestsTestServer"]),
        // Proves that code written for the original library still compiles in Swift 5 language mode.
        .testTarget(
            name: "RequestsSwift5Tests",
            dependencies: ["Requests", "RequestsTestServer"],
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
    ]
)
