#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// A POST whose JSON body is set in `makeURLRequest`, or whose body is a stream of its own.
private struct PostBody: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    var identifier: String { url.absoluteString }
    let url: URL
    var body = Data(#"{"order":42}"#.utf8)
    var asStream = false
    var authorization: String?
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        if asStream { request.httpBodyStream = InputStream(data: body) } else { request.httpBody = body }
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let authorization { request.setValue(authorization, forHTTPHeaderField: "Authorization") }
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// Counts what a monitor sees.
private final class RedirectCounter: RequestEventMonitor, @unchecked Sendable {
    let redirects = Recorder<URL>()
    let summaries = Recorder<RequestSummary>()
    func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest) {
        request.url.map(redirects.append)
    }
    func requestDidFinish(_ summary: RequestSummary) { summaries.append(summary) }
}

/// A 307 or 308 keeps the method and the body (RFC 9110 §15.4.8–9). Foundation on Linux follows them with an empty
/// body; Requests sends the body again itself, on every platform, for every kind of body it can read twice.
final class RedirectBodyTests: XCTestCase {
    private let server = TestServer.shared

    /// A landing route that records each request, and a URL that redirects there with `status`.
    private func redirect(_ status: Int, landed: Recorder<LoopbackRequest>) -> URL {
        let landing = TestServer.freshPath()
        server.route(landing) { request in
            landed.append(request)
            return .json(#"{"ok":true}"#)
        }
        return URL(string: server.url("/hostile/redirect").absoluteString + "?status=\(status)&to=\(landing)")!
    }

    private func run<R: DataRequest>(_ request: R, policies: RequestPolicies = RequestPolicies()) -> Result<R.Success, R.Failure>? {
        let queue = OperationQueue()
        queue.requestPolicies = policies
        let results = Recorder<Result<R.Success, R.Failure>>()
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1)
        return results.values.first
    }

    func testA307Or308SendsTheSameMethodAndBodyAgain() throws {
        for status in [307, 308] {
            // Given a POST with a JSON body to a URL that redirects with `status`, and a monitor
            let landed = Recorder<LoopbackRequest>()
            let monitor = RedirectCounter()

            // When it runs
            let result = run(PostBody(url: redirect(status, landed: landed)), policies: RequestPolicies(monitors: [monitor]))

            // Then the landing got the same method and body, once; the monitors saw one redirect in one attempt
            XCTAssertEqual(String(decoding: try XCTUnwrap(result?.get()), as: UTF8.self), #"{"ok":true}"#, "\(status)")
            XCTAssertEqual(landed.count, 1, "\(status)")
            XCTAssertEqual(landed.values.first?.method, "POST", "\(status)")
            XCTAssertEqual(landed.values.first?.body, Data(#"{"order":42}"#.utf8), "\(status)")
            XCTAssertEqual(landed.values.first?.headers["content-type"], "application/json", "\(status)")
            XCTAssertEqual(monitor.redirects.count, 1, "\(status)")
            XCTAssertEqual(monitor.summaries.values.first?.attempts, 1, "\(status)")
            XCTAssertEqual(monitor.summaries.values.first?.metrics?.redirectCount, 1, "\(status)")
        }
    }

    func testEveryUploadBodyIsSentAgainWhole() throws {
        // Given a file, and a multipart form large enough to be streamed from a temporary file
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("redirect-body-\(UUID().uuidString)")
        let payload = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        try payload.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        var streamed = MultipartFormData()
        streamed.streamingThreshold = 10
        streamed.append(payload, name: "part", fileName: "p.bin")
        var inMemory = MultipartFormData()
        inMemory.append(payload, name: "part", fileName: "p.bin")
        let bodies: [(String, UploadBody)] = [
            ("data", .data(payload)), ("file", .file(file)), ("streamed multipart", .multipart(streamed)),
            ("multipart", .multipart(inMemory)),
        ]
        for (name, body) in bodies {
            // When each is uploaded to a URL that answers 308
            let landed = Recorder<LoopbackRequest>()
            let result = run(Upload(url: redirect(308, landed: landed), uploadBody: body))

            // Then the landing got all of it
            XCTAssertNotNil(try result?.get(), name)
            XCTAssertEqual(landed.count, 1, name)
            let received = try XCTUnwrap(landed.values.first?.body, name)
            if name.hasSuffix("multipart") {
                XCTAssertNotNil(received.range(of: payload), "\(name): \(received.count) bytes")
            } else {
                XCTAssertEqual(received, payload, name)
            }
        }
    }

    func testABodyStreamOfTheRequestsOwnEndsWithThe307() {
        // Given a POST whose body is a stream of its own, which cannot be read twice
        let landed = Recorder<LoopbackRequest>()

        // When it is redirected with a 307
        let result = run(PostBody(url: redirect(307, landed: landed), asStream: true))

        // Then the 307 is the response, and nothing was posted empty
        XCTAssertEqual((result?.failure as? RequestQueueError)?.statusCode, 307)
        XCTAssertEqual(landed.count, 0)
    }

    func testResentRedirectsCountTowardsTheLimit() {
        // Given a 307 to itself, forever, with a redirect limit of 3
        let path = TestServer.freshPath()
        let hits = Recorder<Int>()
        server.route(path) { _ in
            hits.append(1)
            return LoopbackResponse(status: 307, headers: ["Location": path])
        }

        // When a POST with a body follows it
        let result = run(PostBody(url: server.url(path)), policies: RequestPolicies(redirectPolicy: RedirectPolicy.sameOrigin.maximumRedirects(3)))

        // Then it stops at the limit
        XCTAssertEqual(result?.failure as? RedirectError, .tooManyRedirects(limit: 3))
        XCTAssertEqual(hits.count, 4, "the first request and three redirects")
    }

    func testTheCredentialDoesNotFollowTheBodyToAnotherOrigin() throws {
        // Given another origin that records what it receives, and a 307 to it
        let other = try LoopbackServer()
        defer { other.stop() }
        let received = Recorder<LoopbackRequest>()
        other.route("/moved") { request in
            received.append(request)
            return .json("{}")
        }
        let url = try XCTUnwrap(URL(string: server.url("/hostile/redirect").absoluteString + "?status=307&to=" + other.url("/moved").absoluteString))

        // When a POST with a credential follows it
        let result = run(PostBody(url: url, authorization: "Bearer SECRET"))

        // Then the other origin got the body, without the credential
        XCTAssertNotNil(try result?.get())
        XCTAssertEqual(received.values.first?.body, Data(#"{"order":42}"#.utf8))
        XCTAssertNil(received.values.first?.headers["authorization"])
    }
}
