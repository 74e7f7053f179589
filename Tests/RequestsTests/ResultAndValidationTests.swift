#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

final class ResultAndValidationTests: XCTestCase {
    private let server = TestServer.shared

    /// Runs `request` on a fresh queue and returns its one result.
    private func run<T: DataRequest>(_ request: T, file: StaticString = #filePath, line: UInt = #line) -> Result<T.Success, T.Failure>? {
        let queue = OperationQueue()
        let results = Recorder<Result<T.Success, T.Failure>>()
        let done = expectation(description: "completion")
        queue.addRequest(request, session: testSession) { result in
            results.append(result)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion must run exactly once", file: file, line: line)
        return results.values.first
    }

    func testDecodableRequestDecodesJSON() {
        let result = run(GetDecodable<ServedRecipe>(url: server.url("/json")))
        XCTAssertEqual(try result?.get(), ServedRecipe(name: "Pancakes", ingredients: ["flour", "milk", "eggs"], steps: ["mix", "fry"]))
    }

    func testDataRequestDeliversTheBodyBytes() {
        let result = run(GetData(url: server.url("/bytes/70000")))
        let body = try? result?.get()
        XCTAssertEqual(body?.count, 70000)
        XCTAssertEqual(body.map { Array($0.prefix(3)) }, [0, 1, 2])
        XCTAssertEqual(body?.last, UInt8(69999 % 256))
    }

    func testStatusOutsideValidCodesCarriesCodeResponseAndBody() throws {
        // Given a request for a 404 whose body is the server's JSON error payload
        struct ServerError: Decodable { let status: Int; let error: String }
        // When it runs
        let error = run(GetDecodable<ServedRecipe>(url: server.url("/status/404")))?.failure
        // Then it fails with the code, the response and the body, and the payload decodes
        guard case let .invalidStatusCode(statusCode, response, body)? = error as? RequestQueueError else {
            return XCTFail("expected invalidStatusCode, got \(String(describing: error))")
        }
        XCTAssertEqual(statusCode, 404)
        XCTAssertEqual(response.statusCode, 404)
        XCTAssertEqual(try JSONDecoder().decode(ServerError.self, from: body).status, 404)
        XCTAssertTrue(String(describing: error!).contains("404"))
        XCTAssertEqual((error as? RequestQueueError)?.statusCode, 404)
    }

    func testCustomValidStatusCodesAcceptA404() {
        struct Accept404: DataRequest {
            typealias Success = Int
            typealias Failure = Error
            let url: URL
            var identifier: String { "accept-404" }
            var validHTTPStatusCodes: [Int] { [404] }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
            func processData(_ data: Data) throws -> Int { data.count }
        }
        XCTAssertNotNil(run(Accept404(url: server.url("/status/404")))?.success)
        XCTAssertTrue(run(Accept404(url: server.url("/json")))?.failure is RequestQueueError)
    }

    func testNoContentSucceedsOnAnEmpty204() {
        XCTAssertNotNil(run(SendNoContent(url: server.url("/status/204")))?.success)
    }

    func testNoContentAcceptsAnyEmpty2xx() {
        server.route("/empty/201") { _ in LoopbackResponse(status: 201) }
        XCTAssertNotNil(run(SendNoContent(url: server.url("/empty/201")))?.success)
    }

    func testNoContentFailsOnABodyWhenEnforced() {
        let error = run(SendNoContent(url: server.url("/json")))?.failure
        guard case .nonEmptyData? = error as? RequestQueueError else {
            return XCTFail("expected nonEmptyData, got \(String(describing: error))")
        }
    }

    func testNoContentIgnoresABodyWhenNotEnforced() {
        XCTAssertNotNil(run(SendNoContent(url: server.url("/json"), shouldEnforceNoContent: false))?.success)
    }

    func testInvalidJSONSurfacesTheDecodingError() {
        server.route("/not-json") { _ in .text("<html>oops</html>") }
        let error = run(GetDecodable<ServedRecipe>(url: server.url("/not-json")))?.failure
        XCTAssertTrue(error is DecodingError, "got \(String(describing: error))")
    }

    func testWrongJSONShapeSurfacesTheDecodingError() {
        let error = run(GetDecodable<[Int]>(url: server.url("/json")))?.failure
        XCTAssertTrue(error is DecodingError, "got \(String(describing: error))")
    }

    func testEmptyBodyForADecodableRequestIsAClearError() {
        let error = run(GetDecodable<ServedRecipe>(url: server.url("/status/204")))?.failure
        guard case .unexpectedEmptyBody(204, "GET")? = error as? RequestQueueError else {
            return XCTFail("expected unexpectedEmptyBody, got \(String(describing: error))")
        }
    }

    func testDecodingStrategiesAndCustomDecoderAreUsed() {
        server.route("/snake") { _ in .json(#"{"user_name":"ada"}"#) }
        struct User: Decodable, Equatable { let userName: String }
        struct SnakeRequest: DecodableRequest {
            typealias Success = User
            typealias Failure = Error
            let url: URL
            var identifier: String { "snake" }
            var keyDecodingStrategy: JSONDecoder.KeyDecodingStrategy? { .convertFromSnakeCase }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
        }
        struct OwnDecoderRequest: DecodableRequest {
            typealias Success = User
            typealias Failure = Error
            let url: URL
            var identifier: String { "own-decoder" }
            var jsonDecoder: JSONDecoder {
                let decoder = JSONDecoder()
                decoder.keyDecodingStrategy = .convertFromSnakeCase
                return decoder
            }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
        }
        XCTAssertEqual(try run(SnakeRequest(url: server.url("/snake")))?.get(), User(userName: "ada"))
        XCTAssertEqual(try run(OwnDecoderRequest(url: server.url("/snake")))?.get(), User(userName: "ada"))
        XCTAssertTrue(run(GetDecodable<User>(url: server.url("/snake")))?.failure is DecodingError)
    }

    func testProcessResponseSeesTheHeaders() {
        server.route("/with-etag") { _ in LoopbackResponse(status: 200, headers: ["ETag": "\"v7\""], body: Data("x".utf8)) }
        struct Tagged: DataRequest {
            typealias Success = (body: String, etag: String?)
            typealias Failure = Error
            let url: URL
            var identifier: String { "etag" }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
            func processData(_ data: Data) throws -> Success { (String(decoding: data, as: UTF8.self), nil) }
            func processResponse(_ data: Data, response: HTTPURLResponse) throws -> Success {
                (String(decoding: data, as: UTF8.self), response.value(forHTTPHeaderField: "ETag"))
            }
        }
        let value = try? run(Tagged(url: server.url("/with-etag")))?.get()
        XCTAssertEqual(value?.body, "x")
        XCTAssertEqual(value?.etag, "\"v7\"")
    }

    func testTypedFailureGoesThroughMapError() {
        enum APIError: Error, Equatable { case notFound, other }
        struct Typed: DataRequest {
            typealias Success = Data
            typealias Failure = APIError
            let url: URL
            var identifier: String { "typed" }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
            func processData(_ data: Data) throws -> Data { data }
            func mapError(_ error: Error) -> APIError {
                (error as? RequestQueueError)?.statusCode == 404 ? .notFound : .other
            }
        }
        XCTAssertEqual(run(Typed(url: server.url("/status/404")))?.failure, .notFound)
        XCTAssertEqual(run(Typed(url: server.url("/status/500")))?.failure, .other)
    }

    func testMakeURLRequestFailureIsDeliveredAndNothingIsSent() {
        struct Broken: Error {}
        let before = server.totalRequestCount
        let request = ManualRequest(identifier: "broken") { completion in completion(.failure(Broken())) }
        XCTAssertTrue(run(request)?.failure is Broken)
        XCTAssertEqual(server.totalRequestCount, before)
    }

    func testConnectionRefusedIsTheTransportError() throws {
        // Given a port nobody listens on (a server that has stopped)
        let stopped = try LoopbackServer()
        let url = stopped.url("/json")
        stopped.stop()
        // When / Then the URLError arrives unchanged
        let error = run(GetData(url: url))?.failure
        XCTAssertEqual((error as? URLError)?.code, .cannotConnectToHost, "got \(String(describing: error))")
    }

    func testConnectionClosedMidBodyFailsOnce() {
        let error = run(GetData(url: server.url("/fault/close-mid-body")))?.failure
        XCTAssertTrue(error is URLError, "got \(String(describing: error))")
    }

    func testUnsupportedSchemeFailsWithoutCrashing() {
        let error = run(GetData(url: URL(string: "gopher://127.0.0.1/x")!))?.failure
        XCTAssertNotNil(error)
    }

    func testNonHTTPResponseIsRejected() {
        // Given a response that is a plain URLResponse with no status code, which no socket can produce,
        // so it comes from a URLProtocol stub (URLSession on Linux does not load file: URLs)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = [NonHTTPResponseProtocol.self]
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        // When it runs
        queue.addRequest(GetData(url: URL(string: "http://non-http.invalid/")!), session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then it fails with nonHTTPResponse rather than skipping status validation
        XCTAssertEqual(results.count, 1)
        guard case .nonHTTPResponse? = results.values.first?.failure as? RequestQueueError else {
            return XCTFail("expected nonHTTPResponse, got \(results.values)")
        }
    }
}

/// Answers every request with a plain `URLResponse`, synchronously inside `startLoading`.
private final class NonHTTPResponseProtocol: URLProtocol {
    override class func canInit(with request: URLRequest) -> Bool { true }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }
    override func startLoading() {
        let response = URLResponse(url: request.url!, mimeType: "text/plain", expectedContentLength: 2, textEncodingName: nil)
        client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
        client?.urlProtocol(self, didLoad: Data("hi".utf8))
        client?.urlProtocolDidFinishLoading(self)
    }
    override func stopLoading() {}
}
