#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer
import XCTest

/// A ``HARRecorder`` among the outbox queue's monitors records every attempt of an entry, each with its key.
final class OutboxHARTests: XCTestCase {
    private var server: LoopbackServer { TestServer.shared }

    override func tearDown() {
        OutboxTarget.reset()
        super.tearDown()
    }

    func testEachAttemptOfAnEntryIsRecordedWithItsIdempotencyKey() throws {
        let path = "/outbox/har-\(UUID().uuidString)"
        let script = ScriptedStatuses([503])
        server.route(path) { _ in
            let status = script.next()
            return LoopbackResponse(status: status, headers: status == 503 ? ["Retry-After": "0"] : [:], body: Data("answer \(status)".utf8))
        }
        let queue = OperationQueue()
        let recorder = HARRecorder()
        queue.requestPolicies.monitors.append(recorder)
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: queue, session: testSession, requestTypes: [PostNote.self], options: testOutboxOptions)
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        let entry = try outbox.enqueue(PostNote(path: String(path.dropFirst()), text: "recorded"))
        wait(for: [sent], timeout: 20)

        let file = try XCTUnwrap(try JSONSerialization.jsonObject(with: recorder.harData()) as? [String: Any])
        let entries = try XCTUnwrap((file["log"] as? [String: Any])?["entries"] as? [[String: Any]])
        let requests = entries.compactMap { $0["request"] as? [String: Any] }
        XCTAssertEqual(entries.compactMap { ($0["response"] as? [String: Any])?["status"] as? Int }, [503, 201], "the retried attempt, then the one that settled it")
        XCTAssertEqual(requests.map { $0["url"] as? String }, Array(repeating: server.url(path).absoluteString, count: 2))
        for request in requests {
            let headers = (request["headers"] as? [[String: Any]]) ?? []
            let keys = headers.filter { ($0["name"] as? String)?.lowercased() == "idempotency-key" }.compactMap { $0["value"] as? String }
            XCTAssertEqual(keys, ["\"\(entry.idempotencyKey)\""], "each attempt carries the entry's key")
            XCTAssertEqual((request["postData"] as? [String: Any])?["text"] as? String, Data("recorded".utf8).base64EncodedString())
        }
    }
}
