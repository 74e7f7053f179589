#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Records the tasks created, in order with the sends and receptions, and the summaries.
private final class TaskLog: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var storedEvents: [String] = []
    private var storedTasks: [(attempt: RequestAttempt, task: URLSessionTask)] = []
    private var storedSummaries: [RequestSummary] = []

    var events: [String] { lock.withLock { storedEvents } }
    var tasks: [(attempt: RequestAttempt, task: URLSessionTask)] { lock.withLock { storedTasks } }
    var summary: RequestSummary? { lock.withLock { storedSummaries.last } }

    func requestWillSend(_ attempt: RequestAttempt) {
        lock.withLock { storedEvents.append("willSend \(attempt.number)") }
    }
    func requestDidCreateTask(_ attempt: RequestAttempt, task: URLSessionTask) {
        lock.withLock {
            storedEvents.append("didCreateTask \(attempt.number) \(task.state == .suspended ? "suspended" : "running")")
            storedTasks.append((attempt, task))
        }
    }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        lock.withLock { storedEvents.append("didReceive \(attempt.number)") }
    }
    func requestDidFinish(_ summary: RequestSummary) {
        lock.withLock { storedSummaries.append(summary) }
    }
}

final class TransferMetricsTests: XCTestCase {
    private let server = TestServer.shared

    private static func post(_ body: Data) -> RequestAdapter {
        RequestAdapter { request, completion in
            var request = request
            request.httpMethod = "POST"
            request.httpBody = body
            completion(.success(request))
        }
    }

    func testTheTaskIsHandedToMonitorsBeforeItIsResumedOncePerAttempt() throws {
        try XCTSkipIf(isOnCurl(testSession), "a transfer on libcurl has no URLSessionTask to hand over")
        // Given a 503 asking to retry at once, then a 200
        let path = "/metrics/\(UUID().uuidString)"
        server.script(path, [LoopbackResponse(status: 503, headers: ["Retry-After": "0"]), .text("ok")])
        let log = TaskLog()
        // When the request runs
        let result = runOnce(
            PolicyRequest(url: server.url(path)),
            policies: RequestPolicies(
                retryPolicy: RetryPolicy(baseDelay: 0.01, jitter: 0), monitors: [log]
            ))
        XCTAssertNotNil(result?.success)
        // Then each attempt's task came after its send and before its response, not yet resumed, with its request
        XCTAssertEqual(
            log.events,
            [
                "willSend 1", "didCreateTask 1 suspended", "didReceive 1",
                "willSend 2", "didCreateTask 2 suspended", "didReceive 2",
            ])
        let tasks = log.tasks
        XCTAssertEqual(tasks.map { $0.task.originalRequest?.url }, [server.url(path), server.url(path)])
        XCTAssertNotEqual(tasks[0].task.taskIdentifier, tasks[1].task.taskIdentifier)
    }

    func testBytesEachWayTimeToFirstByteAndRedirects() throws {
        // Given a POST of 10,000 bytes through two redirects (a 307 keeps the method and the body) to an echo
        let log = TaskLog()
        let body = Data(repeating: 0x61, count: 10_000)
        let url = server.url("/hostile/redirect?status=307&to=%2Fhostile%2Fredirect%3Fstatus%3D307%26to%3D%252Fecho")
        let result = runOnce(PolicyRequest(url: url, requestAdapters: [Self.post(body)]), policies: RequestPolicies(monitors: [log]))
        let echoed = try XCTUnwrap(result?.success)
        // Then the summary has what moved, for the last attempt
        let summary = try XCTUnwrap(log.summary)
        let metrics = try XCTUnwrap(summary.metrics)
        XCTAssertEqual(metrics.bytesReceived, Int64(echoed.count))
        XCTAssertGreaterThanOrEqual(metrics.bytesSent, 10_000)
        XCTAssertEqual(metrics.redirectCount, 2)
        let firstByte = try XCTUnwrap(metrics.timeToFirstByte)
        XCTAssertGreaterThan(firstByte, 0)
        XCTAssertLessThanOrEqual(firstByte, summary.duration)
        if isOnCurl(testSession) {
            XCTAssertNotNil(metrics.isReusedConnection, "libcurl reports it")
        } else {
            #if canImport(FoundationNetworking)
            XCTAssertNil(metrics.isReusedConnection, "nothing reports it on Linux")
            #endif
        }
    }

