#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer
import XCTest

/// The outbox against the loopback server: keys, retries, parking, lanes, replay, expiry, connectivity.
final class OutboxTests: XCTestCase {
    private var server: LoopbackServer { TestServer.shared }

    override func tearDown() {
        OutboxTarget.reset()
        super.tearDown()
    }

    private func open(
        _ folder: URL, queue: OperationQueue = OperationQueue(), types: [any OutboxRequest.Type] = [PostNote.self],
        suspended: Bool = false
    ) throws -> Outbox {
        var options = testOutboxOptions
        options.startsSuspended = suspended
        return try Outbox(directory: folder, queue: queue, session: testSession, requestTypes: types, options: options)
    }

    /// A path whose requests are recorded, answered with `statuses` in turn, then 201.
    private func recordingPath(_ statuses: [Int] = [], headers: [String: String] = [:]) -> (String, ReceivedNotes) {
        let path = "/outbox/\(UUID().uuidString)"
        let received = ReceivedNotes()
        let script = ScriptedStatuses(statuses)
        server.route(path) { request in
            received.add(request)
            let status = script.next()
            return LoopbackResponse(status: status, headers: status == 201 ? [:] : headers, body: Data("answer \(status)".utf8))
        }
        return (String(path.dropFirst()), received)
    }

    func testAnEntryIsSentWithItsIdempotencyKeyAndLeaves() throws {
        let (path, received) = recordingPath()
        let outbox = try open(makeOutboxFolder(self))
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        let entry = try outbox.enqueue(PostNote(path: path, text: "hello"))
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(received.keys, ["\"\(entry.idempotencyKey)\""])
        XCTAssertEqual(received.texts, ["hello"])
        XCTAssertEqual(outbox.pendingCount, 0)
        XCTAssertEqual(changes.all.first?.kind, .enqueued)
        XCTAssertEqual(changes.all.first?.pendingCount, 1)
        XCTAssertEqual(changes.all.last?.pendingCount, 0)
        XCTAssertEqual(UUID(uuidString: entry.idempotencyKey)?.uuidString.lowercased(), entry.idempotencyKey)
    }

    func testTransientAnswersAreRetriedWithTheSameKey() throws {
        let (path, received) = recordingPath([503, 500, 429, 408], headers: ["Retry-After": "0"])
        let outbox = try open(makeOutboxFolder(self))
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        let entry = try outbox.enqueue(PostNote(path: path, text: "again"))
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(received.keys, Array(repeating: "\"\(entry.idempotencyKey)\"", count: 5))
        XCTAssertEqual(changes.all.filter(\.kind.isWillRetry).count, 4)
        if case let .sent(response) = changes.all.last?.kind {
            XCTAssertEqual(response.statusCode, 201)
        } else {
            XCTFail("last change: \(String(describing: changes.all.last))")
        }
    }

    func testARejectedEntryIsParkedWithTheResponseThenRetriedOrDropped() throws {
        let (path, received) = recordingPath([422, 409])
        let outbox = try open(makeOutboxFolder(self))
        let changes = ChangeRecorder(outbox)
        let parked = changes.expectation("parked") { $0.kind == .parked }
        let entry = try outbox.enqueue(PostNote(path: path, text: "bad"))
        wait(for: [parked], timeout: 20)
        let letter = try XCTUnwrap(outbox.deadLetters.first?.deadLetter)
        XCTAssertEqual(letter.reason, .rejected(statusCode: 422))
        XCTAssertEqual(letter.response?.body, Data("answer 422".utf8))
        XCTAssertEqual(outbox.pendingCount, 0)
        XCTAssertNil(outbox.operation(for: entry.id), "a parked entry has no pending operation")

        let parkedAgain = changes.expectation("parked twice") { $0.kind == .parked && $0.deadLetterCount == 1 && $0.entry.deadLetter?.reason == .rejected(statusCode: 409) }
        try outbox.retry(entry.id)
        wait(for: [parkedAgain], timeout: 20)
        XCTAssertEqual(received.keys, Array(repeating: "\"\(entry.idempotencyKey)\"", count: 2))

        let dropped = changes.expectation("dropped") { $0.kind == .dropped(.byApp) }
        try outbox.drop(entry.id)
        wait(for: [dropped], timeout: 20)
        XCTAssertTrue(outbox.deadLetters.isEmpty)
        XCTAssertThrowsError(try outbox.drop(entry.id)) { XCTAssertEqual($0 as? OutboxError, .noSuchEntry(entry.id)) }
    }

