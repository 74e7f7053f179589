#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer
import XCTest

/// A note POSTed to `path` on the shared loopback server, or to `OutboxTarget.base` when set.
struct PostNote: OutboxRequest, NoContentRequest {
    var path: String
    var text: String
    var identifier: String { path + "#" + text }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var shouldEnforceNoContent: Bool { false }
    var adapters: [RequestAdapter] { [OutboxTarget.retargeting] }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: OutboxTarget.base.appendingPathComponent(path))
        request.httpMethod = "POST"
        request.httpBody = Data(text.utf8)
        completion(.success(request))
    }
}

/// A request whose encoding always fails.
struct Unencodable: OutboxRequest, NoContentRequest {
    var identifier: String { "unencodable" }
    init() {}
    init(from decoder: Decoder) throws {}
    func encode(to encoder: Encoder) throws {
        throw EncodingError.invalidValue(0, .init(codingPath: [], debugDescription: "refuses"))
    }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: OutboxTarget.base)))
    }
}

/// Where `PostNote` goes: the shared loopback server unless a test points it elsewhere (a closed port, to be
/// offline). Tests that change it run serially within their class.
enum OutboxTarget {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var override: URL?

    static var base: URL {
        get { lock.withLock { override ?? TestServer.shared.url("/") } }
        set { lock.withLock { override = newValue } }
    }

    static func reset() { lock.withLock { override = nil } }

    /// Sends an attempt to `base` as it is when the attempt runs: an entry's request is made once, at enqueue, so a
    /// test that goes offline and back moves the attempts with an adapter, which runs for each attempt.
    static let retargeting = RequestAdapter.map { request in
        guard let url = request.url, var components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let target = URLComponents(url: base, resolvingAgainstBaseURL: false)
        else { throw URLError(.badURL) }
        components.scheme = target.scheme
        components.host = target.host
        components.port = target.port
        var moved = request
        moved.url = components.url
        return moved
    }
}

/// What the server received on a path: each request's `Idempotency-Key` and body, in arrival order.
final class ReceivedNotes: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [(key: String, text: String)] = []

    func add(_ request: LoopbackRequest) {
        let key = request.headers.first { $0.key.lowercased() == "idempotency-key" }?.value ?? ""
        lock.withLock { items.append((key, String(decoding: request.body, as: UTF8.self))) }
    }

    var keys: [String] { lock.withLock { items.map(\.key) } }
    var texts: [String] { lock.withLock { items.map(\.text) } }
}

/// Records an outbox's changes and fulfils expectations when a change matching a predicate arrives.
final class ChangeRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var changes: [OutboxChange] = []
    private var waiters: [(predicate: @Sendable (OutboxChange) -> Bool, remaining: Int, expectation: XCTestExpectation)] = []
    private var task: Task<Void, Never>?

    init(_ outbox: Outbox) {
        let stream = outbox.changes
        task = Task { [weak self] in
            for await change in stream { self?.record(change) }
        }
    }

    deinit { task?.cancel() }

    var all: [OutboxChange] { lock.withLock { changes } }

    /// An expectation fulfilled once `count` changes (past or future) have matched `predicate`.
    func expectation(
        _ description: String, count: Int = 1, where predicate: @escaping @Sendable (OutboxChange) -> Bool
    ) -> XCTestExpectation {
        let expectation = XCTestExpectation(description: description)
        lock.withLock {
            let seen = changes.filter(predicate).count
            if seen >= count {
                expectation.fulfill()
            } else {
                waiters.append((predicate, count - seen, expectation))
            }
        }
        return expectation
    }

    private func record(_ change: OutboxChange) {
        var fulfilled: [XCTestExpectation] = []
        lock.withLock {
            changes.append(change)
            for index in waiters.indices where waiters[index].predicate(change) {
                waiters[index].remaining -= 1
                if waiters[index].remaining == 0 { fulfilled.append(waiters[index].expectation) }
            }
            waiters.removeAll { $0.remaining == 0 }
        }
        fulfilled.forEach { $0.fulfill() }
    }
}

extension OutboxChange.Kind {
    var isSent: Bool { if case .sent = self { return true } else { return false } }
    var isWillRetry: Bool { if case .willRetry = self { return true } else { return false } }
}

/// A new folder for an outbox, removed by `tearDown` through `addTeardownBlock`.
func makeOutboxFolder(_ test: XCTestCase) -> URL {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-\(UUID().uuidString)")
    test.addTeardownBlock { try? FileManager.default.removeItem(at: folder) }
    return folder
}

/// Fast retries for tests.
var testOutboxOptions: OutboxOptions {
    var options = OutboxOptions()
    options.baseDelay = 0.01
    options.maxDelay = 0.2
    return options
}

/// Answers with the statuses given, in turn, then 201.
final class ScriptedStatuses: @unchecked Sendable {
    private let lock = NSLock()
    private var remaining: [Int]

    init(_ statuses: [Int]) { remaining = statuses }

    func next() -> Int {
        lock.withLock { remaining.isEmpty ? 201 : remaining.removeFirst() }
    }
}

/// What a lane test's server saw: arrival order, requests in flight per prefix, and a rendezvous between lanes.
final class LaneTracker: @unchecked Sendable {
    private let condition = NSCondition()
    private var arrived: [String] = []
    private var inFlight: [String: Int] = [:]
    private var maximum: [String: Int] = [:]
    private(set) var sawB0BeforeA0Ended = false

    private func prefix(_ text: String) -> String { String(text.prefix(2)) }

    func begin(_ text: String) {
        condition.withLock {
            arrived.append(text)
            inFlight[prefix(text), default: 0] += 1
            maximum[prefix(text)] = max(maximum[prefix(text)] ?? 0, inFlight[prefix(text)] ?? 0)
            condition.broadcast()
        }
    }

    func end(_ text: String) {
        condition.withLock { inFlight[prefix(text), default: 0] -= 1 }
    }

    /// Waits (up to 20 s, so that a failure fails rather than hangs) until `text` has arrived.
    func waitFor(_ text: String) {
        condition.withLock {
            let limit = Date(timeIntervalSinceNow: 20)
            while !arrived.contains(text), condition.wait(until: limit) {}
            sawB0BeforeA0Ended = arrived.contains(text)
        }
    }

    func order(prefix wanted: String) -> [String] { condition.withLock { arrived.filter { $0.hasPrefix(wanted) } } }
    func maximumInFlight(prefix wanted: String) -> Int { condition.withLock { maximum[wanted] ?? 0 } }
}

/// A URL on a loopback port nothing listens on: a server started and stopped.
func closedPortURL() throws -> URL {
    let server = try LoopbackServer()
    let url = server.url("/")
    server.stop()
    return url
}

/// Counts attempts sent.
final class CountingMonitor: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var sends: Int { lock.withLock { count } }
    func requestWillSend(_ attempt: RequestAttempt) { lock.withLock { count += 1 } }
}
