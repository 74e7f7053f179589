#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// A note POSTed to `path` on the shared server whose first `stalls` attempts never finish preparing: their adapter
/// keeps its completion in `Stalls.shared` without calling it.
struct StallingNote: OutboxRequest, NoContentRequest {
    var path: String
    var text: String
    var stalls: Int
    var identifier: String { "stalling#" + text }

    /// The first `stalls` attempts never complete their preparation (an adapter, which runs for each attempt).
    var adapters: [RequestAdapter] {
        let (text, stalls) = (text, stalls)
        return [
            RequestAdapter { request, completion in
                guard Stalls.shared.arrive(text, stalls: stalls, completion: completion) else {
                    return completion(.success(request))
                }
            }
        ]
    }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: TestServer.shared.url("/" + path))
        request.httpMethod = "POST"
        request.httpBody = Data(text.utf8)
        completion(.success(request))
    }
}

/// The completions `StallingNote` kept, by text, so that a test can call them late.
final class Stalls: @unchecked Sendable {
    static let shared = Stalls()
    private let lock = NSLock()
    private var arrivals: [String: Int] = [:]
    private var held: [String: [@Sendable (Result<URLRequest, Error>) -> Void]] = [:]

    /// Counts an attempt of `text`; keeps its completion and returns `true` when it is one of the first `stalls`.
    func arrive(_ text: String, stalls: Int, completion: @escaping @Sendable (Result<URLRequest, Error>) -> Void) -> Bool {
        lock.withLock {
            arrivals[text, default: 0] += 1
            guard arrivals[text, default: 0] <= stalls else { return false }
            held[text, default: []].append(completion)
            return true
        }
    }

    func take(_ text: String) -> [@Sendable (Result<URLRequest, Error>) -> Void] {
        lock.withLock { held.removeValue(forKey: text) ?? [] }
    }
}

extension OutboxEntry {
    /// The entry's `Idempotency-Key` as sent: a structured-field string, quoted.
    var header: String { "\"\(idempotencyKey)\"" }
}

/// Numbers a route's requests, from 1.
final class ArrivalCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    func next() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
}

/// Fulfils an expectation when an attempt finishes cancelled.
final class CancelledAttemptMonitor: RequestEventMonitor, @unchecked Sendable {
    let cancelled = XCTestExpectation(description: "the attempt in flight was cancelled")

    func requestDidFinish(_ summary: RequestSummary) {
        if case .cancelled? = summary.error as? RequestQueueError { cancelled.fulfill() }
    }
}

/// Attempts that never end by themselves (a preparation that never completes, a server that never answers) and an
/// outbox the app releases without closing it.
final class OutboxStuckAttemptTests: XCTestCase {
    private var server: LoopbackServer { TestServer.shared }

    override func tearDown() {
        OutboxTarget.reset()
        super.tearDown()
    }

    /// A path whose requests are recorded; each answer is `answer(n)` for the n-th request (from 1).
    private func recordingPath(_ answer: @escaping @Sendable (Int) -> LoopbackResponse) -> (String, ReceivedNotes) {
        let path = "/outbox/\(UUID().uuidString)"
        let received = ReceivedNotes()
        let counter = ArrivalCounter()
        server.route(path) { request in
            received.add(request)
            return answer(counter.next())
        }
        return (String(path.dropFirst()), received)
    }

    private func options(attemptTimeout: TimeInterval, concurrent: Int = 4) -> OutboxOptions {
        var options = testOutboxOptions
        options.attemptTimeout = attemptTimeout
        options.maximumConcurrentEntries = concurrent
        options.startsSuspended = true
        return options
    }

    private static func isTimeout(_ change: OutboxChange) -> Bool {
        guard case let .willRetry(_, error) = change.kind else { return false }
        return error.contains("OutboxOptions.attemptTimeout")
    }

    /// With one slot, an entry whose preparation never completes would hold it, and its lane, forever: it times out,
    /// the other entry is sent, and its retry keeps its place in its lane and its key. Its stalled completion, called
    /// late, changes nothing.
    func testAPreparationThatNeverCompletesTimesOutAndIsSentAgainInItsPlace() throws {
        let (path, received) = recordingPath { _ in LoopbackResponse(status: 201) }
        OutboxTarget.base = server.url("/")
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession,
            requestTypes: [StallingNote.self, PostNote.self], options: options(attemptTimeout: 0.5, concurrent: 1))
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let stalled = "stalled-\(UUID().uuidString)"
        let first = try outbox.enqueue(StallingNote(path: path, text: stalled, stalls: 1), lane: "lane")
        let next = try outbox.enqueue(PostNote(path: path, text: "next in lane"), lane: "lane")
        let other = try outbox.enqueue(PostNote(path: path, text: "no lane"))
        let timedOut = changes.expectation("timed out") { $0.entry.id == first.id && Self.isTimeout($0) }
        let sent = [first, next, other].map { entry in changes.expectation("sent") { $0.kind.isSent && $0.entry.id == entry.id } }
        outbox.isSuspended = false
        wait(for: [timedOut] + sent, timeout: 30)

        let texts = received.texts
        XCTAssertEqual(Set(zip(received.keys, texts).filter { $0.1 == stalled }.map(\.0)), [first.header])
        let lastOfFirst = try XCTUnwrap(texts.lastIndex(of: stalled))
        let firstOfNext = try XCTUnwrap(texts.firstIndex(of: "next in lane"))
        XCTAssertLessThan(lastOfFirst, firstOfNext, "the lane waited for the timed-out entry's retry")

