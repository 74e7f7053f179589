#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Records, for every request, its events as (identifier, kind), and the measured durations.
final class TimelineMonitor: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var storedEvents: [(identifier: String, kind: String)] = []
    private var storedDurations: [String: [TimeInterval]] = [:]

    var events: [(identifier: String, kind: String)] { lock.lock(); defer { lock.unlock() }; return storedEvents }
    var durations: [String: [TimeInterval]] { lock.lock(); defer { lock.unlock() }; return storedDurations }

    private func record(_ identifier: String, _ kind: String, duration: TimeInterval? = nil) {
        lock.lock()
        storedEvents.append((identifier, kind))
        if let duration { storedDurations[kind, default: []].append(duration) }
        lock.unlock()
    }

    func requestWillSend(_ attempt: RequestAttempt) { record(attempt.identifier, "willSend") }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        record(attempt.identifier, "didReceive", duration: duration)
    }
    func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval) {
        record(attempt.identifier, "didFail", duration: duration)
    }
    func requestDidRetry(_ attempt: RequestAttempt, delay: TimeInterval) { record(attempt.identifier, "didRetry") }
    func requestDidFinish(_ summary: RequestSummary) { record(summary.identifier, "didFinish", duration: summary.duration) }
}

final class MonitorTests: XCTestCase {
    private let server = TestServer.shared

    private func run(_ request: PolicyRequest, monitors: [any RequestEventMonitor], adapters: [RequestAdapter] = []) -> Result<Data, Error>? {
        runOnce(
            request,
            policies: RequestPolicies(
                adapters: adapters,
                retryPolicy: RetryPolicy(baseDelay: 0.01, jitter: 0),
                monitors: monitors
            ))
    }

    func testEveryAttemptIsVisibleInOrderToEveryMonitor() {
        // Given a 503 asking to retry at once, then a 200
        let path = "/monitor/\(UUID().uuidString)"
        server.script(path, [LoopbackResponse(status: 503, headers: ["Retry-After": "0"], body: Data("busy".utf8)), .text("ok")])
        let (first, second) = (EventLog(), EventLog())
        // When the request runs with two monitors
        let result = run(PolicyRequest(url: server.url(path)), monitors: [first, second])
        // Then both saw each attempt, the retry with its delay, and the finish last
        XCTAssertNotNil(result?.success)
        let expected = [
            "willSend 1", "didReceive 1 503 4", "didFail 1", "didRetry 1 0.0",
            "willSend 2", "didReceive 2 200 2", "didFinish 2 success",
        ]
        XCTAssertEqual(first.events, expected)
        XCTAssertEqual(second.events, expected)
        XCTAssertEqual(server.requestCount(path: path), 2)
        XCTAssertEqual(first.summaries.first?.response?.statusCode, 200)
        XCTAssertEqual(first.summaries.first?.bodyBytes, 2)
    }

    func testDurationsAreMeasuredByTheLibrary() throws {
        // Given a response that takes 200 ms
        let timeline = TimelineMonitor()
        let result = run(PolicyRequest(url: server.url("/delay/200")), monitors: [timeline])
        XCTAssertNotNil(result?.success)
        // Then the attempt's duration covers the server's delay, and the request's covers the attempt's
        let attempt = try XCTUnwrap(timeline.durations["didReceive"]?.first)
        let whole = try XCTUnwrap(timeline.durations["didFinish"]?.first)
        XCTAssertGreaterThanOrEqual(attempt, 0.2)
        XCTAssertGreaterThanOrEqual(whole, attempt)
    }

    func testAFailureBeforeSendingIsReportedOnlyAsTheFinish() {
        let log = EventLog()
        let failing = RequestAdapter { _, completion in completion(.failure(TestError(name: "adapter"))) }
        _ = run(PolicyRequest(url: server.url("/json")), monitors: [log], adapters: [failing])
        XCTAssertEqual(log.events, ["didFinish 0 failure"])
        XCTAssertNil(log.summaries.first?.urlRequest)
        XCTAssertEqual(log.summaries.first?.error as? TestError, TestError(name: "adapter"))
    }

    func testATransportErrorIsAFailedAttempt() throws {
        let stopped = try LoopbackServer()
        let url = stopped.url("/json")
        stopped.stop()
        let log = EventLog()
        let result = run(PolicyRequest(url: url, ownRetryPolicy: RetryPolicy(maxAttempts: 1)), monitors: [log])
        XCTAssertEqual((result?.failure as? URLError)?.code, .cannotConnectToHost)
        XCTAssertEqual(log.events, ["willSend 1", "didFail 1", "didFinish 1 failure"])
    }

