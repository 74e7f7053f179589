#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// A session delegate as an app writes one: it pins (answers every challenge itself), may have a say on redirects,
/// and records on which thread and with which session it was asked.
private final class AppDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var asked: [(method: String, session: URLSession)] = []
    let disposition: URLSession.AuthChallengeDisposition
    let credential: URLCredential?
    /// What a redirect becomes: `nil` refuses it.
    let redirect: (@Sendable (URLRequest) -> URLRequest?)?

    init(
        _ disposition: URLSession.AuthChallengeDisposition = .performDefaultHandling, _ credential: URLCredential? = nil,
        redirect: (@Sendable (URLRequest) -> URLRequest?)? = nil
    ) {
        (self.disposition, self.credential, self.redirect) = (disposition, credential, redirect)
    }

    var challenges: [String] { lock.withLock { asked.map(\.method).filter { $0 != "redirect" } } }
    var redirects: Int { lock.withLock { asked.filter { $0.method == "redirect" }.count } }
    var sessions: [URLSession] { lock.withLock { asked.map(\.session) } }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        lock.withLock { asked.append((challenge.protectionSpace.authenticationMethod, session)) }
        completionHandler(disposition, credential)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        lock.withLock { asked.append(("redirect", session)) }
        completionHandler(redirect.map { $0(request) } ?? request)
    }
}

/// Every task runs on a session Requests derives from the caller's, on every platform and whatever the caller's
/// delegate queue (serial, concurrent, main). What the caller's session delegate would decide without Requests
/// (challenges, so certificate pinning; a redirect Requests allowed) is still asked of it, on its queue, and the
/// library's own work never needs that queue.
final class CallerDelegateTests: XCTestCase {
    private let server = TestServer.shared
    private let credential = URLCredential(user: "ada", password: "secret", persistence: .forSession)

