// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Requests",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "Requests", targets: ["Requests"]),
    ],
    targets: [
        .target(name: "Requests"),
        // A dependency-free HTTP/1.1 server on 127.0.0.1, used by the tests (and later the demo and benchmark).
        .target(name: "RequestsTestServer"),
        .testTarget(name: "RequestsTests", dependencies: ["Requests", "RequestsTestServer"]),
        // Proves that code written for the original library still compiles in Swift 5 language mode.
        .testTarget(
            name: "RequestsSwift5Tests",
            dependencies: ["Requests", "RequestsTestServer"],
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
    ]
)
