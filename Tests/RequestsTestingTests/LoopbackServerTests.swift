// swift-format-ignore-file
// Kept out of swift-format: part of this file must stay verbatim (README / docs/testing.md example).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

// docs-loopback-begin
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
// docs-loopback-end

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
}