    func testALaneSendsOneAtATimeInEnqueueOrderWhileOtherLanesGoOn() throws {
        let path = "/outbox/lanes-\(UUID().uuidString)"
        let tracker = LaneTracker()
        server.route(path) { request in
            let text = String(decoding: request.body, as: UTF8.self)
            tracker.begin(text)
            defer { tracker.end(text) }
            // Lane a's first entry waits until lane b's first entry has arrived: lanes run in parallel.
            if text == "a-0" { tracker.waitFor("b-0") }
            return LoopbackResponse(status: 201)
        }
        let queue = OperationQueue()
        // Suspended while entries are enqueued: otherwise every entry so far may be sent between two enqueues.
        let outbox = try open(makeOutboxFolder(self), queue: queue, suspended: true)
        let changes = ChangeRecorder(outbox)
        let done = changes.expectation("all sent") { $0.pendingCount == 0 && $0.kind.isSent }
        for index in 0..<15 {
            try outbox.enqueue(PostNote(path: String(path.dropFirst()), text: "a-\(index)"), lane: "a")
            try outbox.enqueue(PostNote(path: String(path.dropFirst()), text: "b-\(index)"), lane: "b")
        }
        outbox.isSuspended = false
        wait(for: [done], timeout: 30)
        XCTAssertEqual(tracker.order(prefix: "a-"), (0..<15).map { "a-\($0)" })
        XCTAssertEqual(tracker.order(prefix: "b-"), (0..<15).map { "b-\($0)" })
        XCTAssertEqual(tracker.maximumInFlight(prefix: "a-"), 1)
        XCTAssertEqual(tracker.maximumInFlight(prefix: "b-"), 1)
        XCTAssertTrue(tracker.sawB0BeforeA0Ended, "lane b waited for lane a")
    }

    func testEntriesAreResumedByTheNextOutboxWithTheirKeys() throws {
        let (path, received) = recordingPath()
        let folder = makeOutboxFolder(self)
        let stopped = OperationQueue()
        stopped.isSuspended = true
        var first: Outbox? = try open(folder, queue: stopped)
        let entries = try (0..<3).map { try XCTUnwrap(first).enqueue(PostNote(path: path, text: "n\($0)"), lane: "l") }
        XCTAssertThrowsError(try open(folder)) { XCTAssertEqual($0 as? OutboxError, .folderInUse(folder)) }
        first?.close()
        first = nil
        XCTAssertEqual(received.keys, [], "nothing was sent by the first outbox")

        let second = try open(folder, suspended: true)
        XCTAssertEqual(second.openingReport.pending, 3)
        let changes = ChangeRecorder(second)
        let done = changes.expectation("all sent") { $0.pendingCount == 0 && $0.kind.isSent }
        second.isSuspended = false
        wait(for: [done], timeout: 20)
        XCTAssertEqual(received.keys, entries.map { "\"\($0.idempotencyKey)\"" })
        XCTAssertEqual(received.texts, ["n0", "n1", "n2"])
    }

