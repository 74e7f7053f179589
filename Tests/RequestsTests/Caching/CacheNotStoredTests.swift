#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// What monitors were told of the cache: its events and its notices, in the order they came.
final class CacheMonitorLog: RequestEventMonitor, @unchecked Sendable {
    enum Entry: Equatable {
        case event(CacheEvent)
        case notice(RequestNotice)
    }

    private let lock = NSLock()
    private var recorded: [Entry] = []
    func requestDidUseCache(_ attempt: RequestAttempt, event: CacheEvent) { lock.withLock { recorded.append(.event(event)) } }
    func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice) { lock.withLock { recorded.append(.notice(notice)) } }
    var entries: [Entry] { lock.withLock { recorded } }
    var events: [CacheEvent] { entries.compactMap { if case let .event(event) = $0 { return event } else { return nil } } }
    func reset() { lock.withLock { recorded = [] } }
}

/// Answers every task-level challenge with a credential, as a session delegate would.
private final class ChallengeAnswerer: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        completionHandler(.useCredential, URLCredential(user: "ada", password: "secret", persistence: .none))
    }
}

/// Every reason the cache does not store a response that can be produced over a socket is told to monitors as
/// `CacheEvent.notStored(reason:)`, in place of `.stored`; the refusals also as `RequestNotice.notStored(reason:)`.
final class CacheNotStoredTests: CacheTestCase {
    private let log = CacheMonitorLog()