    func testAnAttemptThatOpensItsConnectionSaysHowAndOneThatReusesItDoesNot() throws {
        // Given a session of its own, so that its first request opens a connection and its second reuses it
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        func metrics() throws -> TransferMetrics {
            let log = TaskLog()
            let queue = OperationQueue()
            queue.requestPolicies = RequestPolicies(monitors: [log])
            queue.addRequest(PolicyRequest(url: server.url("/json")), session: session) { _ in }
            queue.waitUntilAllOperationsAreFinished()
            return try XCTUnwrap(log.summary?.metrics)
        }
        let (first, second) = (try metrics(), try metrics())
        if isOnCurl(session) {
            // Then libcurl's timings give the phases of the first (plain http: no TLS handshake), none of the second
            XCTAssertEqual(first.isReusedConnection, false)
            XCTAssertNotNil(first.domainLookupDuration)
            let connect = try XCTUnwrap(first.connectDuration)
            XCTAssertLessThanOrEqual(connect, try XCTUnwrap(first.timeToFirstByte))
            XCTAssertNil(first.secureConnectionDuration)
            XCTAssertEqual(second.isReusedConnection, true)
            XCTAssertNil(second.domainLookupDuration)
            XCTAssertNil(second.connectDuration)
        } else {
            #if canImport(FoundationNetworking)
            // (Foundation on Linux gathers no task metrics)
            XCTAssertNil(first.connectDuration)
            XCTAssertNil(second.connectDuration)
            #else
            XCTAssertNotNil(first.connectDuration)
            XCTAssertNil(second.connectDuration)
            #endif
        }
    }

    func testTimeToFirstByteCoversTheServersWaitAndADownloadCountsItsFile() throws {
        // Given a response whose headers come after 200 ms
        let log = TaskLog()
        _ = try XCTUnwrap(runOnce(PolicyRequest(url: server.url("/delay/200")), policies: RequestPolicies(monitors: [log]))?.success)
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(log.summary?.metrics?.timeToFirstByte), 0.2)
        XCTAssertEqual(log.summary?.metrics?.bytesSent, 0)

        // And a download of 300,000 bytes
        let queue = OperationQueue()
        let downloads = TaskLog()
        queue.requestPolicies = RequestPolicies(monitors: [downloads])
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: destination) }
        queue.addRequest(Download(url: server.url("/bytes/300000"), destination: destination), session: testSession) { _ in }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(downloads.summary?.metrics?.bytesReceived, 300_000)
    }

    func testNothingSentMeansNoMetrics() {
        // A failure before sending
        let log = TaskLog()
        let failing = RequestAdapter { _, completion in completion(.failure(TestError(name: "adapter"))) }
        _ = runOnce(PolicyRequest(url: server.url("/json"), requestAdapters: [failing]), policies: RequestPolicies(monitors: [log]))
        XCTAssertNotNil(log.summary)
        XCTAssertNil(log.summary?.metrics)
        XCTAssertEqual(log.events, [])
    }

    func testABodyCutByALimitCountsWhatArrived() throws {
        // Given a limit of 100,000 bytes and an endless body sent without a length
        let log = TaskLog()
        let result = runOnce(
            PolicyRequest(url: server.url("/hostile/endless?chunk=50000&interval=5")),
            policies: RequestPolicies(monitors: [log], limits: TransferLimits(maximumBodySize: 100_000))
        )
        XCTAssertNotNil(result?.failure as? TransferLimitError)
        let received = try XCTUnwrap(log.summary?.metrics?.bytesReceived)
        XCTAssertGreaterThan(received, 100_000)
        XCTAssertLessThan(received, 10_000_000)
    }
}
