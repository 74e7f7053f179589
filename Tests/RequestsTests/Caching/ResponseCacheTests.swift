#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// The catalogue a cached route serves.
struct Catalogue: Decodable, Equatable, Sendable {
    let version: Int
    let path: String
}

/// GET (or another method) a catalogue, with headers and a cache use of its own.
struct CatalogueRequest: DecodableRequest {
    typealias Success = Catalogue
    let url: URL
    var method = "GET"
    var headers: [String: String] = [:]
    var cacheUse: CacheUse = .useCache
    var responseCache: ResponseCache?
    var validHTTPStatusCodes: [Int] = Array(200..<300)
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        completion(.success(request))
    }
}

/// A test case with a response cache of its own (1 MiB in memory, 4 MiB on disk) in a folder of its own, removed
/// after each test.
class CacheTestCase: XCTestCase {
    let server = TestServer.shared
    var directory: URL!
    var cache: ResponseCache!

    override func setUp() {
        super.setUp()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("cache-\(UUID().uuidString)", isDirectory: true)
        cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: directory)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(at: directory)
        super.tearDown()
    }

    /// What the monitors of ``fetchCatalogue(_:on:cache:policies:)`` saw of the cache.
    let cacheEvents = CacheEventRecorder()

    /// Runs `request` on a queue with `policies` (none by default), ``cacheEvents`` as its monitor and `cache` (this
    /// test's by default).
    func fetchCatalogue<R: DecodableRequest>(
        _ request: R, on session: URLSession = testSession, cache: ResponseCache? = nil, policies: RequestPolicies? = nil
    ) -> Result<Catalogue, Error> where R.Success == Catalogue, R.Failure == Error {
        let queue = OperationQueue()
        var configured = policies ?? RequestPolicies()
        configured.monitors = [cacheEvents]
        configured.responseCache = cache ?? self.cache
        queue.requestPolicies = configured
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    /// A route: `respond(n, request)` gives the status, the headers and the catalogue's version for the n-th request
    /// (a 304 has no body).
    func versionedRoute(_ respond: @escaping @Sendable (Int, LoopbackRequest) -> (Int, [String: String], Int)) -> (URL, SeenRequests) {
        let path = "/versioned-cache/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            let (status, headers, version) = respond(seen.all.count - 1, request)
            var all = headers
            if status == 304 { return LoopbackResponse(status: 304, headers: all) }
            all["Content-Type"] = "application/json"
            return LoopbackResponse(status: status, headers: all, body: Data(#"{"version":\#(version),"path":"\#(path)"}"#.utf8))
        }
        return (server.url(path), seen)
    }
}

/// Records the cache events monitors see.
final class CacheEventRecorder: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var recorded: [CacheEvent] = []
    func requestDidUseCache(_ attempt: RequestAttempt, event: CacheEvent) { lock.withLock { recorded.append(event) } }
    var events: [CacheEvent] { lock.withLock { recorded } }
    func reset() { lock.withLock { recorded = [] } }
}

final class ResponseCacheTests: CacheTestCase {
    private let events = CacheEventRecorder()

    /// A route answering with `headers(n, request)` and the catalogue of version `version(n)`; a request carrying
    /// `If-None-Match` equal to `etag304` gets a 304.
    private func route(
        status: Int = 200,
        version: @escaping @Sendable (Int) -> Int = { _ in 1 },
        notModifiedHeaders: [String: String] = [:],
        _ headers: @escaping @Sendable (Int, LoopbackRequest) -> [String: String]
    ) -> (URL, SeenRequests) {
        let path = "/cached/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            let n = seen.all.count - 1
            var headers = headers(n, request)
            if let etag = headers["ETag"], request.headers["if-none-match"] == etag {
                return LoopbackResponse(status: 304, headers: headers.merging(notModifiedHeaders) { $1 })
            }
            if let date = headers["Last-Modified"], request.headers["if-modified-since"] == date, request.headers["if-none-match"] == nil {
                return LoopbackResponse(status: 304, headers: headers.merging(notModifiedHeaders) { $1 })
            }
            headers["Content-Type"] = "application/json"
            return LoopbackResponse(status: status, headers: headers, body: Data(#"{"version":\#(version(n)),"path":"\#(path)"}"#.utf8))
        }
        return (server.url(path), seen)
    }

    private func fetch(_ request: CatalogueRequest, queue: OperationQueue? = nil) -> Result<Catalogue, Error> {
        let queue = queue ?? makeQueue()
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1)
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    private func makeQueue(cache: ResponseCache? = nil, retry: RetryPolicy? = nil) -> OperationQueue {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(retryPolicy: retry, monitors: [events], responseCache: cache ?? self.cache)
        return queue
    }

    // MARK: - Freshness

    func testAFreshResponseIsServedWithoutTheNetwork() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "max-age=60", "ETag": #""a""#] }
        let first = try fetch(CatalogueRequest(url: url)).get()
        XCTAssertEqual(events.events, [.miss(revalidating: false), .stored])
        events.reset()

        let second = try fetch(CatalogueRequest(url: url)).get()

        XCTAssertEqual(second, first)
        XCTAssertEqual(seen.all.count, 1, "the second came from the cache")
        XCTAssertEqual(events.events, [.hit])
    }

