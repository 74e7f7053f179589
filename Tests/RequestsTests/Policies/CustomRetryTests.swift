#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// GET `url` as bytes, under `policy`.
private struct Flaky: DataRequest {
    typealias Success = Data
    let url: URL
    let policy: RetryPolicy
    var identifier: String { url.absoluteString }
    var retryPolicy: RetryPolicy? { policy }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// What a retrier was asked, in order.
private final class Asked: @unchecked Sendable {
    private let lock = NSLock()
    private var contexts: [(Int, Int?)] = []
    func append(_ context: RetryContext) { lock.withLock { contexts.append((context.attempt, context.response?.statusCode)) } }
    var attempts: [Int] { lock.withLock { contexts.map(\.0) } }
    var statuses: [Int?] { lock.withLock { contexts.map(\.1) } }
}

private struct RetrierFailure: Error, Equatable {}

/// The delays monitors are told of.
private final class DelayRecorder: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var recorded: [TimeInterval] = []
    func requestDidRetry(_ attempt: RequestAttempt, delay: TimeInterval) { lock.withLock { recorded.append(delay) } }
    var delays: [TimeInterval] { lock.withLock { recorded } }
}

final class CustomRetryTests: XCTestCase {
    private let server = TestServer.shared

    /// A path answering 503 `failures` times, then 200 "ok".
    private func flakyPath(failures: Int) -> String {
        let path = "/custom-retry/\(UUID().uuidString)"
        server.script(path, Array(repeating: LoopbackResponse(status: 503), count: failures) + [.text("ok")])
        return path
    }

    private func run(_ path: String, _ policy: RetryPolicy, cancelAfter: TimeInterval? = nil, monitor: DelayRecorder? = nil) -> [Result<Data, Error>] {
        let queue = OperationQueue()
        if let monitor { queue.requestPolicies = RequestPolicies(monitors: [monitor]) }
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(Flaky(url: server.url(path), policy: policy), session: testSession) { results.append($0) }
        if let cancelAfter {
            Thread.sleep(forTimeInterval: cancelAfter)
            operation.cancel()
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1, "exactly one completion")
        return results.values
    }

    func testTheRetrierDecidesFromTheAttemptAndTheResponse() throws {
        // Given a server that fails twice, and a retrier that retries 503s, once at once and once after a delay
        let path = flakyPath(failures: 2)
        let asked = Asked()
        let policy = RetryPolicy.custom { context in
            asked.append(context)
            try await Task.sleep(nanoseconds: 1_000_000)
            guard context.response?.statusCode == 503 else { return .doNotRetry }
            return context.attempt == 1 ? .retry : .retryAfter(0.01)
        }

        // When the request runs
        let results = run(path, policy)

        // Then it succeeds on the third attempt, and the retrier saw both failures
        XCTAssertEqual(try results.first?.get(), Data("ok".utf8))
        XCTAssertEqual(asked.attempts, [1, 2])
        XCTAssertEqual(asked.statuses, [503, 503])
        XCTAssertEqual(server.requestCount(path: path), 3)
    }

    func testDoNotRetryAndMaxAttemptsEndWithTheAttemptsError() {
        let stopping = run(flakyPath(failures: 5), .custom { _ in .doNotRetry })
        XCTAssertEqual((stopping.first?.failure as? RequestQueueError)?.statusCode, 503)

        let path = flakyPath(failures: 5)
        let capped = run(path, .custom(maxAttempts: 2) { _ in .retry })
        XCTAssertEqual((capped.first?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual(server.requestCount(path: path), 2, "maxAttempts caps what the retrier asks")
    }

    func testARetrierThatThrowsEndsTheRequestWithItsError() {
        let results = run(flakyPath(failures: 1), .custom { _ in throw RetrierFailure() })
        XCTAssertEqual(results.first?.failure as? RetrierFailure, RetrierFailure())
    }

    func testARetrierThatNeverAnswersTimesOutAsDoNotRetry() {
        let path = flakyPath(failures: 1)
        let results = run(
            path,
            .custom(timeout: 0.2) { _ in
                try await Task.sleep(nanoseconds: 3_600_000_000_000)
                return .retry
            })
        XCTAssertEqual((results.first?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testANegativeOrInvalidDelayIsClampedToZeroAndALongOneToMaxDelay() throws {
        let delays = DelayRecorder()
        for delay in [-5, .nan, -.infinity] as [TimeInterval] {
            let results = run(flakyPath(failures: 1), .custom { _ in .retryAfter(delay) }, monitor: delays)
            XCTAssertEqual(try results.first?.get(), Data("ok".utf8), "\(delay)")
        }
        let results = run(flakyPath(failures: 1), .custom(maxDelay: 0.05) { _ in .retryAfter(3_600) }, monitor: delays)
        XCTAssertEqual(try results.first?.get(), Data("ok".utf8))
        XCTAssertEqual(delays.delays, [0, 0, 0, 0.05])
    }

    func testACancellationWhileTheRetrierThinksCompletesAtOnceAndItsAnswerIsIgnored() {
        let path = flakyPath(failures: 1)
        let results = run(
            path,
            .custom { _ in
                try? await Task.sleep(nanoseconds: 500_000_000)
                return .retry
            }, cancelAfter: 0.1)
        XCTAssertTrue(results.first?.failure?.isRequestCancellation ?? false)
        Thread.sleep(forTimeInterval: 0.6)
        XCTAssertEqual(server.requestCount(path: path), 1, "the late .retry sent nothing")
    }

    func testTheConnectionLostPresetRetriesADroppedConnectionOnly() throws {
        // A reset mid-body (−1005), then a good answer: retried.
        let dropped = "/custom-retry/\(UUID().uuidString)"
        server.script(dropped, [LoopbackResponse(body: Data(count: 200_000), fault: .resetMidBody), .text("ok")])
        var policy = RetryPolicy.connectionLost
        policy.baseDelay = 0.01
        XCTAssertEqual(try run(dropped, policy).first?.get(), Data("ok".utf8))
        // A 503: not retried.
        let unavailable = flakyPath(failures: 1)
        XCTAssertEqual((run(unavailable, policy).first?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual(server.requestCount(path: unavailable), 1)
    }
}
