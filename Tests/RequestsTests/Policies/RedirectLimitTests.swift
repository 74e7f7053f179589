#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Redirect limits that mean what they say: a limit URLSession cannot honour, or a negative one, fails the request
/// before anything is sent; reaching the limit, or URLSession's own (−1007), is always
/// `RedirectError.tooManyRedirects(limit:)`.
final class RedirectLimitTests: XCTestCase {
    private let server = TestServer.shared

    /// A chain of `hops` redirects on the test server, each hop on a path of its own, then JSON; `received()` counts
    /// the requests the whole chain got.
    private func chain(_ hops: Int) -> (url: URL, received: () -> Int) {
        let base = "/redirect-limit/\(UUID().uuidString)"
        let paths = (0...hops).map { "\(base)/\($0)" }
        for (index, path) in paths.enumerated() {
            if index == hops {
                server.route(path) { _ in .json(#"{"name":"Pancakes","ingredients":[],"steps":[]}"#) }
            } else {
                let next = paths[index + 1]
                server.route(path) { _ in LoopbackResponse(status: 302, headers: ["Location": next]) }
            }
        }
        let server = self.server
        return (server.url(paths[0]), { paths.reduce(0) { $0 + server.requestCount(path: $1) } })
    }

    /// Runs a data request (or a download) for `url` under `policy`; returns its one result.
    private func run(_ url: URL, _ policy: RedirectPolicy, download: Bool = false, session: URLSession = testSession) -> Result<Void, Error>? {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(redirectPolicy: policy)
        let results = Recorder<Result<Void, Error>>()
        if download {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("redirect-limit-\(UUID().uuidString)")
            queue.addRequest(Download(url: url, destination: file), session: session) { result in
                if case let .success(file) = result { try? FileManager.default.removeItem(at: file) }
                results.append(result.map { _ in })
            }
        } else {
            queue.addRequest(GetData(url: url), session: session) { results.append($0.map { _ in }) }
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1)
        return results.values.first
    }

    /// Whether `result` is the refusal of a limit out of range, naming the limit.
    private func isRefusal(_ result: Result<Void, Error>?, of limit: Int) -> Bool {
        guard case let .misuse(message)? = result?.failure as? RequestQueueError else { return false }
        return message.contains("maximumRedirects(\(limit))")
    }

    // MARK: - Limits out of range

    func testTheSupportedMaximumIsBelowWhereURLSessionStops() {
        // URLSession stops at the 21st redirect without asking its delegate (Linux, measured; macOS 11 and later), and
        // did at the 17th before macOS 11: the library's own count must decide first, the same on every platform.
        XCTAssertEqual(RedirectPolicy.maximumSupportedRedirects, 16)
    }

    func testALimitAboveWhatURLSessionFollowsIsRefusedBeforeAnythingIsSent() {
        for limit in [RedirectPolicy.maximumSupportedRedirects + 1, 20, 100, Int.max] {
            for download in [false, true] {
                // Given a chain of 30 redirects, and a policy that allows more than URLSession follows
                let (url, received) = chain(30)
                // When a request (a download) is sent under it
                let result = run(url, RedirectPolicy.follow.maximumRedirects(limit), download: download)
                // Then it fails with the typed refusal, and the server saw nothing
                XCTAssertTrue(isRefusal(result, of: limit), "\(limit) \(download): \(String(describing: result))")
                XCTAssertEqual(received(), 0, "\(limit) \(download)")
            }
        }
    }

    func testANegativeLimitIsRefusedBeforeAnythingIsSent() {
        // Given a policy with a negative limit, made with the factory or set on the property
        var set = RedirectPolicy.sameOrigin
        set.maximumRedirects = Int.min
        for (policy, limit) in [(RedirectPolicy.follow.maximumRedirects(-1), -1), (set, Int.min), (RedirectPolicy.refuse.maximumRedirects(-1), -1)] {
            for download in [false, true] {
                let (url, received) = chain(1)
                // When a request (a download) is sent under it
                let result = run(url, policy, download: download)
                // Then it fails with the typed refusal, and the server saw no request
                XCTAssertTrue(isRefusal(result, of: limit), "\(limit) \(download): \(String(describing: result))")
                XCTAssertEqual(received(), 0, "\(limit) \(download)")
            }
        }
    }

    func testARequestsOwnPolicyIsCheckedToo() {
        // Given a queue with a valid policy and a request whose own policy allows too many
        let (url, received) = chain(1)
        let queue = OperationQueue()
        let request = OwnRedirectPolicy(url: url, redirectPolicy: RedirectPolicy.follow.maximumRedirects(50))
        let results = Recorder<Result<Data, Error>>()
        // When it is sent
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then it is refused before anything is sent
        XCTAssertTrue(isRefusal(results.values.first.map { $0.map { _ in } }, of: 50), "\(results.values)")
        XCTAssertEqual(received(), 0)
    }

    // MARK: - Reaching the limit

    func testAThirtyHopChainUnderTheLargestLimitEndsWithTheTypedError() {
        for download in [false, true] {
            // Given a chain of 30 redirects, and the largest limit there is
            let (url, received) = chain(30)
            let limit = RedirectPolicy.maximumSupportedRedirects
            // When a request (a download) follows it
            let result = run(url, RedirectPolicy.follow.maximumRedirects(limit), download: download)
            // Then the library's own count stopped it, with its typed error, never URLError −1007: the first request
            // and `limit` redirects reached the server
            XCTAssertEqual(result?.failure as? RedirectError, .tooManyRedirects(limit: limit), "\(String(describing: result))")
            XCTAssertEqual(received(), limit + 1, "\(download)")
        }
    }

    func testAChainLongerThanTheLimitEndsWithTheTypedErrorAndOneAsLongSucceeds() {
        // Given chains of 4 and 3 redirects, and a limit of 3
        let (longer, receivedLonger) = chain(4)
        let (asLong, receivedAsLong) = chain(3)
        let policy = RedirectPolicy.follow.maximumRedirects(3)
        // When a request follows each
        let failed = run(longer, policy)
        let succeeded = run(asLong, policy)
        // Then the longer one fails with the typed error after 3 redirects, the other gets its JSON
        XCTAssertEqual(failed?.failure as? RedirectError, .tooManyRedirects(limit: 3), "\(String(describing: failed))")
        XCTAssertEqual(receivedLonger(), 4)
        XCTAssertNotNil(succeeded?.success, "\(String(describing: succeeded))")
        XCTAssertEqual(receivedAsLong(), 4)
    }

    func testAZeroLimitFollowsNoRedirect() {
        // Given a chain of 1 redirect, and a limit of 0
        let (url, received) = chain(1)
        // When a request is sent
        let result = run(url, RedirectPolicy.follow.maximumRedirects(0))
        // Then the first redirect is already one too many
        XCTAssertEqual(result?.failure as? RedirectError, .tooManyRedirects(limit: 0), "\(String(describing: result))")
        XCTAssertEqual(received(), 1)
    }

    func testARedirectLoopEndsWithTheTypedError() {
        // Given a path that redirects to itself, and the default limit, the largest, and a small one on .sameOrigin
        let loop = server.url("/fault/redirect-loop")
        let policies: [(RedirectPolicy, Int)] = [
            (.follow, 10),
            (RedirectPolicy.follow.maximumRedirects(RedirectPolicy.maximumSupportedRedirects), RedirectPolicy.maximumSupportedRedirects),
            (RedirectPolicy.sameOrigin.maximumRedirects(2), 2),
        ]
        for (policy, limit) in policies {
            // When a request is sent
            let result = run(loop, policy)
            // Then it ends with the typed error naming the limit
            XCTAssertEqual(result?.failure as? RedirectError, .tooManyRedirects(limit: limit), "\(String(describing: result))")
        }
    }

    // MARK: - URLSession's own limit

    func testURLSessionsTooManyRedirectsIsReportedAsTheTypedError() {
        // Given a session whose transport fails with URLError −1007 (as URLSession does past its own limit, which
        // the library's count now always reaches first, so only a stub can show it)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = [TooManyRedirectsProtocol.self]
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let url = URL(string: "http://too-many-redirects.invalid/")!
        for (policy, limit) in [(RedirectPolicy.follow, 10), (RedirectPolicy.sameOrigin.maximumRedirects(4), 4)] {
            // When a request is sent through it
            let result = run(url, policy, session: session)
            // Then it fails with the library's typed error, naming the policy's limit, not the URLError
            XCTAssertEqual(result?.failure as? RedirectError, .tooManyRedirects(limit: limit), "\(String(describing: result))")
        }
    }
}

/// GET `url` under its own redirect policy.
private struct OwnRedirectPolicy: DataRequest {
    typealias Success = Data
    let url: URL
    let redirectPolicy: RedirectPolicy?
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// Fails every request with `URLError(.httpTooManyRedirects)`, synchronously inside `startLoading`.
private final class TooManyRedirectsProtocol: URLProtocol {
    override class func canInit(with request: URLRequest) -> Bool { true }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }
    override func startLoading() {
        client?.urlProtocol(self, didFailWithError: URLError(.httpTooManyRedirects))
    }
    override func stopLoading() {}
}
