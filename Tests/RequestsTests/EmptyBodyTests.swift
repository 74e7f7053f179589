#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// A decodable request to `url` with `method`, whose `Success` is `S`.
struct FetchDecodable<S: Decodable>: DecodableRequest {
    typealias Success = S
    let url: URL
    var method: HTTPMethod = .get
    var emptyStatuses: Set<Int> = [204, 205]
    var identifier: String { url.absoluteString }
    var emptyResponseStatusCodes: Set<Int> { emptyStatuses }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = method.rawValue
        completion(.success(request))
    }
}

final class EmptyBodyTests: XCTestCase {
    private let server = TestServer.shared

    private struct Profile: Decodable, Equatable {
        let name: String
    }

    /// Answers every request to a fresh path with `status`, `body` and a JSON content type.
    private func serve(status: Int, body: String = "") -> URL {
        let path = "/empty/\(UUID().uuidString)"
        server.route(path) { _ in
            LoopbackResponse(status: status, headers: ["Content-Type": "application/json"], body: Data(body.utf8))
        }
        return server.url(path)
    }

    private func run<S: Decodable>(_ request: FetchDecodable<S>) -> Result<S, Error> {
        let queue = OperationQueue()
        let results = Recorder<Result<S, Error>>()
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion exactly once")
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    func testA204Or205IsNilOrEmptyBody() throws {
        for status in [204, 205] {
            // Given a server that answers with no body
            let url = serve(status: status)
            // When the request's Success can be empty, Then the empty body is its empty value
            XCTAssertEqual(try run(FetchDecodable<Profile?>(url: url)).get(), nil, "\(status)")
            XCTAssertEqual(try run(FetchDecodable<EmptyBody>(url: url)).get(), EmptyBody(), "\(status)")
        }
    }

    func testAHeadResponseIsEmptyWhateverItsStatus() throws {
        // Given a resource whose GET has a body: HEAD gets its headers only
        let url = serve(status: 200, body: #"{"name":"Ada"}"#)
        XCTAssertEqual(try run(FetchDecodable<Profile?>(url: url, method: .head)).get(), nil)
        XCTAssertEqual(try run(FetchDecodable<EmptyBody>(url: url, method: .head)).get(), EmptyBody())
        // And the same resource fetched with GET still decodes
        XCTAssertEqual(try run(FetchDecodable<Profile?>(url: url)).get(), Profile(name: "Ada"))
    }

    func testAnEmptyBodyNobodyAllowedFailsNamingTheStatusAndMethod() {
        // A 200 with no body, for a Success that could be empty: 200 is not among the request's codes
        let ok = run(FetchDecodable<Profile?>(url: serve(status: 200), method: .post))
        guard case let .unexpectedEmptyBody(status, method)? = ok.failure as? RequestQueueError else {
            return XCTFail("\(ok)")
        }
        XCTAssertEqual(status, 200)
        XCTAssertEqual(method, "POST")
        XCTAssertTrue("\(ok.failure!)".contains("POST had status 200"), "\(ok.failure!)")

        // A 204 for a Success that cannot be empty
        let noContent = run(FetchDecodable<Profile>(url: serve(status: 204)))
        guard case .unexpectedEmptyBody(204, "GET")? = noContent.failure as? RequestQueueError else {
            return XCTFail("\(noContent)")
        }
    }

    func testARequestListsItsOwnEmptyStatuses() throws {
        // Given an API that answers a successful POST with 201 and no body
        let url = serve(status: 201)
        // When the request lists 201, Then the empty body is accepted
        XCTAssertEqual(try run(FetchDecodable<EmptyBody>(url: url, method: .post, emptyStatuses: [201])).get(), EmptyBody())
        // And a request that does not list it still fails
        let strict = run(FetchDecodable<EmptyBody>(url: url, method: .post))
        guard case .unexpectedEmptyBody(201, "POST")? = strict.failure as? RequestQueueError else {
            return XCTFail("\(strict)")
        }
    }

    func testBodiesStillDecodeForTypesThatCanBeEmpty() throws {
        // A body on a 200 decodes as usual: JSON null is nil, any JSON value is an EmptyBody
        XCTAssertEqual(try run(FetchDecodable<Profile?>(url: serve(status: 200, body: "null"))).get(), nil)
        XCTAssertEqual(try run(FetchDecodable<EmptyBody>(url: serve(status: 200, body: #"{"ignored":[1,2]}"#))).get(), EmptyBody())
        XCTAssertEqual(try run(FetchDecodable<EmptyBody>(url: serve(status: 200, body: "[]"))).get(), EmptyBody())
        // And invalid JSON is still a DecodingError, not an empty value
        XCTAssertTrue(run(FetchDecodable<Profile?>(url: serve(status: 200, body: "{"))).failure is DecodingError)
    }

    func testEmptyBodyEncodesAsAnEmptyObject() throws {
        XCTAssertEqual(String(decoding: try JSONEncoder().encode(EmptyBody()), as: UTF8.self), "{}")
    }
}
