#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// GET `url` with optional per-request policies.
struct PolicyRequest: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    var requestAdapters: [RequestAdapter] = []
    var requestPreconditions: [RequestPrecondition] = []
    var requestValidations: [ResponseValidation] = []
    var ownRetryPolicy: RetryPolicy?
    var authenticated = true
    var accept: String?
    var identifier: String { url.absoluteString }
    var adapters: [RequestAdapter] { requestAdapters }
    var preconditions: [RequestPrecondition] { requestPreconditions }
    var validations: [ResponseValidation] { requestValidations }
    var retryPolicy: RetryPolicy? { ownRetryPolicy }
    var usesAuthenticator: Bool { authenticated }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        if let accept { request.setValue(accept, forHTTPHeaderField: "Accept") }
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// An error a test can recognise.
struct TestError: Error, Equatable {
    let name: String
}

/// A new path whose requests are recorded, answered by `respond`.
func recordedRoute(
    _ respond: @escaping @Sendable (LoopbackRequest) -> LoopbackResponse = { _ in .text("ok") }
) -> (path: String, requests: Recorder<LoopbackRequest>) {
    let path = "/policies/\(UUID().uuidString)"
    let requests = Recorder<LoopbackRequest>()
    TestServer.shared.route(path) { request in
        requests.append(request)
        return respond(request)
    }
    return (path, requests)
}

/// Runs `request` on a fresh queue with `policies`, waits, and checks the completion ran exactly once.
func runOnce(
    _ request: PolicyRequest,
    policies: RequestPolicies = RequestPolicies(),
    file: StaticString = #filePath,
    line: UInt = #line
) -> Result<Data, Error>? {
    let queue = OperationQueue()
    queue.requestPolicies = policies
    let results = Recorder<Result<Data, Error>>()
    let operation = queue.addRequest(request, session: testSession) { results.append($0) }
    queue.waitUntilAllOperationsAreFinished()
    XCTAssertEqual(results.count, 1, "completion exactly once", file: file, line: line)
    XCTAssertTrue(operation.isFinished, file: file, line: line)
    return results.values.first
}