        // The stalled attempt answers now: it was cancelled, and must not conclude the entry a second time.
        let late = Stalls.shared.take(stalled)
        XCTAssertEqual(late.count, 1)
        let arrivals = texts.count
        late.forEach { $0(.success(URLRequest(url: server.url("/" + path)))) }
        outbox.callbacks.sync {}
        XCTAssertEqual(changes.all.filter { $0.entry.id == first.id && $0.kind.isSent }.count, 1)
        XCTAssertEqual(received.texts.count, arrivals)
        XCTAssertEqual(outbox.pendingCount, 0)
    }

    /// A server that never answers: the attempt times out during the transfer, its task is cancelled, and the entry is
    /// sent again with the same key.
    func testAnAttemptToAServerThatNeverAnswersTimesOutAndIsSentAgain() throws {
        let (path, received) = recordingPath { number in
            number == 1 ? LoopbackResponse(fault: .neverRespond) : LoopbackResponse(status: 201)
        }
        OutboxTarget.base = server.url("/")
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self],
            options: options(attemptTimeout: 1))
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let entry = try outbox.enqueue(PostNote(path: path, text: "unanswered"))
        let timedOut = changes.expectation("timed out") { Self.isTimeout($0) }
        let sent = changes.expectation("sent") { $0.kind.isSent }
        outbox.isSuspended = false
        wait(for: [timedOut, sent], timeout: 30)
        XCTAssertGreaterThanOrEqual(received.keys.count, 2)
        XCTAssertEqual(Set(received.keys), [entry.header])
    }

    /// An outcome for an attempt other than the entry's current one (a late or second report) concludes nothing: the
    /// entry stays running, and its own attempt concludes it once.
    func testAnOutcomeForAnotherAttemptIsIgnored() throws {
        let arrived = XCTestExpectation(description: "the attempt reached the server")
        let (path, _) = recordingPath { _ in
            arrived.fulfill()
            return LoopbackResponse(fault: .neverRespond)
        }
        OutboxTarget.base = server.url("/")
        let outbox = try Outbox(
            directory: makeOutboxFolder(self), queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self],
            options: options(attemptTimeout: 120))
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let entry = try outbox.enqueue(PostNote(path: path, text: "in flight"))
        outbox.isSuspended = false
        wait(for: [arrived], timeout: 20)
        let current = try XCTUnwrap(outbox.lock.withLock { outbox.lanes[entry.id]?.attempt?.number })
        let stale = OutboxResponse(statusCode: 201, headers: [:], body: Data())
        for number in [current - 1, current + 1] {
            outbox.conclude(entry.id, .verdict(.sent(stale)), attempt: number)
        }
        XCTAssertEqual(outbox.lock.withLock { outbox.running }, 1)
        XCTAssertEqual(outbox.pendingCount, 1)
        XCTAssertFalse(changes.all.contains { $0.kind.isSent })

        let dropped = changes.expectation("dropped") { $0.kind == .dropped(.byApp) }
        try outbox.drop(entry.id)
        wait(for: [dropped], timeout: 20)
        XCTAssertEqual(outbox.lock.withLock { outbox.running }, 0)
        XCTAssertEqual(changes.all.filter { $0.entry.id == entry.id && $0.kind != .enqueued }.count, 1)
    }

    /// An outbox the app releases without `close()` while an attempt waits for a server that never answers and a
    /// reader waits for changes: the attempt is cancelled, the reader's loop ends, the folder is free at once, and the
    /// next outbox sends the entry with its key.
    func testReleasingTheOutboxClosesItAndTheNextOneReplaysTheEntry() throws {
        let arrived = XCTestExpectation(description: "the first attempt reached the server")
        let (path, received) = recordingPath { number in
            if number == 1 { arrived.fulfill() }
            return number == 1 ? LoopbackResponse(fault: .neverRespond) : LoopbackResponse(status: 201)
        }
        OutboxTarget.base = server.url("/")
        let folder = makeOutboxFolder(self)
        let queue = OperationQueue()
        let monitor = CancelledAttemptMonitor()
        queue.requestPolicies.monitors = [monitor]
        var outbox: Outbox? = try Outbox(
            directory: folder, queue: queue, session: testSession, requestTypes: [PostNote.self], options: testOutboxOptions)
        // A reader of the changes, like an app's, does not keep the outbox either; its loop ends with it.
        let readerEnded = XCTestExpectation(description: "the reader's loop ended")
        let stream = try XCTUnwrap(outbox?.changes)
        let reader = Task {
            for await _ in stream {}
            readerEnded.fulfill()
        }
        let entry = try XCTUnwrap(outbox?.enqueue(PostNote(path: path, text: "released")))
        wait(for: [arrived], timeout: 20)
        let released = Weak(try XCTUnwrap(outbox))
        outbox = nil
        XCTAssertNil(released.object, "nothing but the app kept the outbox")
        wait(for: [monitor.cancelled, readerEnded], timeout: 20)
        reader.cancel()

        let next: Outbox
        do {
            next = try Outbox(
                directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self],
                options: options(attemptTimeout: 120))
        } catch {
            return XCTFail("the released outbox still holds the folder: \(error)")
        }
        defer { next.close() }
        XCTAssertEqual(next.openingReport.pending, 1)
        let changes = ChangeRecorder(next)
        let sent = changes.expectation("sent") { $0.kind.isSent && $0.entry.idempotencyKey == entry.idempotencyKey }
        next.isSuspended = false
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(received.keys, [entry.header, entry.header])
    }
}