    private func fetch(_ request: CatalogueRequest, on session: URLSession = testSession, cache: ResponseCache? = nil) -> Result<Catalogue, Error> {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [log], responseCache: cache ?? self.cache)
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1)
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    /// A route answering `status` with `headers` and a catalogue; returns its URL and the requests it saw.
    private func route(status: Int = 200, _ headers: [String: String]) -> (URL, SeenRequests) {
        versionedRoute { _, _ in (status, headers, 1) }
    }

    /// Fetches `request` twice and checks that both went to the server, each told `.notStored(reason:)`.
    private func assertNotStoredTwice(
        _ request: CatalogueRequest, seen: SeenRequests, reason: NotStoredReason, on session: URLSession = testSession,
        cache: ResponseCache? = nil, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        for _ in 0..<2 { _ = try fetch(request, on: session, cache: cache).get() }
        XCTAssertEqual(seen.all.count, 2, "nothing was stored, so both went to the server", file: file, line: line)
        let once: [CacheMonitorLog.Entry] = [.event(.miss(revalidating: false)), .event(.notStored(reason: reason))]
        let notice: [CacheMonitorLog.Entry] = reason.isRefusal ? [.notice(.notStored(reason: reason.description))] : []
        XCTAssertEqual(log.entries, once + notice + once + notice, file: file, line: line)
    }

    // MARK: - The rules of RFC 9111

    func testNoStoreInTheResponseIsTold() throws {
        let (url, seen) = route(["Cache-Control": "no-store, max-age=600"])
        try assertNotStoredTwice(CatalogueRequest(url: url), seen: seen, reason: .noStore)
    }

    func testNoStoreInTheRequestIsTold() throws {
        let (url, seen) = route(["Cache-Control": "max-age=600"])
        try assertNotStoredTwice(CatalogueRequest(url: url, headers: ["Cache-Control": "no-store"]), seen: seen, reason: .noStore)
    }

    func testVaryStarIsTold() throws {
        let (url, seen) = route(["Cache-Control": "max-age=600", "Vary": "Accept, *"])
        try assertNotStoredTwice(CatalogueRequest(url: url), seen: seen, reason: .varyAll)
    }

    func testAStatusTheCacheDoesNotKeepIsTold() throws {
        let (url, seen) = route(status: 201, ["Cache-Control": "max-age=600"])
        try assertNotStoredTwice(CatalogueRequest(url: url), seen: seen, reason: .statusNotCacheable(201))
    }

    func testAResponseWithNeitherFreshnessNorValidatorIsTold() throws {
        // The most common answer of an API: no Cache-Control, no ETag
        let (url, seen) = route([:])
        try assertNotStoredTwice(CatalogueRequest(url: url), seen: seen, reason: .noFreshnessOrValidator)
    }

    func testAnEntryLargerThanTheMaximumIsToldWithItsSize() throws {
        // Given a cache that keeps entries of up to 100 bytes: the body alone is larger
        let small = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil, maximumEntrySize: 100)
        let path = "/not-stored/large/\(UUID().uuidString)"
        let seen = SeenRequests()
        let body = Data(#"{"version":1,"path":"\#(path)","padding":"\#(String(repeating: "x", count: 200))"}"#.utf8)
        server.route(path) { request in
            seen.append(request)
            return LoopbackResponse(headers: ["Cache-Control": "max-age=600", "Content-Type": "application/json"], body: body)
        }
        try assertNotStoredTwice(
            CatalogueRequest(url: server.url(path)), seen: seen, reason: .tooLarge(bytes: body.count, limit: 100), cache: small)
    }

    func testAnEntryWhoseHeadersMakeItTooLargeIsTold() throws {
        // Given a cache that keeps entries of up to 2 KiB, and a small body with 10 kB of headers
        let small = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil, maximumEntrySize: 2048)
        let (url, seen) = route(["Cache-Control": "max-age=600", "X-Padding": String(repeating: "p", count: 10_000)])

        // When it is fetched twice, then both go to the server, and each time the event names a size over 2 KiB
        for _ in 0..<2 { _ = try fetch(CatalogueRequest(url: url), cache: small).get() }
        XCTAssertEqual(seen.all.count, 2)
        let reasons = log.events.compactMap { if case let .notStored(reason) = $0 { return reason } else { return nil } }
        XCTAssertEqual(reasons.count, 2, "\(log.entries)")
        for reason in reasons {
            guard case let .tooLarge(bytes, limit) = reason else { return XCTFail("\(reason)") }
            XCTAssertGreaterThan(bytes, 10_000)
            XCTAssertEqual(limit, 2048)
        }
    }

    func testA304ThatMakesTheEntryNoStoreServesItAndTellsItWasDropped() throws {
        // Given an entry with a validator, whose revalidation answers 304 with no-store
        let (url, seen) = versionedRoute { index, _ in
            index == 0 ? (200, ["ETag": #""v1""#], 1) : (304, ["ETag": #""v1""#, "Cache-Control": "no-store"], 0)
        }
        _ = try fetch(CatalogueRequest(url: url)).get()
        XCTAssertEqual(log.events, [.miss(revalidating: false), .stored])
        log.reset()

        // When it is revalidated, then fetched once more
        XCTAssertEqual(try fetch(CatalogueRequest(url: url)).get().version, 1, "the stored body answers the 304")
        XCTAssertEqual(log.events, [.miss(revalidating: true), .revalidated, .notStored(reason: .noStore)])
        _ = fetch(CatalogueRequest(url: url, validHTTPStatusCodes: [200, 304]))

        // Then the last one carried no validator: the entry was removed, as the event said
        XCTAssertEqual(seen.all.count, 3)
        XCTAssertNil(seen.all.last?.headers["if-none-match"])
    }

    // MARK: - Refusals: allowed by the rules, not safe to keep

    func testARedirectedAnswerIsToldAsAnEventAndANotice() throws {
        let (target, _) = route(["Cache-Control": "max-age=600"])
        let path = "/not-stored/redirect/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            return LoopbackResponse(status: 302, headers: ["Location": target.absoluteString])
        }
        try assertNotStoredTwice(CatalogueRequest(url: server.url(path)), seen: seen, reason: .redirected)
    }

    func testAnAnswerToAChallengeTheTransportAnsweredIsTold() throws {
        // Given a route that challenges a request without credentials, and a session whose delegate answers
        let path = "/not-stored/challenge/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            guard request.headers["authorization"] != nil else {
                return LoopbackResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="not-stored""#])
            }
            return LoopbackResponse(
                headers: ["Cache-Control": "max-age=600", "Content-Type": "application/json"], body: Data(#"{"version":1,"path":"p"}"#.utf8))
        }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.urlCredentialStorage = nil
        let session = URLSession(configuration: configuration, delegate: ChallengeAnswerer(), delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }

        // When it is fetched, then the answer to the delegate's credential is not stored, and monitors are told why
        XCTAssertEqual(try fetch(CatalogueRequest(url: server.url(path)), on: session).get().version, 1)
        XCTAssertEqual(seen.all.map { $0.headers["authorization"] != nil }, [false, true])
        let reason = NotStoredReason.challengeAnsweredByTransport
        XCTAssertEqual(
            log.entries, [.event(.miss(revalidating: false)), .event(.notStored(reason: reason)), .notice(.notStored(reason: reason.description))])
    }

    func testACredentialForTheHostInTheSessionsStorageIsTold() throws {
        // Given a session whose credential storage holds a credential for the server's host, and a public page
        let (url, seen) = route(["Cache-Control": "max-age=600"])
        let session = try Self.session(withCredentialFor: url)
        defer { session.finishTasksAndInvalidate() }

        // When a request without an Authorization of its own fetches it twice, then neither answer is stored
        try assertNotStoredTwice(CatalogueRequest(url: url), seen: seen, reason: .credentialInSessionStorage, on: session)
    }

    /// A session whose credential storage holds a Basic credential for `url`'s host and port.
    static func session(withCredentialFor url: URL) throws -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let storage = URLCredentialStorage()
        let space = URLProtectionSpace(
            host: try XCTUnwrap(url.host), port: try XCTUnwrap(url.port), protocol: "http", realm: UUID().uuidString,
            authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        let credential = URLCredential(user: "ada", password: "secret", persistence: .forSession)
        storage.setDefaultCredential(credential, for: space)
        configuration.urlCredentialStorage = storage
        return URLSession(configuration: configuration)
    }

    func testEveryReasonHasASentenceWithoutSecrets() {
        let reasons: [NotStoredReason] = [
            .noStore, .varyAll, .statusNotCacheable(500), .noFreshnessOrValidator, .tooLarge(bytes: 9, limit: 8), .redirected,
            .challengeAnsweredByTransport, .credentialInSessionStorage,
        ]
        XCTAssertEqual(Set(reasons.map(\.description)).count, reasons.count, "each reason reads differently")
        XCTAssertEqual(reasons.filter(\.isRefusal), [.redirected, .challengeAnsweredByTransport, .credentialInSessionStorage])
        XCTAssertTrue(NotStoredReason.statusNotCacheable(500).description.contains("500"))
        XCTAssertTrue(NotStoredReason.tooLarge(bytes: 9, limit: 8).description.contains("9 bytes"))
    }
}
