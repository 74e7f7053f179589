#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Records the reconnections and the notices monitors see.
private final class TrustLog: RequestEventMonitor, @unchecked Sendable {
    let delays = Recorder<TimeInterval>()
    let notices = Recorder<RequestNotice>()
    let sent = Recorder<String>()

    func requestWillSend(_ attempt: RequestAttempt) {
        sent.append(attempt.urlRequest.value(forHTTPHeaderField: "Last-Event-ID") ?? "-")
    }
    func requestWillAttemptAgain(_ attempt: RequestAttempt, reason: ReattemptReason, delay: TimeInterval) {
        if reason == .reconnect { delays.append(delay) }
    }
    func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice) {
        notices.append(notice)
    }
}

/// A server-sent event stream is input from the server: its `retry` cannot make the client reconnect without pause,
/// dropping the connection after each event cannot make it reconnect forever, and its `id` goes back as a header only
/// when it is safe as one.
final class ServerSentEventsTrustTests: XCTestCase {
    private let server = TestServer.shared

    private func path(_ name: String) -> String {
        "/sse-trust/\(name)/\(UUID().uuidString)"
    }

    /// Reads `request` as events on a fresh queue with `log` as its monitor, and waits for the outcome.
    private func run(
        _ request: StreamOf<ServerSentEventDecoder>, log: TrustLog, timeout: TimeInterval = 20,
        file: StaticString = #filePath, line: UInt = #line
    ) -> (events: [ServerSentEvent], outcome: Result<StreamSummary, Error>?) {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [log])
        let events = Recorder<ServerSentEvent>()
        let outcomes = Recorder<Result<StreamSummary, Error>>()
        let operation = queue.addRequest(request, session: testSession) { event in
            events.append(event)
        } completion: { result in
            outcomes.append(result.mapError { $0 })
        }
        waitUntil(timeout: timeout, "the stream's outcome", file: file, line: line) { operation.isFinished }
        operation.cancel()  // without the fix, a stream that never ends: stop it
        XCTAssertLessThanOrEqual(outcomes.count, 1, "completions", file: file, line: line)
        return (events.values, outcomes.values.first)
    }

    // MARK: - The floor under the server's retry

    func testAServerRetryBelowTheFloorIsRaisedToItAndMonitorsAreTold() throws {
        // Given a stream that asks for `retry: 0` and drops after its first event, then ends after a second
        let path = path("retry-0")
        server.stream(path) { request in
            request.headers["last-event-id"] == nil ? .events(["retry: 0", "id: 1\ndata: a"], ending: .close) : .events(["id: 2\ndata: b"])
        }
        // When it is read with a small floor the caller did not lower to 0 (and a long delay of its own, which the
        // server's retry replaces)
        let log = TrustLog()
        let policy = ReconnectPolicy(delay: 60, minimumServerDelay: 0.05)
        let (events, outcome) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: policy), log: log)
        // Then the reconnection waited the floor, not 0, and monitors were told the server's value was raised
        XCTAssertEqual(events.map(\.data), ["a", "b"])
        XCTAssertNotNil(outcome?.success, "\(String(describing: outcome))")
        XCTAssertEqual(log.delays.values, [0.05])
        XCTAssertEqual(log.notices.values, [.reconnectionDelayRaised(requested: 0, applied: 0.05)])
    }

    func testTheDefaultFloorIsOneSecondAndTheNoticeComesOncePerServerValue() throws {
        // Given a stream that asks for `retry: 0` on every connection and drops after each event, three times
        let path = path("retry-0-default")
        let connections = Recorder<Int>()
        server.stream(path) { _ in
            connections.append(1)
            return connections.count < 3 ? .events(["retry: 0", "data: x"], ending: .close) : .events(["data: last"])
        }
        // When it is read with the default policy
        let log = TrustLog()
        let (events, outcome) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: .default), log: log)
        // Then each reconnection waited 1 s, and the raise was told once, since the server's value did not change
        XCTAssertEqual(events.map(\.data), ["x", "x", "last"])
        XCTAssertNotNil(outcome?.success, "\(String(describing: outcome))")
        XCTAssertEqual(ReconnectPolicy.default.minimumServerDelay, 1)
        XCTAssertEqual(log.delays.values, [1, 1])
        XCTAssertEqual(log.notices.values, [.reconnectionDelayRaised(requested: 0, applied: 1)])
    }

    func testACallerWhoLowersTheFloorGetsTheServersRetry() throws {
        // Given a stream that asks for `retry: 0` and drops once
        let path = path("retry-0-trusted")
        server.stream(path) { request in
            request.headers["last-event-id"] == nil ? .events(["retry: 0", "id: 1\ndata: a"], ending: .close) : .events(["id: 2\ndata: b"])
        }
        // When the caller trusts the server and lowers the floor to 0
        let log = TrustLog()
        var policy = ReconnectPolicy.default
        policy.minimumServerDelay = 0
        let (events, _) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: policy), log: log)
        // Then the server's 0 applies, and nothing was raised
        XCTAssertEqual(events.map(\.data), ["a", "b"])
        XCTAssertEqual(log.delays.values, [0])
        XCTAssertEqual(log.notices.values, [])
    }

    // MARK: - The cap on reconnections in a window

    func testAServerThatDropsAfterEveryEventEndsTheStreamAfterTheCap() throws {
        // Given a stream that sends one event per connection and then drops it, forever
        let path = path("drop-after-each-event")
        let connections = Recorder<Int>()
        server.stream(path) { _ in
            connections.append(1)
            return .events(["retry: 0", "id: \(connections.count)\ndata: \(connections.count)"], ending: .close)
        }
        // When it is read with at most 3 reconnections in a window longer than the test (and a tiny floor)
        let log = TrustLog()
        let policy = ReconnectPolicy(minimumServerDelay: 0.001, maxReconnections: 3, reconnectionWindow: .infinity)
        let (events, outcome) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: policy), log: log)
        // Then it ends with the typed error after exactly 3 reconnections: 4 connections, 4 events
        XCTAssertEqual(outcome?.failure as? StreamError, .tooManyReconnections(limit: 3, window: .infinity))
        XCTAssertEqual(events.count, 4)
        XCTAssertEqual(events.prefix(4).map(\.data), ["1", "2", "3", "4"])
        XCTAssertEqual(server.requestCount(path: path), 4)
        XCTAssertEqual(log.delays.count, 3)
        XCTAssertTrue(log.delays.values.allSatisfy { $0 >= 0.001 }, "\(log.delays.values)")
    }

    func testAServerThatClosesAfterEveryEventIsCappedToo() throws {
        // Given a stream that ends normally after each event, read by a policy that reconnects after a normal end
        let path = path("close-after-each-event")
        server.stream(path) { _ in .events(["data: x"]) }
        let log = TrustLog()
        let policy = ReconnectPolicy(delay: 0, reconnectsWhenServerCloses: true, maxReconnections: 2, reconnectionWindow: 1e9)
        // When it is read
        let (events, outcome) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: policy), log: log)
        // Then it ends with the typed error after 2 reconnections
        XCTAssertEqual(outcome?.failure as? StreamError, .tooManyReconnections(limit: 2, window: 1e9))
        XCTAssertEqual(events.count, 3)
        XCTAssertEqual(server.requestCount(path: path), 3)
    }

    // MARK: - Last-Event-ID

    func testOnlyASafeLastEventIDIsSentBack() throws {
        // Given a stream whose connections each send one event with another id, then drop; the last one ends
        let path = path("last-event-id")
        let ids = [
            "one",  // sent
            "bad\u{01}id",  // a control character: not sent
            String(repeating: "é", count: 513),  // 1,026 bytes of UTF-8 in 513 characters: not sent
            String(repeating: "b", count: 1024),  // exactly 1 KiB: sent
            "tab\there",  // a tab is a C0 control too: not sent
            String(repeating: "z", count: 900_000),  // 900 kB: not sent
            "\u{7F}",  // DEL: not sent
        ]
        let received = Recorder<String>()
        server.stream(path) { request in
            received.append(request.headers["last-event-id"] ?? "-")
            let index = received.count - 1
            guard index < ids.count else { return .events(["data: end"]) }
            return .events(["id: \(ids[index])\ndata: \(index)"], ending: .close)
        }
        // When it is read, reconnecting at once
        let log = TrustLog()
        let request = StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: ReconnectPolicy(delay: 0))
        let (events, outcome) = run(request, log: log)
        // Then every event arrived, with its id as the server sent it
        XCTAssertNotNil(outcome?.success, "\(String(describing: outcome))")
        XCTAssertEqual(events.map(\.data), (0..<ids.count).map(String.init) + ["end"])
        let short = { (id: String) in id.count > 40 ? "\(id.prefix(1))×\(id.count)" : id }  // readable failures
        XCTAssertEqual(events.map { short($0.id ?? "-") }, (ids + [ids[ids.count - 1]]).map(short))
        // And the server got Last-Event-ID only after a safe id; a refused one left no header, not the one before it
        let expected = ["-", "one", "-", "-", String(repeating: "b", count: 1024), "-", "-", "-"]
        XCTAssertEqual(received.values.map(short), expected.map(short))
        XCTAssertEqual(log.sent.values.map(short), expected.map(short))
        // And monitors were told of each id left out, with its length in bytes
        XCTAssertEqual(log.notices.values, [6, 1026, 8, 900_000, 1].map { .lastEventIDDropped(length: $0) })
    }

    func testAnUnsafeStartingLastEventIDIsNotSent() throws {
        // Given a stream, and a decoder told to start from an id with a line break
        let path = path("starting-id")
        let received = Recorder<String>()
        server.stream(path) { request in
            received.append(request.headers["last-event-id"] ?? "-")
            return .events(["data: a"])
        }
        // When it is read
        let log = TrustLog()
        let (events, outcome) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder(lastEventID: "7\r\nX-Injected: 1") }), log: log)
        // Then the request went without Last-Event-ID (rather than failing or smuggling a header), and monitors were told
        XCTAssertNotNil(outcome?.success, "\(String(describing: outcome))")
        XCTAssertEqual(events.map(\.data), ["a"])
        XCTAssertEqual(received.values, ["-"])
        XCTAssertEqual(log.notices.values, [.lastEventIDDropped(length: 16)])
    }

    func testTheLastEventIDRule() {
        XCTAssertTrue(ServerSentEventDecoder.isSendableLastEventID("abc-123"))
        XCTAssertTrue(ServerSentEventDecoder.isSendableLastEventID("é€😀"))
        XCTAssertTrue(ServerSentEventDecoder.isSendableLastEventID(String(repeating: "a", count: 1024)))
        XCTAssertFalse(ServerSentEventDecoder.isSendableLastEventID(String(repeating: "a", count: 1025)))
        for control in [0x00, 0x01, 0x09, 0x0A, 0x0D, 0x1F, 0x7F] {
            XCTAssertFalse(ServerSentEventDecoder.isSendableLastEventID("a\(Character(Unicode.Scalar(UInt8(control))))b"), "\(control)")
        }
    }
}
