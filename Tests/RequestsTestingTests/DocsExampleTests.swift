// swift-format-ignore-file
// Kept out of swift-format: part of this file must stay verbatim (README / docs/testing.md example).

// The example of docs/testing.md, compiled verbatim: the block between the markers below is a
// ```swift block of that file, character for character (checked by testDocsShowTheseExamplesVerbatim).

// docs-example-begin
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLRequest and URLSession on Linux
#endif
import Requests
import RequestsTesting
import XCTest

struct User: Decodable, Sendable { let name: String }

struct UserRequest: DecodableRequest {
    typealias Success = User
    typealias Failure = Error
    let id: Int
    var identifier: String { "user-\(id)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: URL(string: "https://api.example.com/users/\(id)")!)))
    }
}

final class UserRequestTests: XCTestCase {
    func testDecodesTheUser() async throws {
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("GET", path: "/users/7", .json(#"{"name":"Ada"}"#))

        let user = try await OperationQueue().response(for: UserRequest(id: 7), session: session)

        XCTAssertEqual(user.name, "Ada")
        XCTAssertEqual(stubs.requests.map(\.url.path), ["/users/7"])
    }
}
// docs-example-end

final class DocsExampleTests: XCTestCase {
    func testDocsShowTheseExamplesVerbatim() throws {
        // Given docs/testing.md, this file and LoopbackServerTests.swift
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let root = folder.deletingLastPathComponent().deletingLastPathComponent()
        let docs = try String(contentsOf: root.appendingPathComponent("docs/testing.md"), encoding: .utf8)
        let blocks = docs.components(separatedBy: "```swift\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
        // When we take the marked part of each file
        let examples = try [("DocsExampleTests.swift", "docs-example"), ("LoopbackServerTests.swift", "docs-loopback")].map { file, marker in
            let source = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            return source.components(separatedBy: "// \(marker)-begin\n").dropFirst().first?
                .components(separatedBy: "// \(marker)-end").first
        }
        // Then each is a swift block of the docs, character for character
        for (example, file) in zip(examples, ["DocsExampleTests.swift", "LoopbackServerTests.swift"]) {
            XCTAssertNotNil(example, "no marked example in \(file)")
            XCTAssertTrue(blocks.contains { $0 == example }, "docs/testing.md does not show the example of \(file) verbatim")
        }
    }
}
