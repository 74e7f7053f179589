// The child process this test starts needs Foundation's Process, which iOS, tvOS and watchOS do not have.
#if os(macOS) || os(Linux)
import Foundation
import XCTest

/// The install sections (Getting started and the README) show a complete `Package.swift`, the one code block no test
/// target can compile. SwiftPM loads it here instead, as a user's package beside a folder named `Requests` that is
/// this package, and checks the products it names.
final class PackageManifestTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The block of `document` that starts with `// swift-tools-version`.
    private func manifest(in document: String) throws -> String {
        let text = try String(contentsOf: root.appendingPathComponent(document), encoding: .utf8)
        let blocks = text.components(separatedBy: "```\n").enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
        return try XCTUnwrap(blocks.first { $0.hasPrefix("// swift-tools-version") }, "no Package.swift in \(document)")
    }

    func testTheInstallManifestLoadsBesideAFolderNamedRequests() throws {
        // Given the manifest the documents show
        let shown = try manifest(in: "Sources/Requests/Requests.docc/GettingStarted.md")
        XCTAssertEqual(try manifest(in: "README.md"), shown, "the README and Getting started show the same Package.swift")
        // And a user's folders: Requests (this package) and MyApp beside it
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("Requests-manifest-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let app = folder.appendingPathComponent("MyApp")
        try FileManager.default.createDirectory(at: app.appendingPathComponent("Sources/MyApp"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: folder.appendingPathComponent("Requests"), withDestinationURL: root)
        try Data(shown.utf8).write(to: app.appendingPathComponent("Package.swift"))
        try Data("import Requests\n".utf8).write(to: app.appendingPathComponent("Sources/MyApp/main.swift"))

        // When SwiftPM loads the package graph (which checks every product a target names)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swift", "package", "--package-path", app.path, "show-dependencies"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()

        // Then it loads, with Requests as the dependency
        XCTAssertEqual(process.terminationStatus, 0, text)
        XCTAssertTrue(text.contains("requests<"), text)
    }
}
#endif
