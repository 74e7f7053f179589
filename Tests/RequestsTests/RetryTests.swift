#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// A request with a retry policy and a method.
private struct Retried: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    var method = "GET"
    var policy: RetryPolicy? = RetryPolicy(baseDelay: 0.01, jitter: 0)
    var identifier: String { url.absoluteString }
    var retryPolicy: RetryPolicy? { policy }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

final class RetryTests: XCTestCase {
    private let server = TestServer.shared

    private func freshScript(_ responses: [LoopbackResponse]) -> String {
        let path = "/retry/\(UUID().uuidString)"
        server.script(path, responses)
        return path
    }

    private func run(_ request: Retried) -> (Result<Data, Error>?, RequestOperation<Data, Error>) {
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion exactly once")
        return (results.values.first, operation)
    }

    func testRetryAfterDeltaSecondsThenSuccess() {
        // Given a 503 with Retry-After: 1, then a 200
        let path = freshScript([LoopbackResponse(status: 503, headers: ["Retry-After": "1"]), .text("ok")])
        // When the request runs with a retry policy, and a dependent waits for it
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(Retried(url: server.url(path)), session: testSession) { results.append($0) }
        let seen = Recorder<Bool>()
        let dependent = BlockOperation { seen.append(operation.result?.success != nil) }
        dependent.addDependency(operation)
        queue.addOperation(dependent)
        queue.waitUntilAllOperationsAreFinished()
        // Then it succeeded on the second attempt, once, and the dependent saw the final outcome
        XCTAssertEqual(server.requestCount(path: path), 2)
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(results.values.first?.success.map { String(decoding: $0, as: UTF8.self) }, "ok")
        XCTAssertEqual(seen.values, [true])
    }

