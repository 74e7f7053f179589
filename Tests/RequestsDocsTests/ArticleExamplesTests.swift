import XCTest

final class ArticleExamplesTests: XCTestCase {
    /// Every ```swift block of the DocC catalogs (each `.docc` folder under `Sources/`: Requests' and RequestsOutbox's)
    /// and of the README is compiled by a test target: it appears, character for character once its indentation is
    /// removed, between `// article-example-begin` and `// article-example-end` in a file of RequestsDocsTests or
    /// RequestsTestingTests. And every marked part is still shown by some article, so no example is kept there after
    /// it left the docs.
    func testEveryArticleExampleIsCompiledVerbatim() throws {
        // Given the documents' swift blocks and the test targets' marked parts
        let blocks = try ArticleSnippets.documentedBlocks()
        let parts = try ArticleSnippets.compiledParts()
        XCTAssertGreaterThanOrEqual(Set(blocks.map(\.file)).count, 11, "the articles with code were not found")
        XCTAssertTrue(blocks.contains { $0.file == "README.md" }, "the README's code was not found")
        XCTAssertTrue(blocks.contains { $0.file == "DurableOutbox.md" }, "the outbox article's code (RequestsOutbox.docc) was not found")
        XCTAssertGreaterThanOrEqual(blocks.count, 14)
        for target in ArticleSnippets.compilingTargets {
            XCTAssertTrue(parts.contains { $0.file.hasPrefix(target + "/") }, "no marked part was found in \(target)")
        }

        // Then each block is one of the marked parts, and each marked part is one of the blocks
        for mismatch in ArticleSnippets.mismatches(blocks: blocks, parts: parts) {
            XCTFail(mismatch)
        }
    }
}
