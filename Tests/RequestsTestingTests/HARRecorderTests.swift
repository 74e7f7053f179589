#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Downloads `url` into a file of the library's choosing.
struct DownloadToFile: DownloadRequest {
    let url: URL
    var identifier: String { "download \(url.absoluteString)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// What ``HARRecorder`` keeps: bounded bodies, the newest entries, downloads, and a file other readers accept.
final class HARRecorderTests: XCTestCase {
    func entries(_ recorder: HARRecorder) throws -> [[String: Any]] {
        let file = try XCTUnwrap(try JSONSerialization.jsonObject(with: recorder.harData()) as? [String: Any])
        return try XCTUnwrap((file["log"] as? [String: Any])?["entries"] as? [[String: Any]])
    }

    private func run(_ requests: [any DataRequest], recorder: HARRecorder) {
        _ = outcomes(requests, session: URLSession(configuration: .ephemeral), monitors: [recorder])
    }

    func testBodiesAreCutAtTheBoundAndOnlyTheNewestEntriesKept() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/long") { _ in .text(String(repeating: "a", count: 5000)) }
        server.route("/secret.json") { _ in .json(#"{"password":"hunter2","padding":"\#(String(repeating: "b", count: 2000))"}"#) }
        server.route("/file") { _ in LoopbackResponse(headers: ["Content-Type": "application/octet-stream"], body: Data(repeating: 7, count: 3000)) }
        let recorder = HARRecorder(redaction: Redaction(jsonFields: ["password"]), maximumBodyBytes: 1000, maximumEntries: 3)
        run(
            [
                FetchData(url: server.url("/first")), FetchData(url: server.url("/long")), FetchData(url: server.url("/secret.json")),
                DownloadToFile(url: server.url("/file")),
            ],
            recorder: recorder)

        XCTAssertEqual(recorder.entryCount, 3)
        let entries = try entries(recorder)
        let contents = entries.compactMap { ($0["response"] as? [String: Any])?["content"] as? [String: Any] }
        XCTAssertEqual(contents.map { $0["size"] as? Int }, [5000, 2035, 3000])
        XCTAssertEqual((contents[0]["text"] as? String)?.count, 1000)
        XCTAssertEqual(contents[0]["comment"] as? String, "truncated: 1000 of 5000 bytes kept")
        // A JSON body cut short could not be redacted: it is not kept.
        XCTAssertNil(contents[1]["text"])
        XCTAssertFalse(String(decoding: try recorder.harData(), as: UTF8.self).contains("hunter2"))
        // The download's file, read before it was moved into place.
        XCTAssertEqual(contents[2]["encoding"] as? String, "base64")
        XCTAssertEqual(contents[2]["text"] as? String, Data(repeating: 7, count: 1000).base64EncodedString())
        recorder.removeAll()
        XCTAssertEqual(recorder.entryCount, 0)
    }

    func testTheFileIsAcceptedByAnIndependentHARReader() throws {
        #if os(Linux) || os(macOS)
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/json") { _ in .json(#"{"ok":true}"#) }
        server.route("/gone") { _ in .text("gone", status: 410) }
        server.route("/upload") { .json(#"{"bytes":\#($0.body.count)}"#, status: 201) }
        var withToken = FetchData(url: server.url("/json?api_key=k"))
        withToken.headers = ["Authorization": "Bearer t"]
        let recorder = HARRecorder(redaction: Redaction(queryItems: ["api_key"]))
        let stopped = try LoopbackServer()
        stopped.stop()
        run(
            [
                withToken, FetchData(url: server.url("/gone")), UploadData(url: server.url("/upload"), body: Data([1, 2, 3])),
                FetchData(url: stopped.url("/nobody")),
            ],
            recorder: recorder)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("independent-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }
        try recorder.write(to: file)

        let text = try checkHAR(file)
        XCTAssertTrue(text.contains("4 entries valid"), text)
        #endif
    }
}

/// Server-sent events, as a stream request.
struct Events: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}