    func testACancelledRequestFinishesOnceAndLast() {
        let log = EventLog()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [log])
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(PolicyRequest(url: server.url("/fault/never-respond")), session: testSession) { results.append($0) }
        waitUntil("the attempt is sent") { log.events.contains("willSend 1") }
        operation.cancel()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        XCTAssertEqual(log.events, ["willSend 1", "didFinish 1 failure"])
    }

    func testTheFinishComesBeforeTheCompletionWhenACancellationOvertakesASlowMonitor() {
        // Given a monitor that is slow in requestWillSend
        final class Slow: RequestEventMonitor {
            let order: Recorder<String>
            init(order: Recorder<String>) { self.order = order }
            func requestWillSend(_ attempt: RequestAttempt) {
                order.append("willSend")
                Thread.sleep(forTimeInterval: 0.3)
            }
            func requestDidFinish(_ summary: RequestSummary) { order.append("didFinish") }
        }
        let order = Recorder<String>()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [Slow(order: order)])
        let operation = queue.addRequest(PolicyRequest(url: server.url("/fault/never-respond")), session: testSession) { _ in
            order.append("completion")
        }
        // When the request is cancelled while the monitor is busy
        waitUntil("the monitor is called") { order.count == 1 }
        operation.cancel()
        queue.waitUntilAllOperationsAreFinished()
        // Then the finish still came before the completion
        XCTAssertEqual(order.values, ["willSend", "didFinish", "completion"])
    }

    func testAChainedRequestThatIsNeverBuiltStillFinishesForMonitors() {
        let log = EventLog()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [log])
        let first = queue.addRequest(PolicyRequest(url: server.url("/status/500")), session: testSession)
        let second = queue.addRequest(after: first, session: testSession) { _ in PolicyRequest(url: self.server.url("/json")) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(second.result?.failure)
        XCTAssertEqual(log.events, ["willSend 1", "didReceive 1 500 46", "didFail 1", "didFinish 1 failure", "didFinish 0 failure"])
        XCTAssertEqual(log.summaries.last?.identifier, "PolicyRequest")
    }

    func testFinishIsReportedOnceAndLastUnderRandomCancellation() {
        // Given 300 requests with random server delays, two thirds of them cancelled at random moments
        let timeline = TimelineMonitor()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 16
        queue.requestPolicies = RequestPolicies(
            retryPolicy: RetryPolicy(baseDelay: 0.001, jitter: 0),
            monitors: [timeline]
        )
        let path = TestServer.freshPath()
        let results = Recorder<Result<Data, Error>>()
        var operations: [RequestOperation<Data, Error>] = []
        var generator = SystemRandomNumberGenerator()
        for index in 0..<300 {
            let url = server.url("\(path)?i=\(index)&delay=\(Int.random(in: 0...20, using: &generator))")
            operations.append(queue.addRequest(PolicyRequest(url: url), session: testSession) { results.append($0) })
        }
        let cancelled = operations.filter { _ in Int.random(in: 0..<3, using: &generator) > 0 }
        DispatchQueue.concurrentPerform(iterations: 4) { lane in
            for (position, operation) in cancelled.enumerated() where position % 4 == lane {
                usleep(UInt32.random(in: 0...2000))
                operation.cancel()
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        // Then every request completed once, and its monitor events end with exactly one finish
        XCTAssertEqual(results.count, 300)
        let byRequest = Dictionary(grouping: timeline.events, by: \.identifier)
        XCTAssertEqual(byRequest.count, 300)
        for (identifier, events) in byRequest {
            XCTAssertEqual(events.filter { $0.kind == "didFinish" }.count, 1, identifier)
            XCTAssertEqual(events.last?.kind, "didFinish", identifier)
        }
        let cancelledAfterSending = byRequest.values.filter { events in
            events.map(\.kind) == ["willSend", "didFinish"]
        }.count
        print("monitor stress: \(cancelled.count) cancelled, \(cancelledAfterSending) of them after sending")
    }
}

final class LoggerTests: XCTestCase {
    private let server = TestServer.shared

    func testOneRedactedLinePerRequest() throws {
        // Given a route that sets a cookie, and a request carrying credentials in headers and in the query
        let (path, _) = recordedRoute { _ in LoopbackResponse(headers: ["Set-Cookie": "session=SECRET-3"], body: Data("ok".utf8)) }
        let lines = Recorder<String>()
        let logger = RequestLogger(redaction: Redaction(queryItems: ["API_KEY"]), includesHeaders: true) { lines.append($0) }
        let credentials = RequestAdapter.map { request in
            var request = request
            request.setValue("Bearer SECRET-1", forHTTPHeaderField: "Authorization")
            request.setValue("c=SECRET-2", forHTTPHeaderField: "Cookie")
            return request
        }
        // When it runs
        let url = server.url("\(path)?api_key=SECRET-0&q=1")
        _ = runOnce(PolicyRequest(url: url), policies: RequestPolicies(adapters: [credentials], monitors: [logger]))
        // Then one line gives method, URL, status, duration and bytes, and no secret
        let line = try XCTUnwrap(lines.values.first)
        XCTAssertEqual(lines.count, 1)
        XCTAssertTrue(line.hasPrefix("[Requests] GET \(server.baseURL.absoluteString)\(path)?api_key=<redacted>&q=1 200 "), line)
        XCTAssertTrue(line.contains(" ms 2 bytes"), line)
        XCTAssertTrue(line.contains("Authorization: <redacted>"), line)
        XCTAssertTrue(line.contains("Cookie: <redacted>"), line)
        XCTAssertTrue(line.contains("Set-Cookie: <redacted>"), line)
        XCTAssertFalse(line.contains("SECRET"), line)
    }

    func testAMappedFailureIsLoggedAsTheLibrarysError() throws {
        struct Wrapped: Error { let underlying: Error }
        struct Mapped: DataRequest {
            typealias Success = Data
            typealias Failure = Wrapped
            let url: URL
            var identifier: String { "mapped" }
            func mapError(_ error: Error) -> Wrapped { Wrapped(underlying: error) }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
            func processData(_ data: Data) throws -> Data { data }
        }
        let stopped = try LoopbackServer()
        let url = stopped.url("/json?token=SECRET")
        stopped.stop()
        let lines = Recorder<String>()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [RequestLogger(redaction: Redaction(queryItems: ["token"])) { lines.append($0) }])
        let operation = queue.addRequest(Mapped(url: url), session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(operation.result?.failure)
        XCTAssertTrue(lines.values.first?.hasSuffix("failed: URLError -1004") ?? false, lines.values.first ?? "")
        XCTAssertFalse(lines.values.first?.contains("SECRET") ?? true)
    }

    func testFailuresAreLoggedWithoutTheURLAgain() throws {
        let stopped = try LoopbackServer()
        let url = stopped.url("/json?token=SECRET")
        stopped.stop()
        let lines = Recorder<String>()
        let logger = RequestLogger(redaction: Redaction(queryItems: ["token"])) { lines.append($0) }
        _ = runOnce(PolicyRequest(url: url), policies: RequestPolicies(monitors: [logger]))
        let notFound = runOnce(PolicyRequest(url: server.url("/status/404")), policies: RequestPolicies(monitors: [logger]))
        XCTAssertNotNil(notFound?.failure)
        XCTAssertEqual(lines.count, 2)
        XCTAssertTrue(lines.values[0].contains("token=<redacted> - "), lines.values[0])
        XCTAssertTrue(lines.values[0].hasSuffix("failed: URLError -1004"), lines.values[0])
        XCTAssertFalse(lines.values[0].contains("SECRET"))
        XCTAssertTrue(lines.values[1].contains("/status/404 404 "), lines.values[1])
        XCTAssertTrue(lines.values[1].contains("failed: Invalid HTTP status code 404"), lines.values[1])
    }

    func testRedactionOfURLsAndHeaders() throws {
        let redaction = Redaction(queryItems: ["key", "sig"])
        let url = try XCTUnwrap(URL(string: "https://ada:hunter2@example.com/a%20b?Key=1&x=2&sig&SIG=3#frag"))
        XCTAssertEqual(redaction.string(for: url), "https://ada:<redacted>@example.com/a%20b?Key=<redacted>&x=2&sig&SIG=<redacted>#frag")
        XCTAssertEqual(redaction.value("Bearer x", ofHeader: "authorization"), "<redacted>")
        XCTAssertEqual(redaction.value("text/plain", ofHeader: "Accept"), "text/plain")
        XCTAssertEqual(Redaction.none.value("Bearer x", ofHeader: "Authorization"), "Bearer x")
        XCTAssertEqual(Redaction().lines(for: ["Proxy-Authorization": "p", "Accept": "a"]), ["Accept: a", "Proxy-Authorization: <redacted>"])
    }
}
