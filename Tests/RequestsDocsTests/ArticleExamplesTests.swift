// swift-format-ignore-file
// Kept out of swift-format: the marked part of this file is the ```swift block of TestingWithRequestsTesting.md,
// character for character (checked below).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTesting
import XCTest

final class ArticleExamplesTests: XCTestCase {
    func testTheTestingArticleExampleRuns() async throws {
        // article-example-begin
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("GET", path: "/users/7", .json(#"{"name":"Ada"}"#))
        let user = try await OperationQueue().response(for: UserRequest(id: 7), session: session)
        XCTAssertEqual(user.name, "Ada")
        // article-example-end
        XCTAssertEqual(stubs.requests.map(\.url.path), ["/users/7"])
    }

    /// Every ```swift block of the DocC catalog and of the README is compiled by this target: it appears, character for character once
    /// its indentation is removed, between `// article-example-begin` and `// article-example-end` in one of this
    /// target's files. And every marked part is still shown by some article, so no example is kept here after it
    /// left the docs.
    func testEveryArticleExampleIsCompiledVerbatim() throws {
        // Given the catalog's swift blocks and this target's marked parts
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let catalog = folder.deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Requests/Requests.docc")
        var blocks: [(article: String, code: String)] = []
        let articles = try FileManager.default.contentsOfDirectory(atPath: catalog.path).sorted().filter { $0.hasSuffix(".md") }
            .map { catalog.appendingPathComponent($0) } + [catalog.deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")]
        for url in articles {
            let article = url.lastPathComponent
            let text = try String(contentsOf: url, encoding: .utf8)
            for block in text.components(separatedBy: "```swift\n").dropFirst() {
                blocks.append((article, block.components(separatedBy: "```").first ?? ""))
            }
        }
        var examples: [(file: String, code: String)] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() where file.hasSuffix(".swift") {
            let source = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            for part in source.components(separatedBy: "// article-example-begin\n").dropFirst() {
                guard let body = part.components(separatedBy: "// article-example-end").first else { continue }
                examples.append((file, Self.dedented(body)))
            }
        }
        XCTAssertGreaterThanOrEqual(Set(blocks.map(\.article)).count, 11, "the articles with code were not found")
        XCTAssertTrue(blocks.contains { $0.article == "README.md" }, "the README's code was not found")
        XCTAssertGreaterThanOrEqual(blocks.count, 14)

        // Then each block is one of the marked parts, and each marked part is one of the blocks
        for block in blocks {
            XCTAssertTrue(examples.contains { $0.code == block.code },
                          "\(block.article) shows a block that no file of RequestsDocsTests compiles verbatim:\n\(block.code)")
        }
        for example in examples {
            XCTAssertTrue(blocks.contains { $0.code == example.code },
                          "\(example.file) marks code that no article shows:\n\(example.code)")
        }
    }

    /// The lines with the indentation they all share removed, so code in a function body compares with the article.
    private static func dedented(_ text: String) -> String {
        var lines = text.components(separatedBy: "\n")
        if lines.last?.trimmingCharacters(in: .whitespaces).isEmpty == true { lines.removeLast() }
        let indent = lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
            .map { $0.prefix { $0 == " " }.count }.min() ?? 0
        return lines.map { $0.count >= indent ? String($0.dropFirst(indent)) : $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: "\n") + "\n"
    }
}
