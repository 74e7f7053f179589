#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// What a careless caller or a hostile server can do beyond the fault matrix: headers carried across origins, schemes
/// other than http(s), paths that decode outside the base, a slow `processResponse`, and the per-request rules.
final class HostileInputTests: XCTestCase {
    private let server = TestServer.shared
    private let recipeJSON = #"{"name":"Pancakes","ingredients":["flour"],"steps":["mix"]}"#

    enum Kind: String, CaseIterable {
        case data, decodable, noContent = "no-content", download, upload
    }

    /// Adds a request of `kind` for `url` to `queue`; its result, as `Void`, goes to `results`.
    @discardableResult
    private func add(_ kind: Kind, _ url: URL, to queue: OperationQueue, results: Recorder<Result<Void, Error>>) -> Operation {
        let record: (Result<Void, Error>) -> Void = { results.append($0) }
        switch kind {
        case .data: return queue.addRequest(GetData(url: url), session: testSession) { record($0.map { _ in }) }
        case .decodable: return queue.addRequest(GetDecodable<ServedRecipe>(url: url), session: testSession) { record($0.map { _ in }) }
        case .noContent:
            return queue.addRequest(SendNoContent(url: url, shouldEnforceNoContent: false), session: testSession) { record($0.map { _ in }) }
        case .download:
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("hostile-\(UUID().uuidString)")
            return queue.addRequest(Download(url: url, destination: file), session: testSession) { result in
                if case let .success(file) = result { try? FileManager.default.removeItem(at: file) }
                record(result.map { _ in })
            }
        case .upload: return queue.addRequest(Upload(url: url, uploadBody: .data(Data(count: 1000))), session: testSession) { record($0.map { _ in }) }
        }
    }

    // MARK: - Redirects

    func testSensitiveHeadersNeverLeaveTheOriginForAnyKind() throws {
        // Given another origin (localhost on another port) that records what it receives, and a 302 to it
        let other = try LoopbackServer()
        defer { other.stop() }
        let received = Recorder<LoopbackRequest>()
        let json = recipeJSON
        other.route("/landing") { request in
            received.append(request)
            return .json(json)
        }
        let from = server.url("/hostile/redirect").absoluteString + "?to=" + "http://localhost:\(other.port)/landing"
        // And a queue whose requests carry an API key it marks sensitive, a credential and a header that is not
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(
            adapters: [.setHeader("KEY", for: "X-Api-Key"), .setHeader("Bearer SECRET", for: "Authorization"), .setHeader("kept", for: "X-Other")],
            sensitiveHeaders: ["x-api-key"]
        )
        for (index, kind) in Kind.allCases.enumerated() {
            // When a request of each kind follows the redirect
            let results = Recorder<Result<Void, Error>>()
            add(kind, try XCTUnwrap(URL(string: from)), to: queue, results: results)
            queue.waitUntilAllOperationsAreFinished()
            // Then the other origin got it without the API key and the credential, and with the other header
            XCTAssertEqual(results.count, 1, kind.rawValue)
            XCTAssertEqual(received.count, index + 1, kind.rawValue)
            let headers = try XCTUnwrap(received.values.last?.headers)
            XCTAssertNil(headers["x-api-key"], kind.rawValue)
            XCTAssertNil(headers["authorization"], kind.rawValue)
            XCTAssertEqual(headers["x-other"], "kept", kind.rawValue)
        }
    }

    func testARedirectOnTheSameOriginKeepsTheSensitiveHeaders() throws {
        // Given a redirect on the same origin, and a sensitive API key
        let landing = TestServer.freshPath()
        let received = Recorder<LoopbackRequest>()
        let json = recipeJSON
        server.route(landing) { request in
            received.append(request)
            return .json(json)
        }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(adapters: [.setHeader("KEY", for: "X-Api-Key")], sensitiveHeaders: ["X-Api-Key"])
        // When a request follows it
        let results = Recorder<Result<Void, Error>>()
        add(.data, try XCTUnwrap(URL(string: server.url("/hostile/redirect").absoluteString + "?to=" + landing)), to: queue, results: results)
        queue.waitUntilAllOperationsAreFinished()
        // Then the key arrived: it is only kept from other origins
        XCTAssertNotNil(results.values.first?.success)
        XCTAssertEqual(received.values.first?.headers["x-api-key"], "KEY")
    }

