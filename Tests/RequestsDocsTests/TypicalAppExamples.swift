// swift-format-ignore-file
// Kept out of swift-format: the marked parts of this file are the ```swift blocks of TypicalApp.md, GettingStarted.md
// and the README, character for character (ArticleExamplesTests checks it).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import RequestsTestServer
import XCTest
// article-example-begin
import Requests

struct Post: Codable, Sendable { var id = 0; var title: String }

let blog = Endpoint("https://blog.example.com/api")
let queue = OperationQueue()
// article-example-end

/// What the six tasks produced, for the test to check.
struct TypicalAppResults {
    let posts: [Post]
    let shown: Operation
    let file: URL
    let created: Post
    let cached: [Post]
}

/// The six tasks of TypicalApp.md, as shown there, against `blog` (the loopback server in the test).
func typicalApp(blog: Endpoint, queue: OperationQueue) async throws -> TypicalAppResults {
    // article-example-begin
    // 1. Get a list and decode it
    let posts = try await queue.response(for: blog.get("posts"), as: [Post].self)

    // 2. A request built from the first result, then a step on the main queue after both
    let list = queue.addRequest(blog.get("posts"), as: [Post].self)
    let first = queue.addRequest(after: list) { blog.get("posts/\($0[0].id)").decoding(Post.self) }
    let shown = list.whenFinished(with: first) { _, post in print("First post:", (try? post.get())?.title ?? "none") }
    try await shown.finished()

    // 3. A large download, with progress
    let video = queue.addRequest(blog.get("video").download())
    for await progress in video.progressUpdates { print("Downloaded", progress.fractionCompleted) }
    let file = try await video.value

    // 4. POST JSON with a token refreshed after a 401, and retried after a 500
    queue.requestPolicies.authenticator = TokenAuthenticator(token: "expired") { _, done in done(.success("fresh")) }
    queue.requestPolicies.retryPolicy = RetryPolicy(alsoRetrying: [.post])
    let created = try await queue.response(for: blog.post("posts", body: .json(Post(title: "Hi"))), as: Post.self)

    // 5. Server-sent events
    for try await event in queue.stream(for: blog.get("events").serverSentEvents()) { print("Event:", event.data) }

    // 6. A response cache in memory: the second request is answered from it
    queue.requestPolicies.responseCache = ResponseCache.inMemory()
    _ = try await queue.response(for: blog.get("posts"), as: [Post].self)
    let cached = try await queue.response(for: blog.get("posts"), as: [Post].self)
    // article-example-end
    return TypicalAppResults(posts: posts, shown: shown, file: file, created: created, cached: cached)
}

/// The README's quick start, as shown there, against `blog`; returns the main-queue step.
func readmeQuickStart(blog: Endpoint, queue: OperationQueue) async throws -> Operation {
    // article-example-begin
    let posts = try await queue.response(for: blog.get("posts"), as: [Post].self)
    print(posts.map(\.title))
    // article-example-end
    // article-example-begin
    let list = queue.addRequest(blog.get("posts"), as: [Post].self)
    let first = queue.addRequest(after: list) { blog.get("posts/\($0[0].id)").decoding(Post.self) }
    list.whenFinished(with: first) { _, post in
        print("First post:", (try? post.get())?.title ?? "none")      // on OperationQueue.main, after both
    }
    // article-example-end
    return first
}

final class TypicalAppTests: XCTestCase {
    /// The article's title and closing count say how many lines its code takes; they must stay true.
    func testTheArticleCountsItsLinesRight() throws {
        let article = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/Requests/Requests.docc/TypicalApp.md")
        let text = try String(contentsOf: article, encoding: .utf8)
        let code = text.components(separatedBy: "```swift\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
        let lines = code.flatMap { $0.components(separatedBy: "\n") }.map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("//") }
        XCTAssertEqual(lines.count, 19)
        XCTAssertTrue(text.hasPrefix("# A typical app in nineteen lines"))
        XCTAssertTrue(text.contains("Here they take 19: 4 for the setup, 15 for the"))
    }

