#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Answers every task-level challenge with `disposition` and `credential`, and counts the challenges.
private final class ChallengeAnswerer: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private let disposition: URLSession.AuthChallengeDisposition
    private let credential: URLCredential?
    private var received = 0
    init(_ disposition: URLSession.AuthChallengeDisposition, _ credential: URLCredential?) {
        self.disposition = disposition
        self.credential = credential
    }
    var challenges: Int { lock.withLock { received } }
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        lock.withLock { received += 1 }
        completionHandler(disposition, credential)
    }
}

/// HTTP authentication challenges (`WWW-Authenticate: Basic`) end the same way on every platform: with the 401 when
/// nobody has a credential, with the response to the credential when somebody has one. On Linux, Foundation alone
/// hangs, crashes or cancels in some of these cases (see `TransferSession`).
final class HTTPAuthenticationChallengeTests: XCTestCase {
    private let server = TestServer.shared
    private let goodCredential = URLCredential(user: "ada", password: "secret", persistence: .forSession)

    /// A route that answers 200 "welcome" to `ada:secret`, and 401 with a Basic challenge for `realm` otherwise.
    private func protectedRoute(realm: String) -> URL {
        let path = "/basic/\(UUID().uuidString)"
        let expected = "Basic " + Data("ada:secret".utf8).base64EncodedString()
        server.route(path) { request in
            guard request.headers["authorization"] == expected else {
                return LoopbackResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="\#(realm)""#], body: Data("who are you".utf8))
            }
            return LoopbackResponse(status: 200, body: Data("welcome".utf8))
        }
        return server.url(path)
    }

    /// Runs a GET on `session`, with a deadline so that a hang fails as a deadline error instead of stalling the suite.
    private func get(_ url: URL, on session: URLSession) -> Result<Data, Error>? {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(deadline: 20))
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(GetData(url: url), session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1)
        return results.values.first
    }

    func testAChallengeNobodyCanAnswerEndsWithThe401() {
        // Given a route that asks for Basic credentials, and a session that has none
        let url = protectedRoute(realm: UUID().uuidString)

        // When it is requested
        let result = get(url, on: testSession)

        // Then the request fails with the 401, at once (on Linux, Foundation alone waited forever)
        XCTAssertEqual((result?.failure as? RequestQueueError)?.statusCode, 401, "\(String(describing: result))")
    }

    func testTheStoredCredentialIsSentOnceAndAWrongOneEndsWithThe401() throws {
        // Given the session's credential storage with the right credential for one route's realm, and a wrong one
        // for another's (each route has a realm of its own, so that nothing stored for one can answer the other)
        // (A session of its own: a credential left in the shared test session's storage would turn the response cache
        // off for the test server in every later test, as it must for a session whose storage may add credentials.)
        let storage = URLCredentialStorage()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.urlCredentialStorage = storage
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let wrongCredential = URLCredential(user: "ada", password: "guess", persistence: .forSession)
        var urls: [URL] = []
        for credential in [goodCredential, wrongCredential] {
            let realm = UUID().uuidString
            let url = protectedRoute(realm: realm)
            let space = URLProtectionSpace(
                host: try XCTUnwrap(url.host), port: try XCTUnwrap(url.port), protocol: "http", realm: realm,
                authenticationMethod: NSURLAuthenticationMethodHTTPBasic
            )
            storage.setDefaultCredential(credential, for: space)
            addTeardownBlock { storage.remove(credential, for: space) }
            urls.append(url)
        }

        // When each is requested
        let accepted = get(urls[0], on: session)
        let refused = get(urls[1], on: session)

        // Then the right one gets in, and the wrong one ends with the 401 instead of being sent again and again
        XCTAssertEqual(try accepted?.get(), Data("welcome".utf8))
        XCTAssertEqual((refused?.failure as? RequestQueueError)?.statusCode, 401, "\(String(describing: refused))")
    }

    func testCredentialsInTheURLAreUsed() throws {
        // Given a protected route, with the user and password in its URL
        var components = try XCTUnwrap(URLComponents(url: protectedRoute(realm: UUID().uuidString), resolvingAgainstBaseURL: false))
        components.user = "ada"
        components.password = "secret"

        // When it is requested
        let result = get(try XCTUnwrap(components.url), on: testSession)

        // Then they get in
        XCTAssertEqual(try result?.get(), Data("welcome".utf8))
    }

    func testTheCallersDelegateAnswersTheChallenge() {
        // Given sessions whose delegate answers with a credential, without one, or by rejecting the protection space
        // (a route each: a credential that got in is kept for its realm, as on Apple platforms)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let answers: [(String, ChallengeAnswerer, Int)] = [
            ("a credential", ChallengeAnswerer(.useCredential, goodCredential), 200),
            ("useCredential without a credential", ChallengeAnswerer(.useCredential, nil), 401),
            ("reject the protection space", ChallengeAnswerer(.rejectProtectionSpace, nil), 401),
            ("default handling", ChallengeAnswerer(.performDefaultHandling, nil), 401),
        ]
        for (name, answerer, expected) in answers {
            let session = URLSession(configuration: configuration, delegate: answerer, delegateQueue: nil)
            defer { session.finishTasksAndInvalidate() }

            // When the route is requested
            let result = get(protectedRoute(realm: UUID().uuidString), on: session)

            // Then the delegate was asked, and the request ends with the response its answer leads to
            XCTAssertGreaterThanOrEqual(answerer.challenges, 1, name)
            switch result {
            case .success(let body)?:
                XCTAssertEqual(expected, 200, name)
                XCTAssertEqual(body, Data("welcome".utf8), name)
            case .failure(let error)?:
                XCTAssertEqual((error as? RequestQueueError)?.statusCode, expected, "\(name): \(error)")
            case nil:
                XCTFail("no result: \(name)")
            }
        }
    }
}
