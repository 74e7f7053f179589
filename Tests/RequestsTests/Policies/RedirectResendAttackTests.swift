#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// The 307/308 resend attacked from outside (see `RedirectResendTestCase` for the kinds and helpers).
final class RedirectResendAttackTests: RedirectResendTestCase {
    func testEveryKindSendsItsBodyWholeOnceThroughA307And308Chain() throws {
        for kind in ResendKind.allCases {
            // Given a 307 to a 308 to a landing that records what it gets
            let (landing, landed) = recording(kind == .noContent ? LoopbackResponse(status: 204) : .json(resendRecipe))
            let (second, seconds) = hop(308, to: landing)
            let (first, firsts) = hop(307, to: second)
            let monitor = ResendMonitor()

            // When the kind POSTs its body there
            let run = run(kind, Post(url: server.url(first)), policies: RequestPolicies(monitors: [monitor]))

            // Then each hop and the landing got the body whole, once; one attempt, two redirects, three tasks
            let expected = kind == .noContent ? Data() : kind == .decodable ? Data("Pancakes".utf8) : Data(resendRecipe.utf8)
            XCTAssertEqual(run.bytes, expected, "\(kind): \(String(describing: run.error))")
            XCTAssertEqual([firsts.count, seconds.count, landed.count], [1, 1, 1], "\(kind)")
            XCTAssertTrue(landedWhole(firsts.values.first, kind) && landedWhole(seconds.values.first, kind), "\(kind)")
            XCTAssertTrue(landedWhole(landed.values.first, kind), "\(kind): \(landed.values.first?.body.count ?? -1) bytes")
            XCTAssertEqual(monitor.redirects.count, 2, "\(kind)")
            XCTAssertEqual(monitor.summaries.count, 1, "\(kind)")
            XCTAssertEqual(monitor.summaries.values.first?.attempts, 1, "\(kind)")
            XCTAssertEqual(run.tasks.count, 3, "\(kind)")
        }
    }

    func testManyResentRequestsAtOnceEachLandWithTheirOwnBody() {
        // Given 24 POSTs with bodies of their own, each through a 307, on one session at once
        let (landing, landed) = recording()
        let (first, _) = hop(307, to: landing)
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        for n in 0..<24 {
            var post = Post(url: server.url(first + "?n=\(n)"))
            post.body = Data("body-\(n)-".utf8) + payload.prefix(n * 1000)
            queue.addRequest(PostData(post: post), session: testSession) { results.append($0) }
        }
        waitUntil(timeout: 60, "every outcome") { results.count == 24 }
        queue.waitUntilAllOperationsAreFinished()

        // Then each landed once, with its own body
        XCTAssertEqual(results.values.filter { $0.success != nil }.count, 24)
        let bodies = Set(landed.values.map(\.body))
        XCTAssertEqual(bodies, Set((0..<24).map { Data("body-\($0)-".utf8) + payload.prefix($0 * 1000) }))
    }

    // MARK: - Limits

    func testTheRedirectLimitTheBodyLimitAndTheDeadlineHoldAcrossResends() {
        for kind in [ResendKind.data, .uploadFile, .download, .stream, .uploadStreamedMultipart] {
            // Given a 307 to itself, forever, and a limit of 2 redirects
            let loop = "/resend-loop/\(UUID().uuidString)"
            let hits = Recorder<Int>()
            let payload = payload
            server.route(loop) { request in
                hits.append(request.body == payload || kind.isUpload ? 1 : 0)
                return LoopbackResponse(status: 307, headers: ["Location": loop])
            }
            let limited = run(kind, Post(url: server.url(loop)), policies: RequestPolicies(redirectPolicy: .follow.maximumRedirects(2)))
            XCTAssertEqual(limited.error as? RedirectError, .tooManyRedirects(limit: 2), "\(kind)")
            XCTAssertEqual(hits.count, 3, "\(kind): the first request and two redirects")
            XCTAssertEqual(hits.values.reduce(0, +), 3, "\(kind): each with its body")

            // Given a landing whose answer is larger than the body limit
            let (big, _) = recording(LoopbackResponse(body: payload.prefix(5000)))
            let (first, _) = hop(307, to: big)
            var post = Post(url: server.url(first))
            post.limits = TransferLimits(maximumBodySize: 1000, maximumDownloadSize: 1000)
            let tooLarge = run(kind, post)
            XCTAssertEqual(tooLarge.error as? TransferLimitError, .responseTooLarge(limit: 1000), "\(kind): \(String(describing: tooLarge.error))")

            // Given a 307 to itself whose every hop takes 400 ms, and a deadline of one second
            let slow = "/resend-slow/\(UUID().uuidString)"
            server.route(slow) { _ in LoopbackResponse(status: 307, headers: ["Location": slow], delayMilliseconds: 400) }
            post = Post(url: server.url(slow))
            post.limits = TransferLimits(deadline: 1)
            let late = run(kind, post, policies: RequestPolicies(redirectPolicy: .follow.maximumRedirects(16)))
            XCTAssertEqual(late.error as? TransferLimitError, .deadlineExceeded(1), "\(kind): \(String(describing: late.error))")
        }
    }