    func testTheReadmeQuickStartRunsAsShown() throws {
        // Given a server with the posts
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/posts") { _ in .json(#"[{"id":1,"title":"Hello"},{"id":2,"title":"World"}]"#) }
        server.route("/posts/1") { _ in .json(#"{"id":1,"title":"Hello"}"#) }
        let done = expectation(description: "the quick start")
        let outcome = Outcome<Operation>()
        // When the quick start runs
        Task {
            do {
                outcome.result = .success(try await readmeQuickStart(blog: Endpoint(server.baseURL.absoluteString), queue: OperationQueue()))
            } catch {
                outcome.result = .failure(error)
            }
            done.fulfill()
        }
        wait(for: [done], timeout: 60)
        // Then both requests ran, the chained one after the list
        let first = try XCTUnwrap(outcome.result).get()
        first.waitUntilFinished()
        XCTAssertEqual(server.requestCount(path: "/posts"), 2)
        XCTAssertEqual(server.requestCount(path: "/posts/1"), 1)
    }

    func testTheSixTasksRunAsShown() throws {
        // Given a server with the endpoints the tasks use
        let server = try LoopbackServer()
        defer { server.stop() }
        let posts = Counter()
        let list = #"[{"id":1,"title":"Hello"},{"id":2,"title":"World"}]"#
        server.route("/posts") { request in
            guard request.method == "POST" else {
                var response = LoopbackResponse.json(list)
                response.headers["Cache-Control"] = "max-age=60"
                return response
            }
            guard request.headers["authorization"] == "Bearer fresh" else { return LoopbackResponse(status: 401) }
            return posts.next() == 1 ? LoopbackResponse(status: 500) : .json(#"{"id":3,"title":"Hi"}"#, status: 201)
        }
        server.route("/posts/1") { _ in .json(#"{"id":1,"title":"Hello"}"#) }
        let video = Data(repeating: 0x5A, count: 20 << 20) + Data("end".utf8)
        server.route("/video") { _ in LoopbackResponse(headers: ["Content-Type": "video/mp4"], body: video) }
        server.stream("/events") { _ in .events(["data: one", "data: two"]) }
        let queue = OperationQueue()
        let done = expectation(description: "the six tasks")
        let outcome = Outcome<TypicalAppResults>()

        // When the tasks run as the article shows them
        Task {
            do {
                outcome.result = .success(try await typicalApp(blog: Endpoint(server.baseURL.absoluteString), queue: queue))
            } catch {
                outcome.result = .failure(error)
            }
            done.fulfill()
        }
        wait(for: [done], timeout: 120)

        // Then each did what its comment says
        let results = try XCTUnwrap(outcome.result).get()
        XCTAssertEqual(results.posts.map(\.title), ["Hello", "World"])
        XCTAssertTrue(results.shown.isFinished, "awaited by the tasks")  // while wait(for:) ran the main queue
        XCTAssertFalse(results.shown.isCancelled)
        XCTAssertEqual(server.requestCount(path: "/posts/1"), 1)
        XCTAssertEqual(try Data(contentsOf: results.file), video)
        XCTAssertEqual(results.created.id, 3)
        XCTAssertEqual(server.requestCount(path: "/posts"), 2 + 3 + 1)    // two GETs; POSTs: 401, 500, 201; one GET stored
        XCTAssertEqual(server.requestCount(path: "/events"), 1)           // and the loop ended with the stream
        XCTAssertEqual(results.cached.map(\.id), [1, 2])
        try? FileManager.default.removeItem(at: results.file.deletingLastPathComponent())
    }
}

/// Counts calls, from any thread.
private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    func next() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
}

/// The tasks' outcome, handed from the Task to the test.
private final class Outcome<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Result<Value, Error>?
    var result: Result<Value, Error>? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