    func testLeavingHTTPSForHTTPCountsAsAnotherOrigin() throws {
        // Given a redirect from https to http on the same host (no TLS server here: the ruling itself)
        var next = URLRequest(url: try XCTUnwrap(URL(string: "http://api.example.com/v1")))
        next.setValue("Bearer SECRET", forHTTPHeaderField: "Authorization")
        next.setValue("KEY", forHTTPHeaderField: "X-Api-Key")
        let response = try XCTUnwrap(
            HTTPURLResponse(
                url: try XCTUnwrap(URL(string: "https://api.example.com/v0")), statusCode: 301, httpVersion: nil,
                headerFields: ["Location": "http://api.example.com/v1"]))
        // When the default policy rules on it
        let ruling = RedirectPolicy.follow.ruling(
            next: next, response: response, previousURL: response.url, hops: 1, sensitiveHeaders: ["X-Api-Key"])
        // Then it is followed without the credential and the key
        let followed = try XCTUnwrap(try ruling.get())
        XCTAssertNil(followed.value(forHTTPHeaderField: "Authorization"))
        XCTAssertNil(followed.value(forHTTPHeaderField: "X-Api-Key"))
    }

    func testMonitorsSeeEachRedirectAndACustomPolicyDecides() throws {
        // Given a chain of three redirects, a monitor, and a policy that follows two and then stops
        let monitor = RedirectRecorder()
        let followed = Recorder<URL>()
        let policy = RedirectPolicy.custom { next, _ in
            followed.append(next.url ?? URL(fileURLWithPath: "/"))
            return followed.count <= 2 ? next : nil
        }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [monitor], redirectPolicy: policy)
        // When a request starts the chain
        let results = Recorder<Result<Void, Error>>()
        add(.data, server.url("/hostile/redirect-chain/3"), to: queue, results: results)
        queue.waitUntilAllOperationsAreFinished()
        // Then the monitor saw the two redirects followed, and the third 3xx went to the status check
        XCTAssertEqual(monitor.targets.values.map(\.path), ["/hostile/redirect-chain/2", "/hostile/redirect-chain/1"])
        XCTAssertEqual(results.values.first?.failure.flatMap { ($0 as? RequestQueueError)?.statusCode }, 302)
    }

    // MARK: - What is sent

    func testSchemesOtherThanHTTPAreRefusedBeforeAnythingIsSentForEveryKind() throws {
        let queue = OperationQueue()
        for scheme in ["ftp", "file", "gopher"] {
            for kind in Kind.allCases {
                // Given a hand-built URL that libcurl would speak another protocol to (FTP waits for a greeting)
                let url = try XCTUnwrap(URL(string: "\(scheme)://127.0.0.1:\(server.port)\(TestServer.freshPath())"))
                let results = Recorder<Result<Void, Error>>()
                // When it is sent
                add(kind, url, to: queue, results: results)
                queue.waitUntilAllOperationsAreFinished()
                // Then it fails with the typed error, and the server saw no connection's request
                XCTAssertEqual(results.count, 1)
                XCTAssertEqual(results.values.first?.failure as? RequestBuildingError, .unsupportedScheme(url.absoluteString), "\(scheme) × \(kind)")
            }
        }
    }

    func testEndpointPathsThatDecodeOutsideTheBaseAreRefused() {
        let api = Endpoint("https://api.example.com/v1")
        let escaping = [
            "%2e%2e/%2e%2e/admin", "%2E%2E/admin", ".%2e/admin", "%2e./admin", "..%2fadmin", "..%2Fadmin", "a%2fb",
            "%5c..%5cadmin", "..%5Cadmin", "a\\b", "%00x", "x%00", "%252e%252e/admin", "%2e", "users/%2e%2e",
            // A stray `%` must not hide the escapes beside it, and `..;` is `..` to Tomcat and Spring.
            "..%2f%", "%2e%2e%2fadmin%", "%00%", "..;/admin", "%2e%2e;x/admin",
        ]
        for path in escaping {
            XCTAssertThrowsError(try api.get(path).url(), path) { error in
                XCTAssertEqual(error as? RequestBuildingError, .invalidPath(path), path)
            }
        }
        // Escapes that decode to ordinary characters, and dots inside a name, stay allowed
        for path in ["a%20b", "v1.2/file.json", "..a", "a..", "%41%42", "50%off", "100%", "a;b", "...;"] {
            XCTAssertNoThrow(try api.get(path).url(), path)
        }
    }

    // MARK: - Processing off the delegate queue

    func testASlowProcessResponseDoesNotHoldUpAnotherRequestOnTheSameSession() {
        // Then the other one completed while the first was still processing (on the serial delegate queue it never could)
        XCTAssertEqual(otherCompletedWhileOneProcessed(on: OperationQueue()), [true])
    }

    func testASlowProcessResponseDoesNotHoldUpAnotherRequestOnTheSameSerialCompletionQueue() {
        // Given requests whose completions share one serial queue (the queue's underlyingQueue, the default
        // completion queue)
        let completions = DispatchQueue(label: "serial completions")
        let queue = OperationQueue()
        queue.underlyingQueue = completions
        // Then the other one completed first: processing never runs on the completion queue, so a slow one holds up
        // only its own completion
        XCTAssertEqual(otherCompletedWhileOneProcessed(on: queue), [true])
        withExtendedLifetime(completions) {}
    }

    /// Adds a request whose processing blocks until another request on the same session has completed, then that
    /// other request; returns whether the first saw the other complete.
    private func otherCompletedWhileOneProcessed(on queue: OperationQueue) -> [Bool] {
        let otherCompleted = DispatchSemaphore(value: 0)
        let sawOtherFirst = Recorder<Bool>()
        let slow = BlockingRequest(url: server.url("/json")) {
            sawOtherFirst.append(otherCompleted.wait(timeout: .now() + 20) == .success)
        }
        queue.addRequest(slow, session: testSession) { _ in }
        waitUntil("the slow request is processing") { slow.started.count == 1 }
        // When the other request runs while it is blocked
        queue.addRequest(GetData(url: server.url("/json")), session: testSession) { _ in otherCompleted.signal() }
        queue.waitUntilAllOperationsAreFinished()
        return sawOtherFirst.values
    }

    #if canImport(FoundationNetworking)
    // On Apple platforms the ruling runs on the caller's session delegate queue, as URLSession calls it.
    func testARedirectRulingThatBlocksDoesNotHoldUpAnotherRequestOnTheSameSession() {
        // Given a redirect whose custom ruling blocks until another request on the same session has completed
        let otherCompleted = DispatchSemaphore(value: 0)
        let rulingStarted = Recorder<Bool>()
        let sawOtherFirst = Recorder<Bool>()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(
            redirectPolicy: .custom { next, _ in
                rulingStarted.append(true)
                sawOtherFirst.append(otherCompleted.wait(timeout: .now() + 20) == .success)
                return next
            })
        let results = Recorder<Result<Void, Error>>()
        add(.data, server.url("/hostile/redirect?to=/json"), to: queue, results: results)
        waitUntil("the ruling has started") { rulingStarted.count == 1 }
        // When the other request runs while the ruling is blocked
        queue.addRequest(GetData(url: server.url("/json")), session: testSession) { _ in otherCompleted.signal() }
        queue.waitUntilAllOperationsAreFinished()
        // Then the other one completed first (a ruling on the session's own queue would stall every task of it),
        // and the redirect was followed after
        XCTAssertEqual(sawOtherFirst.values, [true])
        XCTAssertEqual(results.count, 1)
        XCTAssertNil(results.values.first?.failure)
    }
    #endif

    func testCancellingWhileARedirectIsBeingRuledOnCompletesOnce() {
        // Given a redirect whose ruling is still running well after the request has been cancelled (Foundation on
        // Linux crashed when the answer came after the cancel)
        let cancelled = DispatchSemaphore(value: 0)
        let rulingStarted = Recorder<Bool>()
        let rulingEnded = Recorder<Bool>()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(
            redirectPolicy: .custom { next, _ in
                rulingStarted.append(true)
                _ = cancelled.wait(timeout: .now() + 10)
                Thread.sleep(forTimeInterval: 0.3)  // past the moment a cancel would reach the task
                rulingEnded.append(true)
                return next
            })
        let results = Recorder<Result<Void, Error>>()
        let operation = add(.data, server.url("/hostile/redirect?to=/json"), to: queue, results: results)
        waitUntil("the ruling has started") { rulingStarted.count == 1 }
        // When the request is cancelled meanwhile
        operation.cancel()
        cancelled.signal()
        queue.waitUntilAllOperationsAreFinished()
        // Then it completes once, as cancelled, and the process lives on to serve the next request
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(results.values.first?.failure?.isRequestCancellation, true)
        let next = Recorder<Result<Void, Error>>()
        add(.data, server.url("/json"), to: OperationQueue(), results: next)
        waitUntil("the next request completes and the ruling has ended") { next.count == 1 && rulingEnded.count == 1 }
        Thread.sleep(forTimeInterval: 0.5)  // the held-back cancel reaches the task meanwhile
    }

    // MARK: - Per-request limits

    func testARequestsOwnLimitsReplaceTheQueues() {
        // Given a queue with no body limit, and a request that allows 1,000 bytes
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(limits: .none)
        var limited = LimitedData(url: server.url("/bytes/5000"))
        limited.ownLimits = TransferLimits(maximumBodySize: 1000)
        let results = Recorder<Result<Int, Error>>()
        // When it and one without its own limits fetch 5,000 bytes
        queue.addRequest(limited, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        queue.addRequest(LimitedData(url: server.url("/bytes/5000")), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then the limited one fails with the typed error, and the other gets every byte
        XCTAssertEqual(results.values.first?.failure as? TransferLimitError, .responseTooLarge(limit: 1000))
        XCTAssertEqual(results.values.last?.success, 5000)
    }

    func testAHeadResponseAnnouncingALargeBodyIsNotRefused() {
        // Given a HEAD request for a 100 MB resource, under the default 64 MiB limit
        let results = Recorder<Result<Data, Error>>()
        let queue = OperationQueue()
        var head = GetData(url: server.url("/bytes/100000000"))
        head.method = "HEAD"
        // When it is sent
        queue.addRequest(head, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then it succeeds: its Content-Length describes a body it does not send
        XCTAssertEqual(results.values.first?.success, Data())
    }

    func testAChunkedBodyPastTheLimitStopsAtTheLimit() {
        // Given a 100 KB limit, and a body without a length that never ends (64 KiB a millisecond: at full speed,
        // in small chunks, an in-process server starves the session on Linux; see docs/reliability.md)
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(maximumBodySize: 100_000))
        let results = Recorder<Result<Int, Error>>()
        // When it is fetched
        queue.addRequest(LimitedData(url: server.url("/hostile/endless?chunk=65536&interval=1")), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then it fails with the limit, once
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(results.values.first?.failure as? TransferLimitError, .responseTooLarge(limit: 100_000))
    }

    func testASmallGzipBodyIsDecodedWithinTheLimit() {
        // Given a gzip body that inflates to 50,000 bytes, under a 60,000-byte limit
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(maximumBodySize: 60_000))
        let results = Recorder<Result<Int, Error>>()
        // When it is fetched
        queue.addRequest(LimitedData(url: server.url("/hostile/gzip-bomb/50000")), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then the limit counted inflated bytes: at 40,000 it fails, at 60,000 it passes the stop (libcurl then finds
        // the route's uncomputed CRC, so the outcome is a transport error, not the limit)
        XCTAssertNotEqual(results.values.first?.failure as? TransferLimitError, .responseTooLarge(limit: 60_000))
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(maximumBodySize: 40_000))
        queue.addRequest(LimitedData(url: server.url("/hostile/gzip-bomb/50000")), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.last?.failure as? TransferLimitError, .responseTooLarge(limit: 40_000))
    }
}

/// GET `url` and count its bytes, under the request's own limits when it has them.
private struct LimitedData: DataRequest {
    typealias Success = Int
    let url: URL
    var ownLimits: TransferLimits?
    var identifier: String { url.absoluteString }
    var limits: TransferLimits? { ownLimits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
    func processData(_ data: Data) throws -> Int { data.count }
}

/// A request whose processing calls `block`, and records that it started.
private struct BlockingRequest: DataRequest {
    typealias Success = Data
    let url: URL
    let block: @Sendable () -> Void
    let started = Recorder<Bool>()
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
    func processData(_ data: Data) throws -> Data {
        started.append(true)
        block()
        return data
    }
}

/// Records the targets of the redirects a monitor is told about.
private final class RedirectRecorder: RequestEventMonitor, @unchecked Sendable {
    let targets = Recorder<URL>()
    func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest) {
        request.url.map(targets.append)
    }
}