    /// A 307's own body is not the answer: URLSession skips it when it follows a redirect, so a GET through the same
    /// 307 succeeds for every kind (checked). Fails: the resent 307's body is read whole first, held to the answer's
    /// limits (`responseTooLarge`) and, for a stream, to the 64 KiB of an error body (which ends the attempt with
    /// the 307 as an invalid status, without the resend).
    func testA307sOwnBodyIsNotHeldToTheAnswersLimits() {
        for kind in [ResendKind.data, .download, .stream] {
            for limited in [true, false] {
                // Given a 307 with a 100 000-byte body of its own, and a body limit of 70 000 bytes or none
                let (landing, landed) = recording()
                let path = "/resend-bigmove/\(UUID().uuidString)"
                let big = Data(repeating: 0x41, count: 100_000)
                server.route(path) { _ in LoopbackResponse(status: 307, headers: ["Location": landing], body: big) }
                var post = Post(url: server.url(path))
                post.limits = limited ? TransferLimits(maximumBodySize: 70_000, maximumDownloadSize: 70_000) : nil

                // When the kind POSTs there
                let run = run(kind, post)

                // Then the body went to the landing, whose answer is the response
                XCTAssertEqual(run.bytes, Data(resendRecipe.utf8), "\(kind) limited: \(limited): \(String(describing: run.error))")
                XCTAssertEqual(landed.count, 1, "\(kind) limited: \(limited)")
            }
        }
    }

    func testA303AfterAResentRedirectFetchesTheLandingWithoutTheBody() {
        // Given a 307 to a 303 to a landing
        let (landing, landed) = recording()
        let (second, seconds) = hop(303, to: landing)
        let (first, _) = hop(307, to: second)

        // When a POST follows them
        let run = run(.data, Post(url: server.url(first)))

        // Then the 303's hop got the body, and the landing a GET without one
        XCTAssertEqual(run.bytes, Data(resendRecipe.utf8), String(describing: run.error))
        XCTAssertTrue(landedWhole(seconds.values.first, .data))
        XCTAssertEqual(landed.values.map(\.method), ["GET"])
        XCTAssertEqual(landed.values.first?.body, Data())
    }

    // MARK: - Cancellation

    func testCancellingInA307ChainCompletesOnceWithCancellationAndTheChainStops() {
        let kinds: [ResendKind] = [.data, .uploadData, .uploadStreamedMultipart, .download, .stream, .noContent]
        for round in 0..<36 {
            let kind = kinds[round % kinds.count]
            // Given a 307 to itself, whose later hops take a moment, counting the requests it gets
            let loop = "/resend-cancel/\(UUID().uuidString)"
            let hits = Recorder<Int>()
            server.route(loop) { _ in
                hits.append(1)
                return LoopbackResponse(status: 307, headers: ["Location": loop], delayMilliseconds: hits.count > 2 ? 100 : 0)
            }
            let monitor = ResendMonitor()
            let queue = OperationQueue()
            queue.requestPolicies = RequestPolicies(monitors: [monitor], redirectPolicy: .follow.maximumRedirects(16))
            // When the operation is cancelled from another thread as soon as the first redirect is seen, after a
            // pause that varies from round to round
            let run = ResendRun()
            let pause = UInt32((round * 397) % 3000)
            monitor.onRedirect.value = {
                DispatchQueue.global().async {
                    usleep(pause); run.operation.cancel()
                }
            }
            _ = start(kind, Post(url: server.url(loop)), on: queue, run: run)
            finish(run, "\(kind) round \(round)")

            // Then it completed once with the cancellation, the monitors saw it finish once, and the route gets no more
            // requests than the tasks made
            XCTAssertTrue(run.error?.isRequestCancellation == true, "\(kind) round \(round): \(String(describing: run.error))")
            XCTAssertEqual(monitor.summaries.count, 1, "\(kind) round \(round)")
            let seen = hits.count
            XCTAssertLessThanOrEqual(seen, run.tasks.count, "\(kind) round \(round)")
            _ = self.run(.data, Post(url: server.url(recording().0)))  // one more round trip to the server
            XCTAssertEqual(hits.count, seen, "\(kind) round \(round): a request after the cancellation")
            XCTAssertLessThan(seen, 8, "\(kind) round \(round)")
        }
    }

    // MARK: - Origins, retries, the authenticator