final class AdapterTests: XCTestCase {
    func testQueueAdaptersThenRequestAdaptersChangeWhatIsSent() {
        // Given an asynchronous queue adapter and a synchronous request adapter
        let (path, requests) = recordedRoute()
        let queueAdapter = RequestAdapter { request, completion in
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) {
                var request = request
                request.setValue("queue", forHTTPHeaderField: "X-Order")
                completion(.success(request))
            }
        }
        let requestAdapter = RequestAdapter.map { request in
            var request = request
            request.setValue((request.value(forHTTPHeaderField: "X-Order") ?? "") + ",request", forHTTPHeaderField: "X-Order")
            return request
        }
        // When the request runs on a queue with the queue adapter
        let result = runOnce(
            PolicyRequest(url: TestServer.url(path), requestAdapters: [requestAdapter]),
            policies: RequestPolicies(adapters: [queueAdapter, .setHeader("yes", for: "X-Adapted")])
        )
        // Then the server saw both changes, in order
        XCTAssertNotNil(result?.success)
        XCTAssertEqual(requests.values.map { $0.headers["x-order"] }, ["queue,request"])
        XCTAssertEqual(requests.values.first?.headers["x-adapted"], "yes")
    }

    func testAFailingAdapterFailsTheRequestWithItsErrorAndSendsNothing() {
        let (path, requests) = recordedRoute()
        let failing = RequestAdapter { _, completion in completion(.failure(TestError(name: "no signature"))) }
        let result = runOnce(PolicyRequest(url: TestServer.url(path)), policies: RequestPolicies(adapters: [failing]))
        XCTAssertEqual(result?.failure as? TestError, TestError(name: "no signature"))
        XCTAssertEqual(requests.count, 0)
    }

    func testAnAdapterThatCallsBackTwiceSendsOnce() {
        let (path, requests) = recordedRoute()
        let twice = RequestAdapter { request, completion in
            completion(.success(request))
            completion(.failure(TestError(name: "second call")))
            completion(.success(request))
        }
        let result = runOnce(PolicyRequest(url: TestServer.url(path)), policies: RequestPolicies(adapters: [twice]))
        XCTAssertNotNil(result?.success)
        XCTAssertEqual(requests.count, 1)
    }

    func testCancellingWhileAnAdapterRunsCompletesAtOnceAndSendsNothing() {
        // Given an adapter that holds on to its completion
        let (path, requests) = recordedRoute()
        let held = Box<@Sendable (Result<URLRequest, Error>) -> Void>()
        let adapter = RequestAdapter { request, completion in held.value = completion }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(adapters: [adapter])
        let results = Recorder<Result<Data, Error>>()
        weak var weakOperation: RequestOperation<Data, Error>?
        do {
            let operation = queue.addRequest(PolicyRequest(url: TestServer.url(path)), session: testSession) { results.append($0) }
            weakOperation = operation
            waitUntil("the adapter runs") { held.value != nil }
            // When the operation is cancelled, and the adapter answers afterwards
            operation.cancel()
        }
        waitUntil("the completion") { results.count == 1 }
        // Then it is released although the adapter still holds its callback
        waitUntil("the operation is released") { weakOperation == nil }
        held.value?(.success(URLRequest(url: TestServer.url(path))))
        queue.waitUntilAllOperationsAreFinished()
        // And it completed once with the cancellation, and nothing was sent
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(requests.count, 0)
    }

    func testAdaptersRunForEveryAttempt() {
        // Given a 503 then a 200, a queue retry policy and an adapter that numbers the attempts
        let path = "/policies/\(UUID().uuidString)"
        TestServer.shared.script(path, [LoopbackResponse(status: 503), .text("ok")])
        let calls = Recorder<Int>()
        let numbering = RequestAdapter.map { request in
            calls.append(calls.count + 1)
            var request = request
            request.setValue(String(calls.count), forHTTPHeaderField: "X-Attempt")
            return request
        }
        let result = runOnce(
            PolicyRequest(url: TestServer.url(path)),
            policies: RequestPolicies(adapters: [numbering], retryPolicy: RetryPolicy(baseDelay: 0.01, jitter: 0))
        )
        XCTAssertNotNil(result?.success)
        XCTAssertEqual(calls.count, 2)
        XCTAssertEqual(TestServer.shared.requestCount(path: path), 2)
    }

    func testPoliciesBelongToTheirQueueAndReachChainedAndBatchedRequests() {
        // Given a queue with a header adapter, and another queue without
        let (path, requests) = recordedRoute()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(adapters: [.setHeader("on", for: "X-Policy")])
        let plainQueue = OperationQueue()
        let url = TestServer.url(path)
        // When requests run plain, chained, batched, shared and on the other queue
        let first = queue.addRequest(PolicyRequest(url: url), session: testSession)
        queue.addRequest(after: first, session: testSession) { _ in PolicyRequest(url: url) }
        queue.addBatch([PolicyRequest(url: url), PolicyRequest(url: url)], session: testSession)
        queue.addSharedRequest(PolicyRequest(url: url), session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        plainQueue.addRequest(PolicyRequest(url: url), session: testSession)
        plainQueue.waitUntilAllOperationsAreFinished()
        // Then every request of the first queue carried the header, and the other queue's did not
        XCTAssertEqual(requests.values.map { $0.headers["x-policy"] }, ["on", "on", "on", "on", "on", nil])
        XCTAssertEqual(plainQueue.requestPolicies.adapters.count, 0)
    }

    func testAFreedQueuesPoliciesAreReleasedWhenPoliciesAreSetAgain() {
        final class Monitor: RequestEventMonitor {}
        weak var weakMonitor: Monitor?
        do {
            let monitor = Monitor()
            weakMonitor = monitor
            let queue = OperationQueue()
            queue.requestPolicies = RequestPolicies(monitors: [monitor])
        }
        OperationQueue().requestPolicies = RequestPolicies()
        XCTAssertNil(weakMonitor)
    }
}

final class PreconditionTests: XCTestCase {
    func testAFailingPreconditionFailsWithItsErrorAndSendsNothing() {
        let (path, requests) = recordedRoute()
        let signedIn = RequestPrecondition { request in
            guard request.value(forHTTPHeaderField: "Authorization") != nil else { throw TestError(name: "signed out") }
        }
        let result = runOnce(PolicyRequest(url: TestServer.url(path), requestPreconditions: [signedIn]))
        XCTAssertEqual(result?.failure as? TestError, TestError(name: "signed out"))
        XCTAssertEqual(requests.count, 0)
    }

    func testPreconditionsSeeTheAdaptedRequest() {
        let (path, requests) = recordedRoute()
        let signedIn = RequestPrecondition { request in
            guard request.value(forHTTPHeaderField: "Authorization") != nil else { throw TestError(name: "signed out") }
        }
        let result = runOnce(
            PolicyRequest(url: TestServer.url(path)),
            policies: RequestPolicies(adapters: [.setHeader("Bearer t", for: "Authorization")], preconditions: [signedIn])
        )
        XCTAssertNotNil(result?.success)
        XCTAssertEqual(requests.count, 1)
    }
}

final class ValidationTests: XCTestCase {
    private struct Maintenance: Error {}

