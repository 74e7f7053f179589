#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// A note whose `makeURLRequest` completes later, on the main queue.
struct LateNote: OutboxRequest, NoContentRequest {
    var path: String
    var identifier: String { "late#" + path }
    var shouldEnforceNoContent: Bool { false }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: TestServer.shared.url("/" + path))
        request.httpMethod = "POST"
        request.httpBody = Data("late".utf8)
        let made = UncheckedBox(completion)
        DispatchQueue.main.async { made.value(.success(request)) }
    }
}

/// Carries a non-Sendable value across a hop the test controls.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// A drain's removals share syncs; the asynchronous enqueue waits without blocking.
final class OutboxDrainTests: XCTestCase {
    private func recordingPath() -> (String, ReceivedNotes) {
        let path = "/outbox/\(UUID().uuidString)"
        let received = ReceivedNotes()
        TestServer.shared.route(path) { request in
            received.add(request)
            return LoopbackResponse(status: 201)
        }
        return (String(path.dropFirst()), received)
    }

    private func open(_ folder: URL, concurrent: Int = 4, suspended: Bool = true) throws -> Outbox {
        var options = testOutboxOptions
        options.maximumConcurrentEntries = concurrent
        options.startsSuspended = suspended
        // No timer: only the group size and idleness write removals, so that the count below is exact.
        options.removalDelay = .infinity
        return try Outbox(
            directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self, LateNote.self, StallingNote.self],
            options: options)
    }

    func testADrainWritesAtMostOneSyncPerEightRemovals() throws {
        let (path, received) = recordingPath()
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder)
        defer { outbox.close() }
        try outbox.enqueue(contentsOf: (0..<64).map { PostNote(path: path, text: "n\($0)") })
        let before = outbox.journal.groupCommits
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("all sent", count: 64) { $0.kind.isSent }
        outbox.isSuspended = false
        wait(for: [sent], timeout: 60)
        waitUntil("every removal written") { outbox.journal.liveCount == 0 }
        let groups = outbox.journal.groupCommits.groups - before.groups
        XCTAssertEqual(received.texts.count, 64)
        XCTAssertGreaterThanOrEqual(groups, 1)
        XCTAssertLessThanOrEqual(groups, 64 / 8 + 1, "\(groups) syncs for 64 removals")
    }

    func testTheDurabilityChoiceReachesTheJournal() throws {
        XCTAssertEqual(OutboxOptions().durability, .full)
        var options = testOutboxOptions
        options.durability = .barrier
        let barrier = try Outbox(directory: makeOutboxFolder(self), queue: OperationQueue(), requestTypes: [PostNote.self], options: options)
        defer { barrier.close() }
        XCTAssertEqual(barrier.journal.options.sync, .barrier)
        let full = try open(makeOutboxFolder(self))
        defer { full.close() }
        XCTAssertEqual(full.journal.options.sync, .full)
    }

    func testRemovalsNotYetWrittenAreWrittenByClose() throws {
        let (path, received) = recordingPath()
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, concurrent: 2)
        // An entry whose attempt never completes its preparation keeps one attempt running, so that the three
        // removals wait for a group of eight.
        try outbox.enqueue(StallingNote(path: path, text: "stalled-\(UUID().uuidString)", stalls: 1))
        try outbox.enqueue(contentsOf: (0..<3).map { PostNote(path: path, text: "n\($0)") }, lane: "a")
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("three sent", count: 3) { $0.kind.isSent }
        outbox.isSuspended = false
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(outbox.journal.liveCount, 4, "the three removals are not written yet")
        outbox.close()
        let reopened = try open(folder)
        defer { reopened.close() }
        XCTAssertEqual(reopened.pendingEntries.map(\.requestType), ["StallingNote"], "nothing sent twice after a clean close")
        XCTAssertEqual(received.texts.count, 3)
    }

    @MainActor
    func testOpeningWithoutBlockingResumesTheStoredEntries() async throws {
        let (path, received) = recordingPath()
        let folder = makeOutboxFolder(self)
        let first = try open(folder)
        try await first.enqueue(contentsOf: [PostNote(path: path, text: "x"), PostNote(path: path, text: "y")])
        first.close()
        let outbox = try await Outbox.open(
            directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self], options: testOutboxOptions)
        defer { outbox.close() }
        XCTAssertEqual(outbox.openingReport.pending, 2)
        for _ in 0..<4000 where received.texts.count < 2 { try await Task.sleep(nanoseconds: 5_000_000) }
        XCTAssertEqual(Set(received.texts), ["x", "y"])
    }

    @MainActor
    func testTheAsynchronousEnqueueWaitsForAMakeURLRequestThatCompletesOnTheMainQueue() async throws {
        let (path, received) = recordingPath()
        let outbox = try open(makeOutboxFolder(self), suspended: false)
        defer { outbox.close() }
        let enqueueBlocking: () throws -> OutboxEntry = { try outbox.enqueue(LateNote(path: path)) }
        XCTAssertThrowsError(try enqueueBlocking()) { error in
            guard case let .cannotEncode(_, reason) = error as? OutboxError else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("await"), reason)
        }
        XCTAssertEqual(outbox.pendingCount, 0, "nothing stored")
        let entry = try await outbox.enqueue(LateNote(path: path), lane: "main")
        XCTAssertEqual(entry.urlRequest?.httpBody, Data("late".utf8))
        let notes = [PostNote(path: path, text: "a"), PostNote(path: path, text: "b")]
        let stored = try await outbox.enqueue(contentsOf: notes)
        XCTAssertEqual(stored.map(\.id), [entry.id + 1, entry.id + 2])
        for _ in 0..<4000 where received.texts.count < 3 { try await Task.sleep(nanoseconds: 5_000_000) }
        XCTAssertEqual(Set(received.texts), ["late", "a", "b"])
    }
}