    func testACrossOriginChainDropsTheCredentialsButKeepsTheBody() throws {
        let other = try LoopbackServer()
        defer { other.stop() }
        for kind in [ResendKind.data, .uploadMultipart, .download, .stream] {
            // Given a 307 to another origin, whose 308 comes back to the first origin's landing
            let (landing, landed) = recording()
            let (away, aways) = hop(308, to: server.url(landing).absoluteString, on: other)
            let (first, firsts) = hop(307, to: other.url(away).absoluteString)
            var post = Post(url: server.url(first))
            post.headers = ["Authorization": "Bearer SECRET", "Cookie": "s=1", "X-Api-Key": "KEY", "X-Trace": "t1"]

            // When the kind POSTs with credentials, X-Api-Key being sensitive
            let run = run(kind, post, policies: RequestPolicies(sensitiveHeaders: ["X-Api-Key"]))

            // Then every hop got the body; nothing sensitive left the first origin, not even back to it
            XCTAssertNotNil(run.bytes, "\(kind): \(String(describing: run.error))")
            XCTAssertEqual(firsts.values.first?.headers["authorization"], "Bearer SECRET", "\(kind)")
            for (name, seen) in [("away", aways), ("landing", landed)] {
                XCTAssertTrue(landedWhole(seen.values.first, kind), "\(kind) \(name)")
                let headers = seen.values.first?.headers ?? [:]
                XCTAssertNil(headers["authorization"] ?? headers["x-api-key"], "\(kind) \(name): \(headers)")
                // The request's own Cookie header is gone; the session's cookie store may add cookies of its own for the
                // host (cookies are scoped by host, not port, and earlier tests store some).
                XCTAssertFalse(headers["cookie"]?.contains("s=1") ?? false, "\(kind) \(name): \(headers)")
                XCTAssertEqual(headers["x-trace"], "t1", "\(kind) \(name)")
            }
        }
    }

    func testARetryAfterAResentRedirectStartsAgainFromTheOriginalURLWithTheBody() {
        for kind in [ResendKind.data, .uploadFile, .uploadMultipart, .download] {
            // Given a 307 to a landing that answers 503 once, then the recipe; a retry policy for POST
            let landed = Recorder<LoopbackRequest>()
            let landing = "/resend-flaky/\(UUID().uuidString)"
            server.route(landing) { request in
                landed.append(request)
                return landed.count == 1 ? LoopbackResponse(status: 503) : .json(resendRecipe)
            }
            let (first, firsts) = hop(307, to: landing)
            let retry = RetryPolicy(maxAttempts: 3, baseDelay: 0, jitter: 0, retryingOnly: ["POST"])
            let monitor = ResendMonitor()

            // When the kind POSTs there
            let run = run(kind, Post(url: server.url(first)), policies: RequestPolicies(retryPolicy: retry, monitors: [monitor]))

            // Then the second attempt went to the original URL again, and each request carried the body
            XCTAssertEqual(run.bytes, Data(resendRecipe.utf8), "\(kind): \(String(describing: run.error))")
            XCTAssertEqual([firsts.count, landed.count], [2, 2], "\(kind)")
            XCTAssertTrue((firsts.values + landed.values).allSatisfy { landedWhole($0, kind) }, "\(kind)")
            XCTAssertEqual(monitor.summaries.values.first?.attempts, 2, "\(kind)")
        }
    }

    func testATokenRefreshAfterAResentRedirectSendsTheBodyAgainWithTheNewToken() {
        for kind in [ResendKind.data, .uploadData, .uploadStreamedMultipart, .stream] {
            // Given a 307 to a landing that wants the token "new", and an authenticator holding "old"
            let landed = Recorder<LoopbackRequest>()
            let landing = "/resend-auth/\(UUID().uuidString)"
            server.route(landing) { request in
                landed.append(request)
                return request.headers["authorization"] == "Bearer new" ? .json(resendRecipe) : LoopbackResponse(status: 401)
            }
            let (first, firsts) = hop(307, to: landing)
            let refreshes = Recorder<String?>()
            let authenticator = TokenAuthenticator(token: "old", minimumRefreshInterval: 0) { rejected, completion in
                refreshes.append(rejected)
                completion(.success("new"))
            }

            // When the kind POSTs there
            let run = run(kind, Post(url: server.url(first)), policies: RequestPolicies(authenticator: authenticator))

            // Then one refresh, and the request went again from the start with the body and the new token
            XCTAssertEqual(run.bytes, Data(resendRecipe.utf8), "\(kind): \(String(describing: run.error))")
            XCTAssertEqual(refreshes.values, ["old"], "\(kind)")
            XCTAssertEqual(landed.values.map { $0.headers["authorization"] }, ["Bearer old", "Bearer new"], "\(kind)")
            XCTAssertEqual(firsts.count, 2, "\(kind)")
            XCTAssertTrue((firsts.values + landed.values).allSatisfy { landedWhole($0, kind) }, "\(kind)")
        }
    }

