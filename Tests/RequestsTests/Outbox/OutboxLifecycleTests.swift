#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// A note whose attempts wait at `NoteGate.shared` (in an adapter, which runs for each attempt) before they go to
/// `OutboxTarget.base`.
struct GatedNote: OutboxRequest, NoContentRequest {
    var text: String
    var identifier: String { "gated#" + text }

    /// Each attempt passes the gate, then goes to `OutboxTarget.base`.
    var adapters: [RequestAdapter] {
        [
            RequestAdapter.map {
                NoteGate.shared.pass(); return $0
            }, OutboxTarget.retargeting,
        ]
    }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: OutboxTarget.base.appendingPathComponent("gated"))
        request.httpMethod = "POST"
        request.httpBody = Data(text.utf8)
        completion(.success(request))
    }
}

/// Counts the attempts that reach `GatedNote.makeURLRequest` and holds each beyond `open` until it is raised.
final class NoteGate: @unchecked Sendable {
    static let shared = NoteGate()
    private let condition = NSCondition()
    private var arrivals = 0
    private var open = Int.max

    func reset(open: Int) { condition.withLock { (arrivals, self.open) = (0, open) } }

    func pass() {
        condition.withLock {
            arrivals += 1
            let number = arrivals
            condition.broadcast()
            while number > open { condition.wait() }
        }
    }

    /// Lets `count` attempts in all through.
    func raise(to count: Int) {
        condition.withLock {
            open = count; condition.broadcast()
        }
    }

    /// Waits (up to 20 s) until `count` attempts have arrived; whether they did.
    func waitForArrivals(_ count: Int) -> Bool {
        condition.withLock {
            let limit = Date(timeIntervalSinceNow: 20)
            while arrivals < count, condition.wait(until: limit) {}
            return arrivals >= count
        }
    }
}

/// The outbox under lifecycle abuse: suspension while offline, close with work in flight.
final class OutboxLifecycleTests: XCTestCase {
    override func tearDown() {
        NoteGate.shared.reset(open: .max)
        OutboxTarget.reset()
        super.tearDown()
    }

    /// The connectivity probe's timer fires while the outbox is suspended: resuming must send the probe again, not
    /// leave the outbox waiting for connectivity with nothing probing it.
    func testResumingAfterTheProbesTimerFiredWhileSuspendedProbesAgain() throws {
        OutboxTarget.base = try closedPortURL()
        NoteGate.shared.reset(open: 1)
        var options = testOutboxOptions
        options.maxDelay = 0  // each wait is 0 s: the timer fires at once
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [GatedNote.self],
            options: options)
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let offline = changes.expectation("offline") { $0.kind == .waitingForConnectivity }
        try outbox.enqueue(GatedNote(text: "probe"))
        wait(for: [offline], timeout: 20)
        XCTAssertTrue(NoteGate.shared.waitForArrivals(2), "the probe's second attempt")
        outbox.isSuspended = true
        let secondFailed = changes.expectation("second attempt failed") { $0.kind.isWillRetry && $0.entry.attempts == 2 }
        NoteGate.shared.raise(to: 2)
        wait(for: [secondFailed], timeout: 20)
        // The retry timer (0 s) was queued on the callback queue by the failure: after these, it has fired.
        outbox.callbacks.sync {}
        outbox.callbacks.sync {}
        outbox.isSuspended = false
        NoteGate.shared.raise(to: .max)
        XCTAssertTrue(NoteGate.shared.waitForArrivals(3), "resumed, the outbox probes again")
    }

    /// The settled operation of an entry that was parked, then retried and sent, or dropped: it already finished when
    /// the entry was parked, and must not be added to the queue a second time (Foundation traps).
    func testAnEntryParkedWithASettledOperationCanBeRetriedOrDropped() throws {
        let path = "outbox/\(UUID().uuidString)"
        let statuses = ScriptedStatuses([422, 422])
        TestServer.shared.route("/" + path) { _ in LoopbackResponse(status: statuses.next()) }
        var options = testOutboxOptions
        options.startsSuspended = true
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self],
            options: options)
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let retried = try outbox.enqueue(PostNote(path: path, text: "retried"), lane: "one")
        let dropped = try outbox.enqueue(PostNote(path: path, text: "dropped"), lane: "two")
        for entry in [retried, dropped] { XCTAssertNotNil(outbox.operation(for: entry.id)) }
        let parked = [retried, dropped].map { entry in changes.expectation("parked") { $0.kind == .parked && $0.entry.id == entry.id } }
        outbox.isSuspended = false
        wait(for: parked, timeout: 20)

        let sent = changes.expectation("sent") { $0.kind.isSent && $0.entry.id == retried.id }
        try outbox.retry(retried.id)
        wait(for: [sent], timeout: 20)
        try outbox.drop(dropped.id)
        XCTAssertEqual(outbox.pendingCount + outbox.deadLetters.count, 0)
    }
}
