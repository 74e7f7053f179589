#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// A POST that expects no content (the queue's default rule: a body fails it).
struct StrictNote: OutboxRequest, NoContentRequest {
    var path: String
    var identifier: String { "strict#" + path }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: TestServer.shared.url("/" + path))
        request.httpMethod = "POST"
        request.httpBody = Data("strict".utf8)
        completion(.success(request))
    }
}

/// A POST whose answer is decoded.
struct CreatedNote: OutboxRequest, DecodableRequest {
    struct Created: Decodable, Sendable { var id: Int }
    typealias Success = Created
    var path: String
    var identifier: String { "created#" + path }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: TestServer.shared.url("/" + path))
        request.httpMethod = "POST"
        completion(.success(request))
    }
}

/// The outbox judges an answer as the queue judges the same request.
final class OutboxVerdictTests: XCTestCase {
    private func route(_ response: LoopbackResponse) -> String {
        let path = "outbox/\(UUID().uuidString)"
        TestServer.shared.route("/" + path) { _ in response }
        return path
    }

    /// The queue's verdict on `request`: the failure's description, or `nil` for a success.
    private func queueVerdict<R: DataRequest>(_ request: R) -> String? {
        let done = expectation(description: "queue")
        let outcome = LockedValue<String?>(nil)
        OperationQueue().addRequest(request, session: testSession) { result in
            if case let .failure(error) = result { outcome.set((error as? LocalizedError)?.errorDescription ?? "\(error)") }
            done.fulfill()
        }
        wait(for: [done], timeout: 20)
        return outcome.value
    }

    /// The outbox's verdict on `request`: the parked entry, or `nil` when it was sent.
    private func outboxVerdict<R: OutboxRequest>(_ request: R) throws -> OutboxEntry? {
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [R.self],
            options: testOutboxOptions)
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let settled = changes.expectation("settled") { $0.kind.isSent || $0.kind == .parked }
        try outbox.enqueue(request)
        wait(for: [settled], timeout: 20)
        return outbox.deadLetters.first
    }

    func testANoContentRequestAnsweredWithABodyFailsInTheQueueAndIsParkedByTheOutbox() throws {
        let path = route(LoopbackResponse(status: 201, body: Data(#"{"id":1}"#.utf8)))
        let failure = try XCTUnwrap(queueVerdict(StrictNote(path: path)), "the queue fails it")
        let parked = try XCTUnwrap(outboxVerdict(StrictNote(path: path)), "the outbox parks it")
        XCTAssertEqual(parked.deadLetter?.reason, .failed(failure))
        XCTAssertEqual(parked.deadLetter?.response?.statusCode, 201)
        XCTAssertEqual(parked.deadLetter?.response?.body, Data(#"{"id":1}"#.utf8))
    }

    func testADecodableRequestIsSentWhenItsAnswerDecodesAndParkedWhenItDoesNot() throws {
        let good = route(LoopbackResponse(status: 201, body: Data(#"{"id":1}"#.utf8)))
        XCTAssertNil(queueVerdict(CreatedNote(path: good)))
        XCTAssertNil(try outboxVerdict(CreatedNote(path: good)))

        let empty = route(LoopbackResponse(status: 201))
        let failure = try XCTUnwrap(queueVerdict(CreatedNote(path: empty)), "an empty body does not decode")
        let parked = try XCTUnwrap(outboxVerdict(CreatedNote(path: empty)))
        XCTAssertEqual(parked.deadLetter?.reason, .failed(failure))
    }

    func testANoContentRequestAnsweredWithNoBodyIsSentBothWays() throws {
        let path = route(LoopbackResponse(status: 204))
        XCTAssertNil(queueVerdict(StrictNote(path: path)))
        XCTAssertNil(try outboxVerdict(StrictNote(path: path)))
    }

    func testOutboxErrorsDescribeThemselves() {
        let folder = URL(fileURLWithPath: "/tmp/box")
        let errors: [OutboxError] = [
            .folderInUse(folder), .unusableFolder(folder, "it is a symbolic link"), .cannotEncode(requestType: "T", "no"),
            .unregisteredType("T"), .tooLarge(size: 2, limit: 1), .writeFailed("write failed: No space left on device"),
            .noSuchEntry(3), .closed,
        ]
        for error in errors {
            let text = (error as Error).localizedDescription
            XCTAssertFalse(text.contains("OutboxError"), text)
            XCTAssertFalse(text.isEmpty)
        }
        XCTAssertEqual((OutboxError.closed as Error).localizedDescription, "The outbox is closed.")
        XCTAssertTrue((OutboxError.folderInUse(folder) as Error).localizedDescription.contains("/tmp/box"))
    }
}

/// A value behind a lock, for test callbacks.
final class LockedValue<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func set(_ value: Value) { lock.withLock { stored = value } }
}