    // MARK: - The response cache

    func testTheResponseCacheStoresNothingForAPOSTsRedirectedAnswer() {
        // Given a cache on the queue, and a landing whose answers may be stored
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let storable = LoopbackResponse(headers: ["Cache-Control": "max-age=600", "Content-Type": "application/json"], body: Data(resendRecipe.utf8))
        let (landing, landed) = recording(storable)
        let (first, firsts) = hop(307, to: landing)
        let policies = RequestPolicies(responseCache: cache)

        // When a POST follows the 307, and then both URLs are fetched with GET
        let posted = run(.data, Post(url: server.url(first)), policies: policies)
        let queue = OperationQueue()
        queue.requestPolicies = policies
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(GetData(url: server.url(landing)), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()

        // Then the POST's answer was not stored: the GET went to the network
        XCTAssertEqual(posted.bytes, Data(resendRecipe.utf8))
        XCTAssertEqual(landed.values.map(\.method), ["POST", "GET"])
        XCTAssertEqual(firsts.count, 1)
        XCTAssertEqual(results.values.first?.success, Data(resendRecipe.utf8))
    }

    /// RFC 9111 §4.4: a successful POST invalidates what is stored for its target URI. Fails: `run.sentRequest` is
    /// the resent request, so the landing's URL is invalidated, not the URL the POST was made to (before the resend,
    /// URLSession followed and the target's entry went).
    func testAPOSTResentAfterA307InvalidatesItsTargetURI() {
        // Given a URL whose GET answer is stored, and whose POST answers 307
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let (landing, _) = recording()
        let target = "/resend-target/\(UUID().uuidString)"
        let gets = Recorder<Int>()
        server.route(target) { request in
            guard request.method == "GET" else { return LoopbackResponse(status: 307, headers: ["Location": landing]) }
            gets.append(1)
            return LoopbackResponse(headers: ["Cache-Control": "max-age=600", "Content-Type": "application/json"], body: Data(resendRecipe.utf8))
        }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(responseCache: cache)
        let get: () -> Void = {
            queue.addRequest(GetData(url: self.server.url(target)), session: testSession) { _ in }
            queue.waitUntilAllOperationsAreFinished()
        }
        get()
        get()
        XCTAssertEqual(gets.count, 1, "the second GET is served from the cache")

        // When a POST to it is resent to the landing, and then it is fetched again
        let posted = run(.data, Post(url: server.url(target)), policies: RequestPolicies(responseCache: cache))
        get()

        // Then the stored answer was invalidated: the GET went to the network
        XCTAssertNotNil(posted.bytes)
        XCTAssertEqual(gets.count, 2)
    }

    // MARK: - The caller's session delegate

    func testACallerDelegateThatRedirectsA307ElsewhereGetsTheBodySentThereOnce() {
        for kind in [ResendKind.data, .uploadFile, .uploadMultipart, .download, .stream] {
            // Given a delegate that sends every redirect to its own landing
            let (mine, mines) = recording()
            let (theirs, theirLanding) = recording()
            let delegate = Rerouter(server.url(mine))
            let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
            defer { session.finishTasksAndInvalidate() }
            let (first, _) = hop(307, to: theirs)

            // When the kind POSTs to a URL that answers 307
            let run = run(kind, Post(url: server.url(first)), session: session)

            // Then the body went once, whole, to the delegate's URL, and not to the 307's
            XCTAssertEqual(run.bytes, Data(resendRecipe.utf8), "\(kind): \(String(describing: run.error))")
            XCTAssertEqual(delegate.onMain.count, 1, "\(kind)")
            XCTAssertEqual([mines.count, theirLanding.count], [1, 0], "\(kind)")
            XCTAssertTrue(landedWhole(mines.values.first, kind), "\(kind)")
        }
    }

    func testACallerDelegateOnTheMainQueueAnswersResentRedirects() {
        for kind in [ResendKind.data, .uploadStreamedMultipart, .download, .noContent] {
            // Given a delegate on the main queue that lets redirects through
            let delegate = Rerouter(nil)
            let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: .main)
            defer { session.finishTasksAndInvalidate() }
            let (landing, landed) = recording(kind == .noContent ? LoopbackResponse(status: 204) : .json(resendRecipe))
            let (second, _) = hop(308, to: landing)
            let (first, _) = hop(307, to: second)

            // When the kind POSTs through two redirects while this thread serves the main run loop
            let run = run(kind, Post(url: server.url(first)), session: session)

            // Then the delegate answered both, on the main thread, and the body landed whole
            XCTAssertNotNil(run.bytes, "\(kind): \(String(describing: run.error))")
            XCTAssertEqual(delegate.onMain.values, [true, true], "\(kind)")
            XCTAssertTrue(landedWhole(landed.values.first, kind), "\(kind)")
        }
    }
}