    func testRetryAfterHTTPDate() {
        let path = "/retry/\(UUID().uuidString)"
        let attempts = Recorder<Bool>()
        server.route(path) { _ in
            attempts.append(true)
            guard attempts.count == 1 else { return .text("ok") }
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
            return LoopbackResponse(status: 503, headers: ["Retry-After": formatter.string(from: Date().addingTimeInterval(1))])
        }
        let (result, _) = run(Retried(url: server.url(path)))
        XCTAssertNotNil(result?.success)
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testAttemptLimit() {
        let path = freshScript([LoopbackResponse(status: 500)])
        let (result, _) = run(Retried(url: server.url(path), policy: RetryPolicy(maxAttempts: 4, baseDelay: 0.01, jitter: 0)))
        XCTAssertEqual((result?.failure as? RequestQueueError)?.statusCode, 500)
        XCTAssertEqual(server.requestCount(path: path), 4)
    }

    func testPostIsNotRetriedByDefault() {
        let path = freshScript([LoopbackResponse(status: 503)])
        let (result, _) = run(Retried(url: server.url(path), method: "POST"))
        XCTAssertEqual((result?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testNonRetryableStatusAndNoPolicy() {
        let notFound = freshScript([LoopbackResponse(status: 404), .text("ok")])
        _ = run(Retried(url: server.url(notFound)))
        XCTAssertEqual(server.requestCount(path: notFound), 1)
        let noPolicy = freshScript([LoopbackResponse(status: 503), .text("ok")])
        _ = run(Retried(url: server.url(noPolicy), policy: nil))
        XCTAssertEqual(server.requestCount(path: noPolicy), 1)
    }

    func testTransientURLErrorIsRetried() throws {
        // Given a port nobody listens on, and a request that counts its attempts
        let stopped = try LoopbackServer()
        let url = stopped.url("/json")
        stopped.stop()
        let attempts = Recorder<Bool>()
        struct Counting: DataRequest {
            typealias Success = Data
            typealias Failure = Error
            let url: URL
            let attempts: Recorder<Bool>
            var identifier: String { "counting" }
            var retryPolicy: RetryPolicy? { RetryPolicy(maxAttempts: 3, baseDelay: 0.01, jitter: 0) }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                attempts.append(true)
                completion(.success(URLRequest(url: url)))
            }
            func processData(_ data: Data) throws -> Data { data }
        }
        let queue = OperationQueue()
        let operation = queue.addRequest(Counting(url: url, attempts: attempts), session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        // Then connection refused was retried up to the limit, and the URLError is the outcome
        XCTAssertEqual(attempts.count, 3)
        XCTAssertEqual((operation.result?.failure as? URLError)?.code, .cannotConnectToHost)
    }

    func testCancellingDuringTheBackoffCompletesAtOnce() {
        // Given a 503 that asks for a 20 s wait
        let path = freshScript([LoopbackResponse(status: 503, headers: ["Retry-After": "20"]), .text("ok")])
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        weak var weakOperation: RequestOperation<Data, Error>?
        do {
            let operation = queue.addRequest(Retried(url: server.url(path)), session: testSession) { results.append($0) }
            weakOperation = operation
            waitUntil("the first attempt is answered") { self.server.requestCount(path: path) == 1 }
            usleep(100_000)
            // When it is cancelled during the backoff
            operation.cancel()
        }
        // Then it completes with cancellation well before the 20 s (the wait is 10 s), and is not sent again,
        // and the pending backoff does not keep the operation alive
        waitUntil("the completion") { results.count == 1 }
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        waitUntil("the operation is released") { weakOperation == nil }
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testRetryAfterBeyondTheCapStopsRetrying() {
        let path = freshScript([LoopbackResponse(status: 503, headers: ["Retry-After": "120"]), .text("ok")])
        let (result, _) = run(Retried(url: server.url(path)))
        XCTAssertEqual((result?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testABodyCutShortIsRetriedAsOnApplePlatforms() {
        // Given a route whose first answer is cut off half-way through its body (libcurl's −1 on Linux, −1005 on Apple)
        var cut = LoopbackResponse.text(String(repeating: "x", count: 10_000))
        cut.fault = .closeMidBody
        let path = freshScript([cut, .text("ok")])

        // When it is requested with the default retry policy's codes
        let (result, _) = run(Retried(url: server.url(path)))

        // Then the cut was a lost connection, which was retried
        XCTAssertEqual(result?.success, Data("ok".utf8), "\(String(describing: result))")
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testUnparsableRetryAfterFallsBackToTheBackoff() {
        let path = freshScript([LoopbackResponse(status: 503, headers: ["Retry-After": "soon"]), .text("ok")])
        let (result, _) = run(Retried(url: server.url(path)))
        XCTAssertNotNil(result?.success)
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testBackoffIsExponentialJitteredAndCapped() {
        let policy = RetryPolicy(maxAttempts: 10, baseDelay: 0.5, backoffMultiplier: 2, maxDelay: 5, jitter: 0.2)
        let error = URLError(.timedOut)
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "GET", error: error, response: nil, random: 0.5), 0.5)
        XCTAssertEqual(policy.delay(afterAttempt: 2, method: "GET", error: error, response: nil, random: 0.5), 1.0)
        XCTAssertEqual(policy.delay(afterAttempt: 3, method: "get", error: error, response: nil, random: 0.5), 2.0)
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "GET", error: error, response: nil, random: 0), 0.4)
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "GET", error: error, response: nil, random: 1)!, 0.6, accuracy: 1e-9)
        XCTAssertEqual(policy.delay(afterAttempt: 6, method: "GET", error: error, response: nil, random: 1), 5)
        XCTAssertNil(policy.delay(afterAttempt: 10, method: "GET", error: error, response: nil))
        XCTAssertNil(policy.delay(afterAttempt: 1, method: "PATCH", error: error, response: nil))
        XCTAssertNil(policy.delay(afterAttempt: 1, method: "GET", error: URLError(.badURL), response: nil))
        XCTAssertEqual(RetryPolicy(retryingOnly: ["get"]).delay(afterAttempt: 1, method: "GET", error: error, response: nil, random: 0.5), 0.5)
        XCTAssertTrue(RetryPolicy.default.retryableURLErrorCodes.contains(.badServerResponse), "a dropped connection on Linux")
        // Past the cap, jitter still spreads the clients
        XCTAssertEqual(policy.delay(afterAttempt: 9, method: "GET", error: error, response: nil, random: 0), 4)
        XCTAssertEqual(RetryPolicy.retryAfterSeconds("7"), 7)
        XCTAssertNil(RetryPolicy.retryAfterSeconds("-5"))
        XCTAssertNil(RetryPolicy.retryAfterSeconds("soon"))
        let now = Date(timeIntervalSince1970: 1_784_000_000)
        XCTAssertEqual(RetryPolicy.retryAfterSeconds("Tue, 14 Jul 2026 03:33:30 GMT", now: now), 10)
    }
}