    private func session(_ delegate: URLSessionDelegate?, queue: OperationQueue?) -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        return URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
    }

    /// A route that answers 200 "welcome" to `ada:secret`, and 401 with a Basic challenge otherwise.
    private func protectedRoute() -> URL {
        let path = TestServer.freshPath()
        let expected = "Basic " + Data("ada:secret".utf8).base64EncodedString()
        server.route(path) { request in
            guard request.headers["authorization"] == expected else {
                return LoopbackResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="\#(path)""#], body: Data())
            }
            return LoopbackResponse(status: 200, body: Data("welcome".utf8))
        }
        return server.url(path)
    }

    /// Runs a GET of `url` on `session`, waiting with the main queue served, so that a delegate on the main queue
    /// can answer.
    private func get(_ url: URL, on session: URLSession, policies: RequestPolicies = RequestPolicies()) -> Result<Data, Error>? {
        let queue = OperationQueue()
        queue.requestPolicies = policies
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(GetData(url: url), session: session) { results.append($0) }
        waitUntil(timeout: 120, "the request completes") { results.count > 0 }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1)
        return results.values.first
    }

    func testThePinningDelegateIsAskedAboutEveryChallengeWhateverItsQueue() {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let queues: [(String, OperationQueue?)] = [
            ("a serial queue", serial),
            ("a concurrent queue", OperationQueue()),
            ("the session's own queue", nil),
            ("the main queue", .main),
        ]
        for (name, queue) in queues {
            // Given an app's delegate that answers challenges itself, on a session with that delegate queue
            let delegate = AppDelegate(.useCredential, credential)
            let session = session(delegate, queue: queue)
            defer { session.finishTasksAndInvalidate() }

            // When a request meets a challenge
            let result = get(protectedRoute(), on: session)

            // Then the delegate was asked, with its own session, and its answer decided the outcome
            XCTAssertEqual(delegate.challenges, [NSURLAuthenticationMethodHTTPBasic], name)
            XCTAssertTrue(delegate.sessions.allSatisfy { $0 === session }, name)
            XCTAssertEqual(try result?.get(), Data("welcome".utf8), name)
        }
    }

    func testARejectedProtectionSpaceGetsNoStoredCredential() throws {
        // Given a session whose credential storage holds the right credential for the route's realm, and whose
        // delegate rejects the protection space
        let url = protectedRoute()
        let storage = URLCredentialStorage()
        let space = URLProtectionSpace(
            host: try XCTUnwrap(url.host), port: try XCTUnwrap(url.port), protocol: "http", realm: url.path,
            authenticationMethod: NSURLAuthenticationMethodHTTPBasic
        )
        storage.setDefaultCredential(credential, for: space)
        addTeardownBlock { [credential] in storage.remove(credential, for: space) }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.urlCredentialStorage = storage
        let rejecting = AppDelegate(.rejectProtectionSpace)
        let session = URLSession(configuration: configuration, delegate: rejecting, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let accepting = AppDelegate(.performDefaultHandling)
        let control = URLSession(configuration: configuration, delegate: accepting, delegateQueue: nil)
        defer { control.finishTasksAndInvalidate() }

        // When the route is requested with each
        let rejected = get(url, on: session)
        let defaulted = get(url, on: control)

        // Then the rejection ends with the 401, while default handling uses the stored credential
        XCTAssertEqual(rejecting.challenges, [NSURLAuthenticationMethodHTTPBasic])
        XCTAssertEqual((rejected?.failure as? RequestQueueError)?.statusCode, 401)
        XCTAssertEqual(try defaulted?.get(), Data("welcome".utf8))
    }

    func testTheDelegateHasTheLastWordOnARedirectRequestsAllowed() throws {
        // Given a delegate that refuses every redirect, as an app may
        let refusing = AppDelegate(redirect: { _ in nil })
        let session = session(refusing, queue: nil)
        defer { session.finishTasksAndInvalidate() }
        let landing = TestServer.freshPath()
        let landed = Recorder<LoopbackRequest>()
        server.route(landing) { request in
            landed.append(request)
            return .json(#"{}"#)
        }

        // When a request is redirected
        let result = get(try XCTUnwrap(URL(string: server.url("/hostile/redirect").absoluteString + "?to=" + landing)), on: session)

        // Then the delegate was asked, the redirect was not followed, and the request ends with the 302
        XCTAssertEqual(refusing.redirects, 1)
        XCTAssertEqual(landed.count, 0)
        XCTAssertEqual((result?.failure as? RequestQueueError)?.statusCode, 302)
    }

    func testWhatTheDelegateRedirectsToIsHeldToTheSameRules() throws {
        // Given another origin that records what it receives, and a delegate that sends every redirect there with
        // a credential of its own
        let other = try LoopbackServer()
        defer { other.stop() }
        let received = Recorder<LoopbackRequest>()
        other.route("/elsewhere") { request in
            received.append(request)
            return .json(#"{}"#)
        }
        let elsewhere = other.url("/elsewhere")
        let delegate = AppDelegate(redirect: { request in
            var changed = request
            changed.url = elsewhere
            changed.setValue("Bearer SECRET", forHTTPHeaderField: "Authorization")
            return changed
        })
        let session = session(delegate, queue: nil)
        defer { session.finishTasksAndInvalidate() }

        // When a request is redirected on its own origin, and then to a file by the delegate
        let result = get(server.url("/hostile/redirect-chain/1"), on: session)
        let toFile = AppDelegate(redirect: { request in
            var changed = request
            changed.url = URL(fileURLWithPath: "/etc/passwd")
            return changed
        })
        let fileSession = self.session(toFile, queue: nil)
        defer { fileSession.finishTasksAndInvalidate() }
        let fileResult = get(server.url("/hostile/redirect-chain/1"), on: fileSession)

        // Then the other origin got the request without the credential, and the file was never read
        XCTAssertNotNil(try result?.get())
        XCTAssertEqual(received.count, 1)
        XCTAssertNil(received.values.first?.headers["authorization"])
        XCTAssertEqual(toFile.redirects, 1)
        XCTAssertNotNil(fileResult?.failure, "a redirect to a file is not followed")
        XCTAssertNotEqual((try? fileResult?.get()).flatMap { String(decoding: $0, as: UTF8.self) }?.contains("root:"), true)
    }

    func testASessionOnTheMainQueueNeverNeedsTheMainThreadForTheLibrarysWork() throws {
        // Given a session whose delegate queue is the main queue, and a monitor that records where the library's
        // work runs (the redirect ruling and the response)
        let session = session(nil, queue: .main)
        defer { session.finishTasksAndInvalidate() }
        let threads = Recorder<Bool>()
        let monitor = ClosureEventMonitor(
            redirect: { threads.append(Thread.isMainThread) }, receive: { threads.append(Thread.isMainThread) }
        )
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [monitor])
        let results = Recorder<Result<Data, Error>>()

        // When a redirected request runs while the main thread is blocked waiting for it
        queue.addRequest(GetData(url: server.url("/hostile/redirect-chain/2")), session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()

        // Then it completed, and nothing of it ran on the main thread
        XCTAssertEqual(results.count, 1)
        XCTAssertNotNil(try results.values.first?.get())
        XCTAssertEqual(threads.count, 4, "three redirects and one response")
        XCTAssertFalse(threads.values.contains(true))
    }
}

/// Records two monitor callbacks.
private struct ClosureEventMonitor: RequestEventMonitor {
    let redirect: @Sendable () -> Void
    let receive: @Sendable () -> Void
    func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest) { redirect() }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) { receive() }
}
