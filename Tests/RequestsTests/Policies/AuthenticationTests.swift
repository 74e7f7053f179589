#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Records, per request identifier, the statuses received and the attempts sent.
final class EventLog: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var storedEvents: [String] = []
    private var storedSummaries: [RequestSummary] = []
    private var storedStatuses: [Int] = []

    var events: [String] { lock.lock(); defer { lock.unlock() }; return storedEvents }
    var summaries: [RequestSummary] { lock.lock(); defer { lock.unlock() }; return storedSummaries }
    var statuses: [Int] { lock.lock(); defer { lock.unlock() }; return storedStatuses }

    private func record(_ event: String) {
        lock.lock()
        storedEvents.append(event)
        lock.unlock()
    }

    func requestWillSend(_ attempt: RequestAttempt) {
        record("willSend \(attempt.number)")
    }

    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        lock.lock()
        storedStatuses.append(response.statusCode)
        lock.unlock()
        record("didReceive \(attempt.number) \(response.statusCode) \(bodyBytes)")
    }

    func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval) {
        record("didFail \(attempt.number)")
    }

    func requestDidRetry(_ attempt: RequestAttempt, delay: TimeInterval) {
        record("didRetry \(attempt.number) \(delay)")
    }

    func requestDidFinish(_ summary: RequestSummary) {
        lock.lock()
        storedSummaries.append(summary)
        lock.unlock()
        record("didFinish \(summary.attempts) \(summary.error == nil ? "success" : "failure")")
    }
}

/// Counts refreshes and gets a token from the loopback server's refresh route.
final class RefreshCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var calls = 0
    var count: Int { lock.lock(); defer { lock.unlock() }; return calls }

    func countCall() {
        lock.lock()
        calls += 1
        lock.unlock()
    }

    /// A refresh closure that GETs `refreshPath` and reads `{"token": …}`.
    func refreshing(at refreshPath: String) -> @Sendable (String?, @escaping @Sendable (Result<String, Error>) -> Void) -> Void {
        { [self] _, completion in
            countCall()
            testSession.dataTask(with: TestServer.url(refreshPath)) { data, _, error in
                struct Token: Decodable { let token: String }
                completion(
                    Result {
                        if let error { throw error }
                        return try JSONDecoder().decode(Token.self, from: data ?? Data()).token
                    })
            }.resume()
        }
    }
}

final class AuthenticationTests: XCTestCase {
    private let server = TestServer.shared

    private func protectedPaths(refreshDelayMilliseconds: Int = 0) -> (path: String, refresh: String) {
        let id = UUID().uuidString
        let (path, refresh) = ("/auth/\(id)", "/auth/\(id)/refresh")
        server.protect(path, refreshPath: refresh, refreshDelayMilliseconds: refreshDelayMilliseconds)
        return (path, refresh)
    }

    private func run(
        _ count: Int,
        _ url: URL,
        on queue: OperationQueue,
        file: StaticString = #filePath,
        line: UInt = #line
    ) -> [Result<Data, Error>] {
        let results = Recorder<Result<Data, Error>>()
        for _ in 0..<count {
            queue.addRequest(PolicyRequest(url: url), session: testSession) { results.append($0) }
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, count, "each completion exactly once", file: file, line: line)
        return results.values
    }

    func testTwentyConcurrentExpiredTokensRefreshOnceAndAllSucceed() {
        // Given a server that accepts only the token its refresh endpoint issued last, and an expired token
        let (path, refresh) = protectedPaths(refreshDelayMilliseconds: 200)
        let counter = RefreshCounter()
        let log = EventLog()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(
            authenticator: TokenAuthenticator(token: "expired", refresh: counter.refreshing(at: refresh)),
            monitors: [log]
        )
        // When 20 requests run at once
        let results = run(20, server.url(path), on: queue)
        // Then the refresh endpoint was called exactly once, and all 20 succeeded
        XCTAssertEqual(server.requestCount(path: refresh), 1)
        XCTAssertEqual(counter.count, 1)
        XCTAssertEqual(results.filter { $0.success != nil }.count, 20)
        // And each rejected request was sent exactly once more, the others once
        let rejected = log.statuses.filter { $0 == 401 }.count
        XCTAssertGreaterThan(rejected, 0)
        XCTAssertEqual(server.requestCount(path: path), 20 + rejected)
        XCTAssertEqual(log.summaries.map(\.attempts).reduce(0, +), 20 + rejected)
        XCTAssertTrue(log.summaries.allSatisfy { $0.attempts <= 2 })
        XCTAssertTrue(log.summaries.allSatisfy { $0.urlRequest?.value(forHTTPHeaderField: "Authorization") == "Bearer token-1" })
    }