    func testCustomValidationsRunAfterTheStatusCheck() {
        // Given a validation that refuses a maintenance page
        let seen = Recorder<Int>()
        let noMaintenance = ResponseValidation { _, response, body in
            seen.append(response.statusCode)
            if String(decoding: body, as: UTF8.self).contains("maintenance") { throw Maintenance() }
        }
        let policies = RequestPolicies(validations: [noMaintenance])
        let maintenance = recordedRoute { _ in .text("down for maintenance") }.path
        let notFound = recordedRoute { _ in .text("maintenance", status: 404) }.path
        let fine = recordedRoute { _ in .text("ok") }.path
        // When each runs
        let refused = runOnce(PolicyRequest(url: TestServer.url(maintenance)), policies: policies)
        let statusError = runOnce(PolicyRequest(url: TestServer.url(notFound)), policies: policies)
        let accepted = runOnce(PolicyRequest(url: TestServer.url(fine), requestValidations: [noMaintenance]), policies: policies)
        // Then the validation's error fails the first, the status error wins for the 404 (the validation
        // never sees it), and queue and request validations both ran for the last
        XCTAssertTrue(refused?.failure is Maintenance)
        XCTAssertEqual((statusError?.failure as? RequestQueueError)?.statusCode, 404)
        XCTAssertNotNil(accepted?.success)
        XCTAssertEqual(seen.values, [200, 200, 200])
    }

    func testContentTypeMustMatchTheAcceptHeader() {
        // Given routes that answer HTML, JSON with a charset, and an empty 204
        let html = recordedRoute { _ in LoopbackResponse(headers: ["Content-Type": "text/html"], body: Data("<h1>Oops</h1>".utf8)) }.path
        let json = recordedRoute { _ in .json(#"{"ok":true}"#) }.path
        let empty = recordedRoute { _ in LoopbackResponse(status: 204) }.path
        let policies = RequestPolicies(validations: [.contentTypeMatchesAccept])
        func run(_ path: String, accept: String?) -> Result<Data, Error>? {
            runOnce(PolicyRequest(url: TestServer.url(path), accept: accept), policies: policies)
        }
        // Then HTML for a JSON request fails with a typed error naming both sides
        guard case let .unacceptableContentType(received, acceptable)? = run(html, accept: "application/json")?.failure as? RequestQueueError else {
            return XCTFail("expected unacceptableContentType")
        }
        XCTAssertEqual(received, "text/html")
        XCTAssertEqual(acceptable, ["application/json"])
        // And JSON with parameters matches; wildcards, a missing Accept and an empty body pass
        XCTAssertNotNil(run(json, accept: "application/json").flatMap(\.success))
        XCTAssertNotNil(run(json, accept: "text/plain, application/*;q=0.5").flatMap(\.success))
        XCTAssertNotNil(run(html, accept: "*/*").flatMap(\.success))
        XCTAssertNotNil(run(html, accept: nil).flatMap(\.success))
        XCTAssertNotNil(run(empty, accept: "application/json").flatMap(\.success))
        // And the most specific range decides, so q=0 refuses even under */*
        XCTAssertNotNil(run(json, accept: "application/json;q=0, */*")?.failure as? RequestQueueError)
    }

    func testContentTypeValidationWithoutAContentType() throws {
        let url = TestServer.url("/x")
        var request = URLRequest(url: url)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let untyped = try XCTUnwrap(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: [:]))
        XCTAssertThrowsError(try ResponseValidation.contentTypeMatchesAccept.validate(request, response: untyped, body: Data("{}".utf8)))
        XCTAssertNoThrow(try ResponseValidation.contentTypeMatchesAccept.validate(request, response: untyped, body: Data()))
        let upper = try XCTUnwrap(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Content-Type": "Application/JSON"]))
        XCTAssertNoThrow(try ResponseValidation.contentTypeMatchesAccept.validate(request, response: upper, body: Data("{}".utf8)))
        let problem = try XCTUnwrap(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Content-Type": "application/problem+json"]))
        XCTAssertThrowsError(try ResponseValidation.contentTypeMatchesAccept.validate(request, response: problem, body: Data("{}".utf8)))
    }
}

final class QueueRetryPolicyTests: XCTestCase {
    func testTheQueuePolicyRetriesAndARequestPolicyReplacesIt() {
        let fast = RetryPolicy(baseDelay: 0.01, jitter: 0)
        let retried = "/policies/\(UUID().uuidString)"
        TestServer.shared.script(retried, [LoopbackResponse(status: 503), .text("ok")])
        let notRetried = "/policies/\(UUID().uuidString)"
        TestServer.shared.script(notRetried, [LoopbackResponse(status: 503), .text("ok")])
        let withQueuePolicy = runOnce(PolicyRequest(url: TestServer.url(retried)), policies: RequestPolicies(retryPolicy: fast))
        let withOwnPolicy = runOnce(
            PolicyRequest(url: TestServer.url(notRetried), ownRetryPolicy: RetryPolicy(maxAttempts: 1)),
            policies: RequestPolicies(retryPolicy: fast)
        )
        XCTAssertNotNil(withQueuePolicy?.success)
        XCTAssertEqual(TestServer.shared.requestCount(path: retried), 2)
        XCTAssertEqual((withOwnPolicy?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual(TestServer.shared.requestCount(path: notRetried), 1)
    }
}
