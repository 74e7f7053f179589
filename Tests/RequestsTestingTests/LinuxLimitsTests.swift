#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import RequestsTesting
import XCTest

/// Pins what a URLProtocol stub can and cannot do, as TestingWithRequestsTesting.md describes. If Foundation changes,
/// these fail and the docs need updating.
final class LinuxLimitsTests: XCTestCase {
    func testTheBodyOfADataTaskIsRecordedAndMatchable() {
        // Given a stub that matches on the body, and one for everything else
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/login", .status(403))
        stubs.stub(where: { $0.httpBody == Data("user=ada".utf8) }, .status(204))
        // When a body is sent as httpBody, and another as a stream
        var request = URLRequest(url: api.appendingPathComponent("login"))
        request.httpMethod = "POST"
        request.httpBody = Data("user=ada".utf8)
        let plain = fetch(request, on: session)
        request.httpBodyStream = InputStream(data: Data("user=bob".utf8))
        let streamed = fetch(request, on: session)
        // Then both bodies are recorded, and the predicate saw them
        XCTAssertEqual(stubs.requests.map(\.body), [Data("user=ada".utf8), Data("user=bob".utf8)])
        XCTAssertEqual(plain?.status, 204)
        XCTAssertEqual(streamed?.status, 403)
    }

    func testARedirectIsDeliveredNotFollowed() {
        // Given a 302 to a stubbed URL
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/old", StubResponse(status: 302, headers: ["Location": "https://api.example.com/new"]))
        stubs.stub(path: "/new", .text("new"))
        // When the old URL is requested
        let delivery = fetch("/old", on: session)
        // Then the 302 itself arrives, and the new URL was never requested
        XCTAssertEqual(delivery?.status, 302)
        XCTAssertEqual(stubs.requests.map(\.url.path), ["/old"])
    }

    #if canImport(FoundationNetworking)
    func testOnLinuxAnUploadTaskBodyNeverReachesTheStub() {
        // Given a stub
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/upload", .status(201))
        var request = URLRequest(url: api.appendingPathComponent("upload"))
        request.httpMethod = "POST"
        // When an upload task sends a body
        let done = expectation(description: "uploaded")
        let statuses = Recorder<Int>()
        session.uploadTask(with: request, from: Data("payload".utf8)) { _, response, _ in
            statuses.append((response as? HTTPURLResponse)?.statusCode ?? -1)
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 10)
        // Then the response arrives, but the stub never saw the body
        XCTAssertEqual(statuses.values, [201])
        XCTAssertEqual(stubs.requests.count, 1)
        XCTAssertNil(stubs.requests.first?.body)
    }

    func testOnLinuxADownloadTaskThroughAStubGetsNoFile() {
        // Given a stub
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/file", .text("contents"))
        // When a download task fetches it
        let done = expectation(description: "downloaded")
        let outcomes = Recorder<(location: URL?, status: Int?, error: Error?)>()
        session.downloadTask(with: api.appendingPathComponent("file")) { location, response, error in
            outcomes.append((location, (response as? HTTPURLResponse)?.statusCode, error))
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 10)
        // Then it "succeeds" with no file and no error: downloads must be tested against the loopback server
        XCTAssertEqual(outcomes.values.count, 1)
        XCTAssertNil(outcomes.values.first?.location)
        XCTAssertNil(outcomes.values.first?.error)
        XCTAssertEqual(outcomes.values.first?.status, 200)
    }

    func testOnLinuxA401WithWWWAuthenticateFailsInsteadOfHanging() {
        // Given a 401 that asks for credentials, which sends URLSession on Linux into its authentication flow
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/private", StubResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="api""#]))
        // When it is requested
        let delivery = fetch("/private", on: session)
        // Then the task fails at once with a StubError that explains, rather than never completing
        let message = (delivery?.error as? StubError)?.message ?? ""
        XCTAssertTrue(message.contains("WWW-Authenticate"), message)
    }
    #endif
}