    func testAStoredEntryOfAnUnknownTypeIsParked() throws {
        let folder = makeOutboxFolder(self)
        let stopped = OperationQueue()
        stopped.isSuspended = true
        let first = try open(folder, queue: stopped)
        try first.enqueue(PostNote(path: "outbox/unknown", text: "x"))
        first.close()
        let reopened = try open(folder, types: [Unencodable.self], suspended: true)
        let changes = ChangeRecorder(reopened)
        let parked = changes.expectation("parked") { $0.kind == .parked }
        XCTAssertEqual(reopened.pendingCount, 1)
        reopened.isSuspended = false
        wait(for: [parked], timeout: 20)
        XCTAssertEqual(reopened.deadLetters.first?.deadLetter?.reason, .cannotDecode(requestType: "PostNote"))
    }

    func testBadInputThrowsAndStoresNothing() throws {
        let outbox = try open(makeOutboxFolder(self))
        XCTAssertThrowsError(try outbox.enqueue(Unencodable())) {
            XCTAssertEqual($0 as? OutboxError, .unregisteredType("Unencodable"))
        }
        let both = try open(makeOutboxFolder(self), types: [PostNote.self, Unencodable.self])
        XCTAssertThrowsError(try both.enqueue(Unencodable())) {
            guard case .cannotEncode(requestType: "Unencodable", _) = $0 as? OutboxError else { return XCTFail("\($0)") }
        }
        XCTAssertEqual(both.pendingCount, 0)
        outbox.close()
        XCTAssertThrowsError(try outbox.enqueue(PostNote(path: "x", text: "y"))) { XCTAssertEqual($0 as? OutboxError, .closed) }
    }

    func testAnExpiredEntryIsDroppedUnsent() throws {
        let (path, received) = recordingPath()
        let outbox = try open(makeOutboxFolder(self))
        let changes = ChangeRecorder(outbox)
        let dropped = changes.expectation("expired") { $0.kind == .dropped(.expired) }
        try outbox.enqueue(PostNote(path: path, text: "late"), expiresAt: Date(timeIntervalSinceNow: -1))
        wait(for: [dropped], timeout: 20)
        XCTAssertEqual(received.keys, [])
        XCTAssertEqual(outbox.pendingCount, 0)
    }

    func testWithoutConnectivityOneEntryProbesUntilRetryNow() throws {
        let (path, received) = recordingPath()
        OutboxTarget.base = try closedPortURL()
        let outbox = try open(makeOutboxFolder(self))
        let changes = ChangeRecorder(outbox)
        let waiting = changes.expectation("offline") { $0.kind == .waitingForConnectivity }
        let probes = changes.expectation("three probes") { $0.kind.isWillRetry && $0.entry.attempts >= 3 }
        let entries = try (0..<5).map { try outbox.enqueue(PostNote(path: path, text: "o\($0)")) }
        wait(for: [waiting, probes], timeout: 20)
        let retried = Set(changes.all.filter(\.kind.isWillRetry).map(\.entry.id))
        // Up to maximumConcurrentEntries attempts were in flight when the first failure arrived; after it, one probe.
        XCTAssertLessThanOrEqual(retried.count, 4)
        let probeCount = changes.all.filter { $0.kind.isWillRetry && $0.entry.attempts >= 2 }.map(\.entry.id)
        XCTAssertEqual(Set(probeCount).count, 1, "one entry probes")

        let done = changes.expectation("all sent") { $0.pendingCount == 0 && $0.kind.isSent }
        OutboxTarget.reset()
        outbox.retryNow()
        wait(for: [done], timeout: 20)
        XCTAssertEqual(Set(received.keys), Set(entries.map { "\"\($0.idempotencyKey)\"" }))
    }

    func testOperationForAnEntryFinishesWhenItIsSettled() throws {
        let (path, received) = recordingPath([503])
        let outbox = try open(makeOutboxFolder(self))
        let entry = try outbox.enqueue(PostNote(path: path, text: "ui"))
        let settled = try XCTUnwrap(outbox.operation(for: entry.id))
        let ran = expectation(description: "UI step")
        let ui = BlockOperation {
            XCTAssertEqual(received.keys.count, 2, "the UI step ran after the retry was answered")
            ran.fulfill()
        }
        ui.addDependency(settled)
        OperationQueue.main.addOperation(ui)
        wait(for: [ran], timeout: 20)
    }

