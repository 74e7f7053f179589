#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Cookies across a redirect on libcurl (`REQUESTS_TRANSPORT=curl`): the request after a redirect carries the cookies
/// stored for its URL by then, including one the 3xx itself set. (URLSession on Linux sends the first request's cookies
/// again: measured here, `step=1`.)
final class RedirectCookieTests: XCTestCase {
    func testTheRequestAfterARedirectCarriesTheCookieTheRedirectSet() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/login") { _ in
            LoopbackResponse(status: 302, headers: ["Location": "/home", "Set-Cookie": "step=2; Path=/"])
        }
        server.route("/home") { request in .text(request.headers["cookie"] ?? "no cookie") }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let cookies = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: UUID().uuidString)
        configuration.httpCookieStorage = cookies
        cookies.setCookie(
            try XCTUnwrap(
                HTTPCookie(properties: [
                    .name: "step", .value: "1", .domain: try XCTUnwrap(server.baseURL.host), .path: "/",
                ])))
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        try XCTSkipUnless(isOnCurl(session), "only libcurl's transfers are checked here (see the type's comment)")
        let done = expectation(description: "completed")
        let body = Recorder<String>()
        OperationQueue().addRequest(GetData(url: server.url("/login")), session: session) { result in
            body.append((try? result.get()).map { String(decoding: $0, as: UTF8.self) } ?? "failed: \(result)")
            done.fulfill()
        }
        wait(for: [done], timeout: 30)
        XCTAssertEqual(body.values, ["step=2"])
    }
}