    func testRequestsArrivingDuringARefreshWaitForItAndAreSentOnceWithTheNewToken() {
        // Given a refresh in progress (the endpoint takes 1 s)
        let (path, refresh) = protectedPaths(refreshDelayMilliseconds: 1000)
        let (later, laterRequests) = recordedRoute()
        let counter = RefreshCounter()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(
            authenticator: TokenAuthenticator(token: "expired", refresh: counter.refreshing(at: refresh))
        )
        let first = queue.addRequest(PolicyRequest(url: server.url(path)), session: testSession)
        waitUntil("the refresh starts") { self.server.requestCount(path: refresh) == 1 }
        // When five more requests arrive
        let results = run(5, server.url(later), on: queue)
        // Then they were sent once each, with the new token, and there was one refresh
        XCTAssertEqual(laterRequests.values.map { $0.headers["authorization"] }, Array(repeating: "Bearer token-1", count: 5))
        XCTAssertTrue(results.allSatisfy { $0.success != nil })
        XCTAssertNotNil(first.result?.success)
        XCTAssertEqual(counter.count, 1)
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testAFailedRefreshFailsEveryWaitingRequestWithItsError() {
        // Given a refresh that fails after a while
        let (path, _) = protectedPaths()
        let counter = RefreshCounter()
        let authenticator = TokenAuthenticator(token: "expired") { _, completion in
            counter.countCall()
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { completion(.failure(TestError(name: "refresh refused"))) }
        }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: authenticator)
        // When eight requests are rejected
        let results = run(8, server.url(path), on: queue)
        // Then one refresh ran, and every request failed with its error (or, arriving after it, with the 401)
        XCTAssertEqual(counter.count, 1)
        XCTAssertTrue(
            results.allSatisfy {
                $0.failure as? TestError == TestError(name: "refresh refused") || ($0.failure as? RequestQueueError)?.statusCode == 401
            })
        XCTAssertGreaterThan(results.filter { $0.failure as? TestError == TestError(name: "refresh refused") }.count, 0)
        XCTAssertLessThanOrEqual(server.requestCount(path: path), 8, "nothing was resent")
        XCTAssertEqual(authenticator.token, "expired")
    }

