#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// A note whose `makeURLRequest` writes other bytes each time it is called, as a request that encodes a dictionary
/// or reads the clock does: its body carries a number that grows with each call.
struct ShiftingNote: OutboxRequest, NoContentRequest {
    var path: String
    var identifier: String { "shifting#" + path }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: TestServer.shared.url("/" + path))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"note":"n","made":\#(MakeCounter.shared.next())}"#.utf8)
        completion(.success(request))
    }
}

/// Counts `makeURLRequest` calls.
final class MakeCounter: @unchecked Sendable {
    static let shared = MakeCounter()
    private let lock = NSLock()
    private var count = 0
    func next() -> Int {
        lock.withLock {
            count += 1; return count
        }
    }
}

/// A server that fingerprints each key's payload, as the IETF idempotency draft allows: the first delivery of a key
/// fixes its bytes, a later one with other bytes gets 422. The first `refusals` deliveries get 503.
final class FingerprintingServer: @unchecked Sendable {
    private let lock = NSLock()
    private var fingerprints: [String: Data] = [:]
    private var deliveries: [(key: String, body: Data)] = []
    private var refusals: Int

    init(refusals: Int) { self.refusals = refusals }

    var bodies: [Data] { lock.withLock { deliveries.map(\.body) } }
    var contentTypes: [String] { lock.withLock { types } }
    private var types: [String] = []

    func handle(_ request: LoopbackRequest) -> LoopbackResponse {
        let key = request.headers.first { $0.key.lowercased() == "idempotency-key" }?.value ?? ""
        return lock.withLock {
            deliveries.append((key, request.body))
            types.append(request.headers.first { $0.key.lowercased() == "content-type" }?.value ?? "")
            if let known = fingerprints[key], known != request.body {
                return LoopbackResponse(status: 422, body: Data("this key was used with another payload".utf8))
            }
            fingerprints[key] = request.body
            if refusals > 0 {
                refusals -= 1
                return LoopbackResponse(status: 503)
            }
            return LoopbackResponse(status: 201)
        }
    }
}

/// Every attempt of an entry sends the bytes its request made at enqueue, in this process and after a restart.
final class OutboxSameBytesTests: XCTestCase {
    private func open(_ folder: URL, suspended: Bool = false) throws -> Outbox {
        var options = testOutboxOptions
        options.startsSuspended = suspended
        return try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [ShiftingNote.self], options: options)
    }

    func testRetriesAfter503SendTheSameBytesAndAFingerprintingServerAcceptsThem() throws {
        let path = "outbox/\(UUID().uuidString)"
        let server = FingerprintingServer(refusals: 3)
        TestServer.shared.route("/" + path) { server.handle($0) }
        let outbox = try open(makeOutboxFolder(self))
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        let entry = try outbox.enqueue(ShiftingNote(path: path))
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(outbox.deadLetters.count, 0, "not parked with a 422")
        XCTAssertEqual(server.bodies.count, 4)
        XCTAssertEqual(Set(server.bodies).count, 1, "one payload for one key")
        XCTAssertEqual(server.bodies.first, entry.urlRequest?.httpBody)
        XCTAssertEqual(entry.urlRequest?.httpMethod, "POST")
        XCTAssertEqual(entry.urlRequest?.value(forHTTPHeaderField: "Content-Type"), "application/json")
    }

    func testAfterARestartTheEntrySendsTheBytesOfItsFirstAttempt() throws {
        let path = "outbox/\(UUID().uuidString)"
        let server = FingerprintingServer(refusals: 1)
        TestServer.shared.route("/" + path) { server.handle($0) }
        let folder = makeOutboxFolder(self)
        let first = try open(folder)
        let changes = ChangeRecorder(first)
        let refused = changes.expectation("503") { $0.kind.isWillRetry }
        first.isSuspended = false
        try first.enqueue(ShiftingNote(path: path))
        wait(for: [refused], timeout: 20)
        first.close()

        let second = try open(folder, suspended: true)
        defer { second.close() }
        let resumed = ChangeRecorder(second)
        let sent = resumed.expectation("sent after the restart") { $0.kind.isSent }
        second.isSuspended = false
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(second.deadLetters.count, 0)
        XCTAssertGreaterThanOrEqual(server.bodies.count, 2)
        XCTAssertEqual(Set(server.bodies).count, 1)
    }

    /// The stored form survives a round trip, and a record of format 1 (no frozen request) is still read.
    func testRecordsRoundTripAndAnOlderRecordIsRead() throws {
        var request = URLRequest(url: URL(string: "https://example.com/a?b=c")!)
        request.httpMethod = "PUT"
        request.httpBody = Data([0, 1, 2, 255])
        request.setValue("v", forHTTPHeaderField: "X-B")
        request.setValue("w", forHTTPHeaderField: "X-A")
        request.timeoutInterval = 7
        let frozen = try FrozenRequest(request, bodyLimit: 100)
        XCTAssertEqual(frozen.fields.map(\.name), ["X-A", "X-B"])
        let entry = OutboxEntry(
            id: 9, idempotencyKey: "k", lane: "l", requestType: "T", enqueuedAt: Date(timeIntervalSince1970: 5), expiresAt: nil,
            attempts: 0, deadLetter: nil, encodedRequest: Data("{}".utf8), frozen: frozen)
        let decoded = try XCTUnwrap(OutboxRecord.decode(OutboxRecord.encode(entry), id: 9))
        XCTAssertEqual(decoded, entry)
        XCTAssertEqual(decoded.urlRequest?.httpBody, request.httpBody)
        XCTAssertEqual(decoded.urlRequest?.timeoutInterval, 7)

        // Format 1: the same fields without the frozen request's flag.
        var old = OutboxRecord.encode(entry.withoutFrozenRequest)
        old[old.startIndex] = 1
        let flag = old.startIndex + 1 + (4 + 1) + 1 + (4 + 1) + (4 + 1) + 8 + 1 + (4 + 2)
        XCTAssertEqual(old[flag], 0)
        old.remove(at: flag)
        let older = try XCTUnwrap(OutboxRecord.decode(old, id: 9))
        XCTAssertNil(older.urlRequest)
        XCTAssertEqual(older.encodedRequest, Data("{}".utf8))
        XCTAssertEqual(older.lane, "l")
    }

    func testABodyLargerThanAnEntryMayHoldIsRefusedAtEnqueue() throws {
        func streamed() -> URLRequest {
            var request = URLRequest(url: URL(string: "https://example.com/")!)
            request.httpBodyStream = InputStream(data: Data(count: 1000))
            return request
        }
        XCTAssertThrowsError(try FrozenRequest(streamed(), bodyLimit: 999))
        XCTAssertEqual(try FrozenRequest(streamed(), bodyLimit: 1000).body.count, 1000)
    }
}

extension OutboxEntry {
    var withoutFrozenRequest: OutboxEntry {
        var entry = self
        entry.frozen = nil
        return entry
    }
}