    func testASettledOperationFinishesOnceForEachParkingOfARetriedEntry() throws {
        let (path, _) = recordingPath([400, 400])
        let outbox = try open(makeOutboxFolder(self), suspended: true)
        let changes = ChangeRecorder(outbox)
        let entry = try outbox.enqueue(PostNote(path: path, text: "twice"))
        let first = try XCTUnwrap(outbox.operation(for: entry.id))
        let firstDone = expectation(description: "first settled")
        let afterFirst = BlockOperation { firstDone.fulfill() }
        afterFirst.addDependency(first)
        OperationQueue().addOperation(afterFirst)
        outbox.isSuspended = false
        wait(for: [firstDone], timeout: 20)

        let parkedTwice = changes.expectation("parked twice", count: 2) { $0.kind == .parked }
        try outbox.retry(entry.id)
        let second = try XCTUnwrap(outbox.operation(for: entry.id), "a retried entry is pending again")
        XCTAssertFalse(second === first, "the first one has finished")
        let secondDone = expectation(description: "second settled")
        let afterSecond = BlockOperation { secondDone.fulfill() }
        afterSecond.addDependency(second)
        OperationQueue().addOperation(afterSecond)
        wait(for: [parkedTwice, secondDone], timeout: 20)
    }

    func testEveryAttemptIsAnOperationOfTheQueueThatMonitorsSee() throws {
        let (path, _) = recordingPath([500])
        let queue = OperationQueue()
        let monitor = CountingMonitor()
        queue.requestPolicies.monitors.append(monitor)
        let outbox = try open(makeOutboxFolder(self), queue: queue)
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        try outbox.enqueue(PostNote(path: path, text: "seen"))
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(monitor.sends, 2)
    }
}

/// Dropping and suspending while attempts are in flight.
final class OutboxControlTests: XCTestCase {
    private var server: LoopbackServer { TestServer.shared }

    func testDroppingAnEntryInFlightCancelsItsAttemptAndRemovesIt() throws {
        let path = "/outbox/hold-\(UUID().uuidString)"
        let arrived = expectation(description: "request arrived")
        let release = DispatchSemaphore(value: 0)
        server.route(path) { _ in
            arrived.fulfill()
            _ = release.wait(timeout: .now() + 20)
            return LoopbackResponse(status: 201)
        }
        defer { release.signal() }
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self],
            options: testOutboxOptions)
        let changes = ChangeRecorder(outbox)
        let dropped = changes.expectation("dropped") { $0.kind == .dropped(.byApp) }
        let entry = try outbox.enqueue(PostNote(path: String(path.dropFirst()), text: "held"))
        wait(for: [arrived], timeout: 20)
        try outbox.drop(entry.id)
        wait(for: [dropped], timeout: 20)
        XCTAssertEqual(outbox.pendingCount, 0)
        XCTAssertFalse(changes.all.contains { $0.kind.isSent || $0.kind == .parked })
    }

    func testASuspendedOutboxStoresButDoesNotSendUntilResumed() throws {
        let path = "/outbox/suspended-\(UUID().uuidString)"
        server.route(path) { _ in LoopbackResponse(status: 201) }
        var options = testOutboxOptions
        options.startsSuspended = true
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self],
            options: options)
        let changes = ChangeRecorder(outbox)
        try outbox.enqueue(PostNote(path: String(path.dropFirst()), text: "later"))
        XCTAssertEqual(outbox.pendingCount, 1)
        XCTAssertEqual(outbox.pendingEntries.first?.attempts, 0)
        XCTAssertTrue(outbox.isSuspended)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        outbox.isSuspended = false
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }
}
