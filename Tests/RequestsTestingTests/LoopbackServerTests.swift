// swift-format-ignore-file
// Kept out of swift-format: each marked part of this file is a ```swift block of TestingWithRequestsTesting.md,
// character for character (RequestsDocsTests' ArticleExamplesTests checks it).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

// article-example-begin
struct UploadAvatar: DecodableRequest {
    struct Receipt: Decodable, Sendable { let bytes: Int }
    typealias Success = Receipt
    typealias Failure = Error
    let url: URL
    let image: Data
    var identifier: String { "avatar" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = image
        completion(.success(request))
    }
}

final class UploadAvatarTests: XCTestCase {
    func testTheServerReceivesTheWholeImage() async throws {
        let server = try LoopbackServer()                  // 127.0.0.1, a free port
        defer { server.stop() }
        server.route("/avatar") { request in
            .json(#"{"bytes":\#(request.body.count)}"#, status: request.method == "POST" ? 201 : 405)
        }
        let session = URLSession(configuration: .ephemeral)

        let upload = UploadAvatar(url: server.url("/avatar"), image: Data(count: 100_000))
        let receipt = try await OperationQueue().response(for: upload, session: session)

        XCTAssertEqual(receipt.bytes, 100_000)
        XCTAssertEqual(server.requestCount(path: "/avatar"), 1)
    }
}
// article-example-end

/// Uploads and downloads, which URLProtocol stubs cannot test on Linux, against the loopback server.
final class LoopbackServerTests: XCTestCase {
    func testAnUploadTaskDeliversItsBody() throws {
        // Given the loopback server, whose /echo route describes the request it received
        let server = try LoopbackServer()
        defer { server.stop() }
        let session = URLSession(configuration: .ephemeral)
        var request = URLRequest(url: server.url("/echo"))
        request.httpMethod = "PUT"
        // When an upload task sends a body
        let done = expectation(description: "uploaded")
        let bodies = Recorder<Data>()
        session.uploadTask(with: request, from: Data("part one, part two".utf8)) { data, _, _ in
            bodies.append(data ?? Data())
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 10)
        // Then the server received it
        let echo = try JSONSerialization.jsonObject(with: bodies.values.first ?? Data()) as? [String: Any]
        XCTAssertEqual(echo?["method"] as? String, "PUT")
        XCTAssertEqual(echo?["body"] as? String, "part one, part two")
    }

    func testADownloadTaskWritesTheFile() throws {
        // Given the loopback server, whose /bytes/N route sends N bytes
        let server = try LoopbackServer()
        defer { server.stop() }
        let session = URLSession(configuration: .ephemeral)
        // When a download task fetches 100,000 bytes
        let done = expectation(description: "downloaded")
        let sizes = Recorder<Int>()
        session.downloadTask(with: server.url("/bytes/100000")) { location, _, _ in
            if let location {
                sizes.append((try? Data(contentsOf: location))?.count ?? -1)
                try? FileManager.default.removeItem(at: location)  // Foundation on Linux never deletes it
            }
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 10)
        // Then the file holds them
        XCTAssertEqual(sizes.values, [100_000])
    }

    func testTheArticlesStreamReconnectsWithTheLastEventID() async throws {
        // Given the article's stream, which drops after event 1 and resumes after the id the client sends
        let server = try LoopbackServer()
        defer { server.stop() }
        // article-example-begin
        server.stream("/feed") { request in
            let after = request.headers["last-event-id"].flatMap(Int.init) ?? 0
            return after == 0
                ? .events(["retry: 50", "id: 1\ndata: one"], ending: .close)   // drops after event 1
                : .events(["id: 2\ndata: two"])
        }
        // article-example-end
        // When it is read as server-sent events
        let session = URLSession(configuration: .ephemeral)
        var received: [String] = []
        let feed = Endpoint(server.url("/feed").absoluteString).serverSentEvents()
        for try await event in OperationQueue().stream(for: feed, session: session) {
            received.append(event.data)
            if received.count == 2 { break }
        }
        // Then both events arrive, over two connections
        XCTAssertEqual(received, ["one", "two"])
        XCTAssertEqual(server.requestCount(path: "/feed"), 2)
    }
}