    func testNoCacheAndStaleResponsesAreRevalidatedAnd304DeliversTheStoredBody() throws {
        for headers in [
            ["Cache-Control": "no-cache", "ETag": #""b""#], ["Cache-Control": "max-age=0", "Last-Modified": "Sun, 06 Nov 1994 08:49:37 GMT"],
            ["Expires": "Sun, 06 Nov 1994 08:49:37 GMT", "ETag": #""c""#], ["ETag": #""d""#],
        ] {
            let (url, seen) = route(notModifiedHeaders: ["X-Refreshed": "yes"]) { _, _ in headers }
            let first = try fetch(CatalogueRequest(url: url)).get()
            events.reset()

            let second = try fetch(CatalogueRequest(url: url)).get()

            XCTAssertEqual(second, first, "\(headers)")
            XCTAssertEqual(seen.all.count, 2)
            XCTAssertEqual(seen.all.last?.headers["if-none-match"], headers["ETag"])
            XCTAssertEqual(seen.all.last?.headers["if-modified-since"], headers["Last-Modified"])
            XCTAssertEqual(events.events, [.miss(revalidating: true), .revalidated])
            let refreshed = CacheableRequest(URLRequest(url: url), session: testSession).flatMap(cache.entry(for:))
            XCTAssertEqual(refreshed?.header("X-Refreshed"), "yes", "the 304's headers are stored")
        }
    }

    func testWhatIsNeverStored() throws {
        let cases: [(String, [String: String], [String: String], Int)] = [
            ("no-store in the response", ["Cache-Control": "no-store, max-age=60"], [:], 200),
            ("no-store in the request", ["Cache-Control": "max-age=60"], ["Cache-Control": "no-store"], 200),
            ("Vary: *", ["Cache-Control": "max-age=60", "Vary": "*"], [:], 200),
            ("a 500", ["Cache-Control": "max-age=60"], [:], 500),
            ("no freshness and no validator", [:], [:], 200),
        ]
        for (name, responseHeaders, requestHeaders, status) in cases {
            let (url, seen) = route(status: status) { _, _ in responseHeaders }
            _ = fetch(CatalogueRequest(url: url, headers: requestHeaders))
            _ = fetch(CatalogueRequest(url: url, headers: requestHeaders))
            XCTAssertEqual(seen.all.count, 2, name)
            XCTAssertNil(seen.all.last?.headers["if-none-match"], name)
        }
    }

    func testAuthorizedResponsesAreStoredWhenTheySayPublic() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "public, max-age=60"] }
        _ = try fetch(CatalogueRequest(url: url, headers: ["Authorization": "Bearer x"])).get()
        _ = try fetch(CatalogueRequest(url: url, headers: ["Authorization": "Bearer x"])).get()
        XCTAssertEqual(seen.all.count, 1)
    }

    func testVaryKeepsResponsesApart() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "max-age=60", "Vary": "Accept-Language"] }
        _ = try fetch(CatalogueRequest(url: url, headers: ["Accept-Language": "fr"])).get()
        _ = try fetch(CatalogueRequest(url: url, headers: ["Accept-Language": "fr"])).get()
        XCTAssertEqual(seen.all.count, 1)
        _ = try fetch(CatalogueRequest(url: url, headers: ["Accept-Language": "de"])).get()
        XCTAssertEqual(seen.all.count, 2, "another language misses")
    }

    func testAStoredErrorStatusGoesThroughTheStatusCheck() {
        let (url, seen) = route(status: 404) { _, _ in ["Cache-Control": "max-age=60"] }
        let first = fetch(CatalogueRequest(url: url))
        let second = fetch(CatalogueRequest(url: url))
        XCTAssertEqual((first.failure as? RequestQueueError)?.statusCode, 404)
        XCTAssertEqual((second.failure as? RequestQueueError)?.statusCode, 404)
        XCTAssertEqual(seen.all.count, 1, "the 404 was stored")
    }

    func testAnUnsafeRequestRemovesTheStoredResponse() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "max-age=60"] }
        _ = try fetch(CatalogueRequest(url: url)).get()
        _ = try fetch(CatalogueRequest(url: url, method: "POST")).get()
        _ = try fetch(CatalogueRequest(url: url)).get()
        XCTAssertEqual(seen.all.map(\.method), ["GET", "POST", "GET"])
    }

    // MARK: - Per request

    func testEachCacheUse() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "max-age=60", "ETag": #""e""#] }
        XCTAssertEqual(fetch(CatalogueRequest(url: url, cacheUse: .onlyIfCached)).failure as? ResponseCacheError, .notCached(url))
        XCTAssertEqual(seen.all.count, 0)
        _ = try fetch(CatalogueRequest(url: url)).get()
        _ = try fetch(CatalogueRequest(url: url, cacheUse: .onlyIfCached)).get()
        XCTAssertEqual(seen.all.count, 1)
        _ = try fetch(CatalogueRequest(url: url, cacheUse: .revalidate)).get()
        XCTAssertEqual(seen.all.last?.headers["if-none-match"], #""e""#)
        _ = try fetch(CatalogueRequest(url: url, cacheUse: .reload)).get()
        XCTAssertNil(seen.all.last?.headers["if-none-match"])
        _ = try fetch(CatalogueRequest(url: url, cacheUse: .bypass)).get()
        XCTAssertEqual(seen.all.count, 4)
        let separate = ResponseCache(directory: nil)
        _ = try fetch(CatalogueRequest(url: url, responseCache: separate)).get()
        XCTAssertEqual(seen.all.count, 5, "a request's own cache is empty")
    }

    func testTheRequestsMaxStaleAndMinFreshAreHonoured() throws {
        // Given a response 100 s stale when stored, one fresh for a minute, and a stale one that must be revalidated
        let (stale, staleSeen) = route { _, _ in ["Cache-Control": "max-age=0", "Age": "100", "ETag": #""s""#] }
        let (fresh, freshSeen) = route { _, _ in ["Cache-Control": "max-age=60", "ETag": #""f""#] }
        let (strict, strictSeen) = route { _, _ in ["Cache-Control": "max-age=0, must-revalidate", "ETag": #""m""#] }
        for url in [stale, fresh, strict] { _ = try fetch(CatalogueRequest(url: url)).get() }
        events.reset()

        // When requests accept some staleness or ask for some freshness left
        for (url, directive) in [
            (stale, "max-stale"), (stale, "max-stale=3600"), (stale, "max-stale=10"), (strict, "max-stale"),
            (fresh, "min-fresh=30"), (fresh, "min-fresh=120"), (fresh, "min-fresh=soon"),
        ] {
            XCTAssertNoThrow(try fetch(CatalogueRequest(url: url, headers: ["Cache-Control": directive])).get(), directive)
        }

        // Then the stale one is served within max-stale, never when it must be revalidated, and min-fresh
        // revalidates a response without that much freshness left (or with a value that is not a number)
        XCTAssertEqual(
            events.events,
            [
                .hit, .hit, .miss(revalidating: true), .revalidated, .miss(revalidating: true), .revalidated,
                .hit, .miss(revalidating: true), .revalidated, .miss(revalidating: true), .revalidated,
            ]
        )
        XCTAssertEqual(staleSeen.all.count, 2)
        XCTAssertEqual(strictSeen.all.count, 2)
        XCTAssertEqual(freshSeen.all.count, 3)
    }

    func testOnlyIfCachedServesAStaleResponseUnlessItMustBeRevalidated() throws {
        let (stale, _) = route { _, _ in ["Cache-Control": "max-age=0", "ETag": #""k""#] }
        let (strict, _) = route { _, _ in ["Cache-Control": "max-age=0, must-revalidate", "ETag": #""l""#] }
        _ = try fetch(CatalogueRequest(url: stale)).get()
        _ = try fetch(CatalogueRequest(url: strict)).get()
        XCTAssertNoThrow(try fetch(CatalogueRequest(url: stale, cacheUse: .onlyIfCached)).get())
        XCTAssertEqual(fetch(CatalogueRequest(url: strict, cacheUse: .onlyIfCached)).failure as? ResponseCacheError, .notCached(strict))
    }

    // MARK: - Bad input

    func testA304WithAnotherETagFetchesTheWholeResponse() throws {
        // Given a server whose 304 names another ETag than the one stored
        let (url, seen) = route(version: { $0 }, notModifiedHeaders: ["ETag": #""other""#]) { _, _ in ["Cache-Control": "no-cache", "ETag": #""f""#] }
        _ = try fetch(CatalogueRequest(url: url)).get()

        let second = try fetch(CatalogueRequest(url: url)).get()

        XCTAssertEqual(seen.all.count, 3)
        XCTAssertNil(seen.all.last?.headers["if-none-match"], "the refetch is unconditional")
        XCTAssertEqual(second.version, 2, "the whole new response")
    }

    func testA304ToAnUnconditionalRequestIsAStatusError() {
        let path = "/cached/\(UUID().uuidString)"
        server.route(path) { _ in LoopbackResponse(status: 304, headers: ["ETag": #""g""#]) }
        let result = fetch(CatalogueRequest(url: server.url(path)))
        XCTAssertEqual((result.failure as? RequestQueueError)?.statusCode, 304)
    }

    func testTheDiskLayerSurvivesARestartAndIsANoOpWhenItsDirectoryGoes() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "max-age=60"] }
        _ = try fetch(CatalogueRequest(url: url)).get()
        let restarted = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: directory)
        _ = try fetch(CatalogueRequest(url: url), queue: makeQueue(cache: restarted)).get()
        XCTAssertEqual(seen.all.count, 1, "read from disk by a new cache")

        // A directory that cannot exist (a file stands where its parent should be), even for root.
        try FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data("not a folder".utf8).write(to: directory.appendingPathComponent("a"))
        let blocked = ResponseCache(memoryCapacity: 0, diskCapacity: 4 << 20, directory: directory.appendingPathComponent("a/b"))
        let before = seen.all.count
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), queue: makeQueue(cache: blocked)).get().version, 1)
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), queue: makeQueue(cache: blocked)).get().version, 1)
        XCTAssertEqual(seen.all.count, before + 2, "nothing could be stored, and nothing failed")
        XCTAssertGreaterThanOrEqual(seen.all.count, 2, "requests still succeed")
    }

    func testALargeResponseIsNotStored() throws {
        let small = ResponseCache(memoryCapacity: 64, diskCapacity: 0, directory: nil)
        let (url, seen) = route { _, _ in ["Cache-Control": "max-age=60"] }
        _ = try fetch(CatalogueRequest(url: url), queue: makeQueue(cache: small)).get()
        _ = try fetch(CatalogueRequest(url: url), queue: makeQueue(cache: small)).get()
        XCTAssertEqual(seen.all.count, 2)
    }

    // MARK: - With other features

    func testSharedCallersOfOneRevalidationMakeOneNetworkCall() throws {
        let (url, seen) = route { _, _ in ["Cache-Control": "no-cache", "ETag": #""h""#] }
        _ = try fetch(CatalogueRequest(url: url)).get()
        let queue = makeQueue()
        queue.isSuspended = true
        let results = Recorder<Result<Catalogue, Error>>()
        for _ in 0..<5 {
            queue.addSharedRequest(CatalogueRequest(url: url), session: testSession) { results.append($0) }
        }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 5)
        XCTAssertEqual(results.values.compactMap { try? $0.get() }.count, 5)
        XCTAssertEqual(seen.all.count, 2, "one revalidation for five callers")
    }

    func testARetriedRevalidationStillRevalidates() throws {
        // Given a stored response whose revalidation first meets a 503
        let failing = "/cached/\(UUID().uuidString)"
        let attempts = SeenRequests()
        server.route(failing) { request in
            attempts.append(request)
            if attempts.all.count == 2 { return LoopbackResponse(status: 503) }
            if request.headers["if-none-match"] == #""j""# { return LoopbackResponse(status: 304, headers: ["ETag": #""j""#]) }
            return LoopbackResponse(headers: ["Cache-Control": "no-cache", "ETag": #""j""#, "Content-Type": "application/json"], body: Data(#"{"version":7,"path":"x"}"#.utf8))
        }
        let failingURL = server.url(failing)
        _ = try fetch(CatalogueRequest(url: failingURL)).get()
        let retried = try fetch(CatalogueRequest(url: failingURL), queue: makeQueue(retry: RetryPolicy(maxAttempts: 2, baseDelay: 0.01))).get()
        XCTAssertEqual(retried.version, 7)
        XCTAssertEqual(attempts.all.map { $0.headers["if-none-match"] }, [nil, #""j""#, #""j""#], "the retry carries the validator too")
    }

    func testConcurrentRequestsForTenURLsNeverSeeATornEntry() {
        let small = ResponseCache(memoryCapacity: 2_000, diskCapacity: 4_000, directory: directory, maximumEntrySize: 1_000)
        let routes = (0..<10).map { index in route(version: { _ in index }) { _, _ in ["Cache-Control": "max-age=60", "ETag": #""\#(index)""#] } }
        let queue = makeQueue(cache: small)
        queue.maxConcurrentOperationCount = 16
        let results = Recorder<(Int, Result<Catalogue, Error>)>()
        for index in 0..<1_000 {
            let which = index % 10
            queue.addRequest(CatalogueRequest(url: routes[which].0), session: testSession) { results.append((which, $0)) }
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1_000)
        for (which, result) in results.values {
            XCTAssertEqual(try? result.get(), Catalogue(version: which, path: routes[which].0.path))
        }
    }
}
