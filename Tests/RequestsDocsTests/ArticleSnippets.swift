import Foundation

/// Finds the ```swift blocks of the user documentation and the marked parts of the test sources that compile them, and
/// tells which of each has no counterpart. ArticleExamplesTests applies it to the repository; ArticleSnippetsTests
/// checks that it reports what it should.
enum ArticleSnippets {
    /// A ```swift block of a document, or a marked part of a test source, and the file it is in.
    struct Snippet: Equatable {
        /// The file's name, for messages.
        let file: String
        /// The code, ending with a newline.
        let code: String
    }

    /// The test targets whose sources may compile an article's block, under `Tests/`. A block is compiled in the
    /// target whose dependencies it needs: RequestsTestingTests for whole test files of RequestsTesting's users.
    static let compilingTargets = ["RequestsDocsTests", "RequestsTestingTests"]

    /// The line that opens a marked part, and the one that closes it.
    static let beginMarker = "// article-example-begin\n"
    static let endMarker = "// article-example-end"

    /// The package's root folder.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The ```swift blocks of every article of every DocC catalog under `Sources/`, and of the README.
    static func documentedBlocks() throws -> [Snippet] {
        let fileManager = FileManager.default
        let sources = root.appendingPathComponent("Sources")
        var documents: [URL] = []
        for module in try fileManager.contentsOfDirectory(atPath: sources.path).sorted() {
            let folder = sources.appendingPathComponent(module)
            for catalog in try fileManager.contentsOfDirectory(atPath: folder.path).sorted() where catalog.hasSuffix(".docc") {
                let catalogURL = folder.appendingPathComponent(catalog)
                documents += try fileManager.contentsOfDirectory(atPath: catalogURL.path).sorted()
                    .filter { $0.hasSuffix(".md") }
                    .map { catalogURL.appendingPathComponent($0) }
            }
        }
        documents.append(root.appendingPathComponent("README.md"))
        return try documents.flatMap { try blocks(in: String(contentsOf: $0, encoding: .utf8), file: $0.lastPathComponent) }
    }

    /// The marked parts of every Swift file of the ``compilingTargets``.
    static func compiledParts() throws -> [Snippet] {
        var parts: [Snippet] = []
        for target in compilingTargets {
            let folder = root.appendingPathComponent("Tests").appendingPathComponent(target)
            guard let files = FileManager.default.enumerator(atPath: folder.path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let source = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
                parts += markedParts(in: source, file: "\(target)/\(file)")
            }
        }
        return parts
    }

    /// The ```swift blocks of a Markdown text, each without its fences.
    static func blocks(in markdown: String, file: String) -> [Snippet] {
        markdown.components(separatedBy: "```swift\n").dropFirst().map {
            Snippet(file: file, code: $0.components(separatedBy: "```").first ?? "")
        }
    }

    /// The parts of a Swift source between ``beginMarker`` and ``endMarker``, each without the indentation its lines
    /// share, so that code in a function body compares with the article. A part without an end is not a part.
    static func markedParts(in source: String, file: String) -> [Snippet] {
        source.components(separatedBy: beginMarker).dropFirst().compactMap { part in
            guard part.contains(endMarker), let body = part.components(separatedBy: endMarker).first else { return nil }
            return Snippet(file: file, code: dedented(body))
        }
    }

    /// What does not match: each block that no part shows character for character, and each part that no block shows.
    static func mismatches(blocks: [Snippet], parts: [Snippet]) -> [String] {
        let targets = compilingTargets.joined(separator: " or ")
        let uncompiled = blocks.filter { block in !parts.contains { $0.code == block.code } }.map {
            "\($0.file) shows a block that no file of \(targets) compiles verbatim:\n\($0.code)"
        }
        let unshown = parts.filter { part in !blocks.contains { $0.code == part.code } }.map {
            "\($0.file) marks code that no article shows:\n\($0.code)"
        }
        return uncompiled + unshown
    }

    /// The lines with the indentation they all share removed, and the last line if it is blank.
    private static func dedented(_ text: String) -> String {
        var lines = text.components(separatedBy: "\n")
        if lines.last?.trimmingCharacters(in: .whitespaces).isEmpty == true { lines.removeLast() }
        let indent =
            lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
            .map { $0.prefix { $0 == " " }.count }.min() ?? 0
        return lines.map { $0.count >= indent ? String($0.dropFirst(indent)) : $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: "\n") + "\n"
    }
}
