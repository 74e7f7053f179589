#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTesting
import XCTest

/// Replays HAR files written by other tools, and refuses broken ones with a typed error.
final class HARReplayTests: XCTestCase {
    /// As a browser exports it: no `creator`, `cache` or `timings`, headers in any case, a Base64 body, a body
    /// without `text`, a `postData` with `params`, and fields the library does not know.
    private let browserExport = """
        {"log": {"version": "1.2", "pages": [{"id": "page_1", "title": "x"}], "entries": [
          {"pageref": "page_1", "_initiator": {"type": "script"}, "startedDateTime": "2026-11-29T10:00:00.000Z", "time": 12.5,
           "request": {"method": "GET", "url": "https://api.example.com/users/7?lang=en&page=2", "httpVersion": "h2",
                       "headers": [{"name": ":authority", "value": "api.example.com"}], "cookies": []},
           "response": {"status": 200, "statusText": "", "httpVersion": "h2",
                        "headers": [{"name": "content-type", "value": "application/json"}, {"name": "content-encoding", "value": "br"}],
                        "content": {"size": 14, "mimeType": "application/json", "text": "eyJuYW1lIjoiQWRhIn0=", "encoding": "base64"}}},
          {"startedDateTime": "2026-11-29T10:00:01.000Z",
           "request": {"method": "post", "url": "https://api.example.com/login",
                       "postData": {"mimeType": "application/x-www-form-urlencoded", "params": [{"name": "user", "value": "ada"}]}},
           "response": {"status": 204, "content": {"size": 0, "mimeType": "x-unknown"}}},
          {"request": {"method": "GET", "url": "https://api.example.com/users/7?page=2&lang=en"},
           "response": {"status": 404, "content": {"mimeType": "text/plain", "text": "gone now"}}},
          {"request": {"method": "GET", "url": "https://ads.example.com/pixel"},
           "response": {"status": 0, "_error": "net::ERR_BLOCKED_BY_CLIENT", "content": {"size": 0, "mimeType": ""}}}
        ]}}
        """

    private func harFile(_ text: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("replay-\(UUID().uuidString).har")
        try Data(text.utf8).write(to: url)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    func testABrowsersExportIsReplayedInOrder() throws {
        let replay = try HARReplay(file: harFile(browserExport), mode: .replayOnly)
        // Query items in another order match; the second call gets the next recorded answer, then it repeats.
        let user = URL(string: "https://api.example.com/users/7?page=2&lang=en")!
        let first = try XCTUnwrap(run(FetchData(url: user), on: replay.session).first).get()
        XCTAssertEqual(String(decoding: first, as: UTF8.self), #"{"name":"Ada"}"#)
        for _ in 0..<2 {
            guard case let .failure(RequestQueueError.invalidStatusCode(404, _, body))? = run(FetchData(url: user), on: replay.session).first else {
                return XCTFail("expected the recorded 404")
            }
            XCTAssertEqual(String(decoding: body, as: UTF8.self), "gone now")
        }
        let login = run(Delete(url: URL(string: "https://api.example.com/login")!), on: replay.session)
        XCTAssertNil(try? login.first?.get(), "a DELETE does not match the recorded POST")
        // An entry without a response (status 0) is replayed as a transport error.
        let blocked = run(FetchData(url: URL(string: "https://ads.example.com/pixel")!), on: replay.session).first
        guard case let .failure(error as URLError)? = blocked else { return XCTFail("expected a URLError, got \(String(describing: blocked))") }
        XCTAssertEqual(error.code, .unknown)
        XCTAssertEqual(replay.stubs?.unmatchedRequests.map(\.method), ["DELETE"], "only the DELETE matched nothing")
        var post = FetchData(url: URL(string: "https://api.example.com/login")!)
        post.method = "POST"
        XCTAssertEqual(try run(post, on: replay.session).first?.get(), Data())
    }

    func testARequestWithoutAMatchFailsNamingTheClosestEntry() throws {
        let replay = try HARReplay(file: harFile(browserExport), mode: .replayOnly)
        let result = run(FetchData(url: URL(string: "https://api.example.com/users/8?lang=en&page=2")!), on: replay.session).first
        guard case let .failure(error)? = result else { return XCTFail("expected a failure, got \(String(describing: result))") }
        let message = "\(error)"
        XCTAssertTrue(message.contains("No recorded entry matches GET https://api.example.com/users/8"), message)
        XCTAssertTrue(message.contains("the closest is entry 0: GET https://api.example.com/users/7?lang=en&page=2 → 200"), message)
        XCTAssertEqual(replay.stubs?.unmatchedRequests.map(\.url.path), ["/users/8"])
    }

    func testMatchingOnHeadersAndBodyWhenAsked() throws {
        let file = try harFile(
            """
            {"log": {"entries": [
              {"request": {"method": "POST", "url": "https://x.test/a", "headers": [{"name": "Authorization", "value": "<redacted>"},
                           {"name": "X-Tenant", "value": "blue"}], "postData": {"mimeType": "text/plain", "text": "one"}},
               "response": {"status": 200, "content": {"mimeType": "text/plain", "text": "blue one"}}}]}}
            """)
        let replay = try HARReplay(file: file, mode: .replayOnly, matching: HARMatching(body: true, headers: ["x-tenant", "Authorization"]))
        func post(tenant: String, body: String) -> Result<Data, Error>? {
            let request = FetchData(
                url: URL(string: "https://x.test/a")!, method: "POST", headers: ["X-Tenant": tenant, "Authorization": "Bearer anything"],
                body: Data(body.utf8))
            return run(request, on: replay.session).first
        }
        XCTAssertEqual(try post(tenant: "blue", body: "one")?.get(), Data("blue one".utf8))
        XCTAssertNil(try? post(tenant: "red", body: "one")?.get())
        XCTAssertNil(try? post(tenant: "blue", body: "two")?.get())
    }

    func testBrokenFilesAreRefusedWithATypedError() throws {
        let broken = [
            "not json at all", "[1, 2]", #"{"log": {"entries": [{"request": {}}]}}"#,
            #"{"log": {"entries": [{"request": {"url": "https://x.test"}, "response": {"status": "ok"}}]}}"#,
            #"{"log": {"entries": [{"request": {"url": "https://x.test"}, "response": {"status": 99999}}]}}"#,
            #"{"log": {"entries": [{"request": {"url": "https://x.test"}, "response": {"status": 200, "content": {"text": "%%%", "encoding": "base64"}}}]}}"#,
            String(repeating: "[", count: 100_000),
        ]
        for text in broken {
            XCTAssertThrowsError(try HARReplay(file: harFile(text), mode: .replayOnly), text.prefix(60).description) { error in
                guard case HARReplayError.unreadableFile = error else { return XCTFail("\(error)") }
            }
        }
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("missing-\(UUID().uuidString).har")
        XCTAssertThrowsError(try HARReplay(file: missing, mode: .replayOnly)) { error in
            guard case HARReplayError.missingFile = error else { return XCTFail("\(error)") }
        }
        XCTAssertTrue(try HARReplay(file: missing, mode: .once).isRecording)
    }
}