    func testAServerThatAlwaysRefusesCannotCauseALoop() throws {
        // Given a server that answers 401 to everything, and a refresh that always succeeds
        let (path, requests) = recordedRoute { _ in LoopbackResponse(status: 401) }
        let counter = RefreshCounter()
        let authenticator = TokenAuthenticator(token: "t0", minimumRefreshInterval: 2) { _, completion in
            counter.countCall()
            completion(.success("t\(counter.count)"))
        }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: authenticator)
        // When ten requests run, then ten more straight after
        let firstWave = run(10, server.url(path), on: queue)
        let sentInFirstWave = requests.count
        let secondWave = run(10, server.url(path), on: queue)
        // Then one refresh in all: each request was sent at most twice, the second wave once, and all failed with 401
        XCTAssertEqual(counter.count, 1)
        XCTAssertTrue((firstWave + secondWave).allSatisfy { ($0.failure as? RequestQueueError)?.statusCode == 401 })
        XCTAssertLessThanOrEqual(sentInFirstWave, 20)
        XCTAssertEqual(requests.count - sentInFirstWave, 10)
        // And once the interval has passed, a rejection may refresh again
        Thread.sleep(forTimeInterval: 2.1)
        _ = run(1, server.url(path), on: queue)
        XCTAssertEqual(counter.count, 2)
        XCTAssertEqual(authenticator.token, "t2")
    }

    func testARequestThatOptsOutIsNeitherAuthorizedNorRefreshed() {
        let (path, requests) = recordedRoute { _ in LoopbackResponse(status: 401) }
        let counter = RefreshCounter()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(
            authenticator: TokenAuthenticator(token: "secret") { _, completion in
                counter.countCall()
                completion(.success("new"))
            })
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(PolicyRequest(url: server.url(path), authenticated: false), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual((results.values.first?.failure as? RequestQueueError)?.statusCode, 401)
        XCTAssertEqual(requests.values.map { $0.headers["authorization"] }, [nil])
        XCTAssertEqual(counter.count, 0)
    }

    func testCancellingWhileWaitingForARefreshCompletesAtOnce() {
        // Given a refresh the test holds open
        let (path, _) = protectedPaths()
        let held = Box<@Sendable (Result<String, Error>) -> Void>()
        let authenticator = TokenAuthenticator(token: "expired") { _, completion in held.value = completion }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: authenticator)
        let results = Recorder<Result<Data, Error>>()
        weak var weakOperation: RequestOperation<Data, Error>?
        do {
            let operation = queue.addRequest(PolicyRequest(url: server.url(path)), session: testSession) { results.append($0) }
            weakOperation = operation
            waitUntil("the refresh starts") { held.value != nil }
            // When the waiting request is cancelled
            operation.cancel()
        }
        // Then it completes with the cancellation and is released while the refresh still runs
        waitUntil("the completion") { results.count == 1 }
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        waitUntil("the operation is released") { weakOperation == nil }
        // And a refresh that ends afterwards, even twice, changes only the token
        held.value?(.success("token-x"))
        held.value?(.success("token-y"))
        XCTAssertEqual(authenticator.token, "token-x")
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testSetTokenEndsARefreshThatNeverAnswersAndATimeoutFailsTheWaiters() {
        // Given a refresh that never calls back
        let (path, requests) = recordedRoute { request in
            request.headers["authorization"] == "Bearer fresh" ? .text("ok") : LoopbackResponse(status: 401)
        }
        let started = Recorder<Bool>()
        let hung = TokenAuthenticator(token: "stale") { _, _ in started.append(true) }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: hung)
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(PolicyRequest(url: server.url(path)), session: testSession) { results.append($0) }
        waitUntil("the refresh starts") { started.count == 1 }
        // When a login sets a new token
        hung.setToken("fresh")
        queue.waitUntilAllOperationsAreFinished()
        // Then the waiting request goes on with it
        XCTAssertNotNil(results.values.first?.success)
        XCTAssertEqual(requests.values.map { $0.headers["authorization"] }, ["Bearer stale", "Bearer fresh"])

        // And with a timeout instead, the waiting request fails with RefreshTimedOut
        let timingOut = TokenAuthenticator(token: "stale", refreshTimeout: 0.3) { _, _ in }
        queue.requestPolicies = RequestPolicies(authenticator: timingOut)
        let late = Recorder<Result<Data, Error>>()
        queue.addRequest(PolicyRequest(url: server.url(path)), session: testSession) { late.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(late.values.first?.failure is TokenAuthenticator.RefreshTimedOut)
    }

    func testSetTokenResendsARejectedRequestWithoutARefresh() {
        // Given a request rejected while its token was replaced (a new login)
        let (path, requests) = recordedRoute { request in
            request.headers["authorization"] == "Bearer fresh" ? .text("ok") : LoopbackResponse(status: 401, delayMilliseconds: 300)
        }
        let counter = RefreshCounter()
        let authenticator = TokenAuthenticator(token: "stale") { _, completion in
            counter.countCall()
            completion(.failure(TestError(name: "must not refresh")))
        }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: authenticator)
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(PolicyRequest(url: server.url(path)), session: testSession) { results.append($0) }
        waitUntil("the request is received") { requests.count == 1 }
        authenticator.setToken("fresh")
        queue.waitUntilAllOperationsAreFinished()
        // Then it was sent again with the new token, and nothing was refreshed
        XCTAssertNotNil(results.values.first?.success)
        XCTAssertEqual(requests.values.map { $0.headers["authorization"] }, ["Bearer stale", "Bearer fresh"])
        XCTAssertEqual(counter.count, 0)
    }
}
