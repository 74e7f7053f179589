// swift-format-ignore-file
// Kept out of swift-format: each marked part of this file is a ```swift block of TestingWithRequestsTesting.md,
// character for character (RequestsDocsTests' ArticleExamplesTests checks it).

// article-example-begin
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
// article-example-end

/// The article's smaller examples, run: each marked part is a block of the article, and the lines around it check
/// what the article says it does.
final class DocsExampleTests: XCTestCase {
    func testASessionMadeFromYourOwnConfigurationKeepsItWithoutACache() {
        // Given a configuration with a timeout of its own
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 7
        // When stubs make a session from it
        // article-example-begin
        let stubs = Stubs()
        let session = stubs.makeSession(configuration: configuration)   // a copy of it, without a cache
        // article-example-end
        stubs.stub(path: "/ping", .text("pong"))
        // Then the session has the timeout, no cache, and the stubs answer it
        XCTAssertEqual(session.configuration.timeoutIntervalForRequest, 7)
        XCTAssertNil(session.configuration.urlCache)
        XCTAssertEqual(fetch("/ping", on: session)?.text, "pong")
        session.finishTasksAndInvalidate()
    }

    func testTheNewestMatchingStubAnswers() throws {
        // Given the article's four stubs, the general ones first
        let (session, stubs) = URLSession.stubbed()
        // article-example-begin
        stubs.stub(path: "/users/7", .status(204))                                        // any method
        stubs.stub("GET", path: "/users/7", .json(#"{"name":"Ada"}"#))                    // method and path (query ignored)
        stubs.stub(url: URL(string: "https://api.example.com/search?q=a")!, .text("a"))   // exact URL, query included
        stubs.stub(where: { $0.value(forHTTPHeaderField: "Authorization") == nil }, .status(401))
        // article-example-end
        func send(_ method: String, _ url: String, authorized: Bool = true) throws -> Delivery? {
            var request = URLRequest(url: try XCTUnwrap(URL(string: url)))
            request.httpMethod = method
            if authorized { request.setValue("Bearer t", forHTTPHeaderField: "Authorization") }
            return fetch(request, on: session)
        }
        // When requests are sent, Then each gets the answer the article says
        let get = try send("GET", "https://api.example.com/users/7?fields=all")
        XCTAssertEqual(get?.status, 200)
        XCTAssertEqual(get?.text, #"{"name":"Ada"}"#)
        XCTAssertEqual(try send("DELETE", "https://api.example.com/users/7")?.status, 204)
        XCTAssertEqual(try send("GET", "https://api.example.com/search?q=a")?.text, "a")
        XCTAssertEqual(try send("GET", "https://api.example.com/users/7", authorized: false)?.status, 401)
        // And a request none matches fails with a StubError that names it
        let unmatched = try send("GET", "https://api.example.com/search?q=b")
        let message = (unmatched?.error as? StubError)?.message ?? ""
        XCTAssertTrue(message.hasPrefix("No stub matched GET https://api.example.com/search?q=b (stubs: "), message)
    }

    func testASequenceRepeatsItsLastResponse() {
        // Given the article's sequence
        let (session, stubs) = URLSession.stubbed()
        // article-example-begin
        stubs.stub(path: "/flaky", .status(503), .status(500), .json("{}"))   // 503, 500, 200, 200, 200, …
        // article-example-end
        // When five calls are made, Then they get the statuses the comment lists
        let statuses = (1...5).map { _ in fetch("/flaky", on: session)?.status }
        XCTAssertEqual(statuses, [503, 500, 200, 200, 200])
    }

    func testTheRecordHoldsWhatWasSent() {
        // Given a POST of a JSON body to a stub
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("POST", path: "/users", .status(201))
        var request = URLRequest(url: api.appendingPathComponent("users"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"name":"Ada"}"#.utf8)
        XCTAssertEqual(fetch(request, on: session)?.status, 201)
        // When the article's checks run, Then they pass, and the record and the stubs are forgotten
        // article-example-begin
        XCTAssertEqual(stubs.requests.map(\.method), ["POST"])        // every request, in order, matched or not
        XCTAssertEqual(stubs.requests.first?.header("content-type"), "application/json")   // any case
        XCTAssertEqual(stubs.requests.first?.body, Data(#"{"name":"Ada"}"#.utf8))
        XCTAssertTrue(stubs.unmatchedRequests.isEmpty)                // the ones that failed with StubError
        stubs.clearRequests()                                         // forget the record, keep the stubs
        stubs.reset()                                                 // forget both
        // article-example-end
        XCTAssertTrue(stubs.requests.isEmpty)
        XCTAssertTrue(fetch(request, on: session)?.error is StubError)
    }
}
