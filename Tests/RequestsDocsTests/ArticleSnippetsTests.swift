import XCTest

/// The check of ArticleExamplesTests, on made-up documents and sources: it must fail when a block is compiled nowhere.
final class ArticleSnippetsTests: XCTestCase {
    private let article = "Text.\n\n```swift\nlet a = 1\nprint(a)\n```\n\n```\nnot swift\n```\n"

    func testABlockThatNoSourceCompilesIsReported() {
        // Given an article's block and a marked part that differs from it by one character
        let blocks = ArticleSnippets.blocks(in: article, file: "Article.md")
        let parts = ArticleSnippets.markedParts(
            in: "func f() {\n    // article-example-begin\n    let a = 2\n    print(a)\n    // article-example-end\n}\n",
            file: "Target/Examples.swift"
        )
        // When they are compared
        let mismatches = ArticleSnippets.mismatches(blocks: blocks, parts: parts)
        // Then the block is reported as compiled nowhere, and the part as shown nowhere
        XCTAssertEqual(blocks, [ArticleSnippets.Snippet(file: "Article.md", code: "let a = 1\nprint(a)\n")])
        XCTAssertEqual(mismatches.count, 2)
        XCTAssertTrue(mismatches.first?.hasPrefix("Article.md shows a block that no file of RequestsDocsTests or RequestsTestingTests") == true)
        XCTAssertTrue(mismatches.last?.hasPrefix("Target/Examples.swift marks code that no article shows") == true)
    }

    func testABlockCompiledInAFunctionBodyMatches() {
        // Given the same code, indented in a function body, and an unterminated marker after it
        let source = "func f() {\n    // article-example-begin\n    let a = 1\n    print(a)\n    // article-example-end\n}\n// article-example-begin\nlet b = 3\n"
        let parts = ArticleSnippets.markedParts(in: source, file: "Target/Examples.swift")
        // When it is compared with the article, Then nothing is reported, and the unterminated part is not a part
        XCTAssertEqual(parts.map(\.code), ["let a = 1\nprint(a)\n"])
        XCTAssertEqual(ArticleSnippets.mismatches(blocks: ArticleSnippets.blocks(in: article, file: "Article.md"), parts: parts), [])
    }

    func testTheTestingArticleIsCompiledByRequestsTestingTests() throws {
        // Given the blocks of the testing article, and the marked parts of RequestsTestingTests
        let blocks = try ArticleSnippets.documentedBlocks().filter { $0.file == "TestingWithRequestsTesting.md" }
        let parts = try ArticleSnippets.compiledParts().filter { $0.file.hasPrefix("RequestsTestingTests/") }
        // Then there are some, and each block is compiled there, where its examples run as tests of their own
        XCTAssertGreaterThanOrEqual(blocks.count, 6)
        for block in blocks {
            XCTAssertTrue(parts.contains { $0.code == block.code }, "RequestsTestingTests does not compile:\n\(block.code)")
        }
    }
}
