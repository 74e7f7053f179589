#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// The session's `connectionProxyDictionary` on libcurl (`REQUESTS_TRANSPORT=curl`): an enabled HTTP proxy carries
/// the request (URLSession on Linux ignores the dictionary), and a dictionary without one sends it direct.
final class CurlProxyTests: XCTestCase {
    private func session(proxy: [AnyHashable: Any]) throws -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.connectionProxyDictionary = proxy
        let session = URLSession(configuration: configuration)
        addTeardownBlock { session.finishTasksAndInvalidate() }
        try XCTSkipUnless(isOnCurl(session), "URLSession on Linux does not use the dictionary")
        return session
    }

    private func body(of url: URL, on session: URLSession) -> String {
        let done = expectation(description: "completed")
        let body = Recorder<String>()
        OperationQueue().addRequest(GetData(url: url), session: session) { result in
            body.append((try? result.get()).map { String(decoding: $0, as: UTF8.self) } ?? "failed: \(result)")
            done.fulfill()
        }
        wait(for: [done], timeout: 30)
        return body.values.first ?? "no completion"
    }

    func testAnEnabledHTTPProxyCarriesTheRequest() throws {
        // Given a loopback server that answers with the request's target host, named as the session's HTTP proxy
        let proxy = try LoopbackServer()
        defer { proxy.stop() }
        proxy.route("/where") { request in .text("via proxy to \(request.headers["host"] ?? "?")") }
        let port = try XCTUnwrap(proxy.baseURL.port)
        let session = try session(proxy: ["HTTPEnable": 1, "HTTPProxy": "127.0.0.1", "HTTPPort": port])
        // When a URL whose host does not resolve is requested
        let answer = body(of: try XCTUnwrap(URL(string: "http://requests-proxy-test.invalid/where")), on: session)
        // Then the proxy got it, for that host
        XCTAssertEqual(answer, "via proxy to requests-proxy-test.invalid")
    }

    func testADictionaryWithoutAnEnabledProxyGoesDirect() throws {
        // Given a dictionary whose HTTP proxy is disabled (and points nowhere)
        let session = try session(proxy: ["HTTPEnable": 0, "HTTPProxy": "127.0.0.1", "HTTPPort": 9])
        // Then a request goes straight to the server
        XCTAssertEqual(body(of: TestServer.shared.url("/json"), on: session).prefix(1), "{")
    }
}
