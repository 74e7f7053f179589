#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// What the threads of an abuse test did, and what the server answered 201 to.
private final class AbuseTally: @unchecked Sendable {
    private let condition = NSCondition()
    private var acknowledgedKeys: [String] = []
    private var droppedKeys: Set<String> = []
    private var answeredKeys: Set<String> = []

    func acknowledge(_ key: String) {
        condition.withLock {
            acknowledgedKeys.append(key); condition.broadcast()
        }
    }
    func drop(_ key: String) { condition.withLock { _ = droppedKeys.insert(key) } }
    func answer(_ key: String) { condition.withLock { _ = answeredKeys.insert(key) } }

    var acknowledged: [String] { condition.withLock { acknowledgedKeys } }
    var dropped: Set<String> { condition.withLock { droppedKeys } }
    var answered: Set<String> { condition.withLock { answeredKeys } }

    /// Waits (up to 60 s) until `count` enqueues were acknowledged.
    func waitForAcknowledged(_ count: Int) {
        condition.withLock {
            let limit = Date(timeIntervalSinceNow: 60)
            while acknowledgedKeys.count < count, condition.wait(until: limit) {}
        }
    }
}

/// Many threads enqueue, drop, retry, suspend and resume, ask for operations, while the server answers 500, 503 with
/// hostile `Retry-After` values, 422 and 201; then the outbox is closed in the middle and reopened. Nothing crashes,
/// and no acknowledged entry is lost or doubled.
final class OutboxAbuseTests: XCTestCase {
    func testConcurrentAbuseThenCloseLosesNothing() throws {
        let path = "/abuse/\(UUID().uuidString)"
        let tally = AbuseTally()
        let statuses = ScriptedStatuses((0..<600).map { [500, 422, 201, 201, 503][$0 % 5] })
        let retryAfters = ["99999999", "-5", "soon", "0", "Wed, 21 Oct 2015 07:28:00 GMT"]
        TestServer.shared.route(path) { request in
            let status = statuses.next()
            let key = request.headers.first { $0.key.lowercased() == "idempotency-key" }?.value ?? ""
            if status == 201 { tally.answer(String(key.dropFirst().dropLast())) }
            return LoopbackResponse(status: status, headers: ["Retry-After": retryAfters[(key.utf8.count + status) % 5]])
        }
        let folder = makeOutboxFolder(self)
        var options = testOutboxOptions
        options.maximumConcurrentEntries = 3
        options.maxDelay = 0.05
        let outbox = try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self], options: options)
        let changes = ChangeRecorder(outbox)
        let group = DispatchGroup()
        for thread in 0..<6 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                for index in 0..<300 {
                    do {
                        let note = PostNote(path: String(path.dropFirst()), text: "t\(thread)-\(index)")
                        tally.acknowledge(try outbox.enqueue(note, lane: index % 3 == 0 ? "lane\(thread % 2)" : nil).idempotencyKey)
                    } catch OutboxError.closed {
                        return
                    } catch {
                        XCTFail("enqueue: \(error)")
                    }
                }
            }
        }
        for thread in 0..<3 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                for step in 0..<3000 where !Self.abuse(outbox, step: step + thread, tally: tally) { return }
            }
        }
        tally.waitForAcknowledged(900)
        outbox.isSuspended = false
        outbox.close()
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)

        let reportedSent = Set(changes.all.compactMap { $0.kind.isSent ? $0.entry.idempotencyKey : nil })
        options.startsSuspended = true
        let reopened = try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self], options: options)
        defer { reopened.close() }
        let stored = (reopened.pendingEntries + reopened.deadLetters).map(\.idempotencyKey)
        let acknowledged = tally.acknowledged
        XCTAssertEqual(Set(acknowledged).count, acknowledged.count, "a key given twice")
        XCTAssertEqual(Set(stored).count, stored.count, "an entry stored twice")
        let (answered, dropped) = (tally.answered, tally.dropped)
        let lost = acknowledged.filter { !stored.contains($0) && !answered.contains($0) && !dropped.contains($0) }
        XCTAssertEqual(lost, [], "acknowledged, never answered 201 nor dropped, and gone")
        XCTAssertEqual(stored.filter(reportedSent.contains), [], "reported sent, yet stored")
        XCTAssertEqual(stored.filter { !acknowledged.contains($0) }, [], "stored, never acknowledged")
    }

    /// One step of an abusing thread; `false` once the outbox is closed.
    private static func abuse(_ outbox: Outbox, step: Int, tally: AbuseTally) -> Bool {
        do {
            switch step % 6 {
            case 0: outbox.isSuspended.toggle()
            case 1: outbox.retryNow()
            case 2, 5:
                if let entry = (step % 6 == 2 ? outbox.pendingEntries : outbox.deadLetters).randomElement() {
                    // Counted before: the entry may be gone before `drop` returns, or a drop in flight may end in `sent`.
                    tally.drop(entry.idempotencyKey)
                    try outbox.drop(entry.id)
                }
            case 3: if let entry = outbox.deadLetters.randomElement() { try outbox.retry(entry.id) }
            default: _ = outbox.operation(for: UInt64.random(in: 1...2000))
            }
        } catch OutboxError.closed {
            return false
        } catch OutboxError.noSuchEntry {
        } catch {
            XCTFail("\(error)")
        }
        return true
    }
}
