#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

final class RedirectCredentialTests: XCTestCase {
    /// A redirect from the test server to `host` on another server, and what that server received.
    private func redirect(toHost host: String, sameServer: Bool = false) throws -> (url: URL, received: Recorder<LoopbackRequest>, other: LoopbackServer) {
        let other = try LoopbackServer()
        let received = Recorder<LoopbackRequest>()
        let landing = "/landing/\(UUID().uuidString)"
        let target: LoopbackServer = sameServer ? TestServer.shared : other
        target.route(landing) { request in
            received.append(request)
            return .text("ok")
        }
        let from = "/redirect/\(UUID().uuidString)"
        let location = "http://\(host):\(target.port)\(landing)"
        TestServer.shared.route(from) { _ in LoopbackResponse(status: 302, headers: ["Location": location]) }
        return (TestServer.url(from), received, other)
    }

    private func send(_ url: URL, policies: RequestPolicies = RequestPolicies()) -> Result<Data, Error>? {
        var request = URLRequest(url: url)
        request.setValue("Bearer SECRET", forHTTPHeaderField: "Authorization")
        request.setValue("session=SECRET", forHTTPHeaderField: "Cookie")
        request.setValue("kept", forHTTPHeaderField: "X-Other")
        return sendPrebuilt(PrebuiltRequest(urlRequest: request), policies: policies)
    }

    func testARedirectToAnotherHostDoesNotForwardCredentials() throws {
        // Given a 302 from 127.0.0.1 to localhost on another port
        let (url, received, other) = try redirect(toHost: "localhost")
        defer { other.stop() }
        // When a request with Authorization and Cookie follows it
        let result = send(url)
        // Then the other host got the request without the credentials (URLSession on Linux would forward them)
        XCTAssertNotNil(result?.success)
        let headers = try XCTUnwrap(received.values.first?.headers)
        XCTAssertNil(headers["authorization"])
        XCTAssertNil(headers["cookie"])
        XCTAssertEqual(headers["x-other"], "kept")
    }

    func testARedirectOnTheSameOriginKeepsThem() throws {
        let (url, received, other) = try redirect(toHost: "127.0.0.1", sameServer: true)
        defer { other.stop() }
        XCTAssertNotNil(send(url)?.success)
        XCTAssertEqual(received.values.first?.headers["authorization"], "Bearer SECRET")
    }

    func testACredentialedRequestCompletesOffTheSessionsDelegateQueueLikeAnyOther() {
        var request = URLRequest(url: TestServer.url("/json"))
        request.setValue("Bearer SECRET", forHTTPHeaderField: "Authorization")
        let queue = OperationQueue()
        let completedOnDelegateQueue = Recorder<Bool>()
        queue.addRequest(PrebuiltRequest(urlRequest: request), session: testSession) { _ in
            completedOnDelegateQueue.append(OperationQueue.current === testSession.delegateQueue)
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(completedOnDelegateQueue.values, [false])
    }

    func testATokenFromTheAuthenticatorIsNotForwardedEither() throws {
        let (url, received, other) = try redirect(toHost: "localhost")
        defer { other.stop() }
        let authenticator = TokenAuthenticator(token: "SECRET") { _, completion in completion(.success("NEW")) }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: authenticator)
        let operation = queue.addRequest(GetData(url: url), session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(operation.result?.success)
        XCTAssertNil(received.values.first?.headers["authorization"])
    }
}

/// The free `send` of the header-safety tests, under a name a method called `send` does not hide.
private func sendPrebuilt(_ request: PrebuiltRequest, policies: RequestPolicies) -> Result<Data, Error>? {
    send(request, policies: policies)
}
