#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The response cache with credentials: a `TokenAuthenticator` on the queue (its token in `Authorization` or in a
/// header of another name), a request's own `Authorization` beside a credential in the session's storage, and a cache
/// in memory only.
final class CacheCredentialTests: CacheTestCase {
    private let log = CacheMonitorLog()

    /// A queue with `authenticator`, the log as its monitor, and this test's cache.
    private func queue(_ authenticator: TokenAuthenticator?, cache: ResponseCache? = nil) -> OperationQueue {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: authenticator, monitors: [log], responseCache: cache ?? self.cache)
        return queue
    }

    private func get(_ request: CatalogueRequest, on queue: OperationQueue, session: URLSession = testSession) throws -> Catalogue {
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1)
        return try (results.values.first ?? .failure(RequestQueueError.misuse("no completion"))).get()
    }

    /// A private page that answers each token with its own version (`TOKEN-A` 1, `TOKEN-B` 2, none 0), read from
    /// `header`; `cacheControl` decides how long it may be kept.
    private func pagePerToken(in header: String, cacheControl: [String: String] = ["Cache-Control": "private, max-age=600"]) -> (URL, SeenRequests) {
        versionedRoute { _, request in
            let version = ["Bearer TOKEN-A": 1, "Bearer TOKEN-B": 2][request.headers[header.lowercased()] ?? ""] ?? 0
            return (200, cacheControl, version)
        }
    }

    private func authenticator(_ token: String, header: String) -> TokenAuthenticator {
        TokenAuthenticator(
            token: token, authorize: { request, token in request.setValue("Bearer \(token)", forHTTPHeaderField: header) },
            refresh: { _, completion in completion(.success("TOKEN-B")) })
    }

    // MARK: - TokenAuthenticator

    func testAQueueWithAnAuthenticatorStoresAndServes() throws {
        for header in ["Authorization", "X-Api-Token"] {
            log.reset()
            let (url, seen) = pagePerToken(in: header)
            let queue = queue(authenticator("TOKEN-A", header: header))
            XCTAssertEqual(try get(CatalogueRequest(url: url), on: queue).version, 1)
            XCTAssertEqual(try get(CatalogueRequest(url: url), on: queue).version, 1)
            XCTAssertEqual(seen.all.count, 1, "\(header): the second came from the cache")
            XCTAssertEqual(log.events, [.miss(revalidating: false), .stored, .hit], header)
        }
    }

    func testTokenAAndTokenBNeverShareAnEntryWhateverHeaderCarriesThem() throws {
        for header in ["Authorization", "X-Api-Token"] {
            // Given a queue whose authenticator sends token A, and a private page stored for A
            let (url, seen) = pagePerToken(in: header)
            let tokens = authenticator("TOKEN-A", header: header)
            let queue = queue(tokens)
            XCTAssertEqual(try get(CatalogueRequest(url: url), on: queue).version, 1)

            // When the user switches to token B, and back to A
            tokens.setToken("TOKEN-B")
            let forB = try get(CatalogueRequest(url: url), on: queue)
            let forBAgain = try get(CatalogueRequest(url: url), on: queue)
            tokens.setToken("TOKEN-A")
            let forA = try get(CatalogueRequest(url: url), on: queue)

            // Then B gets B's page from the server (then from the cache), and A is never answered with B's
            XCTAssertEqual(forB.version, 2, header)
            XCTAssertEqual(forBAgain.version, 2, header)
            XCTAssertEqual(forA.version, 1, header)
            XCTAssertEqual(seen.all.map { $0.headers[header.lowercased()] }, ["Bearer TOKEN-A", "Bearer TOKEN-B", "Bearer TOKEN-A"], header)
            // And no token was written to disk
            for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
                let contents = try Data(contentsOf: directory.appendingPathComponent(name))
                XCTAssertNil(contents.range(of: Data("TOKEN-".utf8)), "\(header): a token in \(name)")
            }
        }
    }

    func testAfterATokenRefreshTheOldTokensEntryIsMissedNotRevalidated() throws {
        // Given a page with a validator only (revalidated every time), stored for token A in X-Api-Token; then the
        // server stops accepting A
        let rejectsA = Flag()
        let (url, seen) = versionedRoute { _, request in
            let token = request.headers["x-api-token"]
            if token == "Bearer TOKEN-A", rejectsA.isSet { return (401, [:], 0) }
            if request.headers["if-none-match"] == #""v1""# { return (304, ["ETag": #""v1""#], 0) }
            return (200, ["ETag": #""v1""#], token == "Bearer TOKEN-B" ? 2 : 1)
        }
        let queue = queue(authenticator("TOKEN-A", header: "X-Api-Token"))
        XCTAssertEqual(try get(CatalogueRequest(url: url), on: queue).version, 1)
        rejectsA.set()
        log.reset()

        // When it is fetched again: A's revalidation gets a 401, the token is refreshed to B, and the request is resent
        let afterRefresh = try get(CatalogueRequest(url: url), on: queue)

        // Then B's request carried none of A's validators (A's entry is simply missed), and B's answer was stored
        XCTAssertEqual(afterRefresh.version, 2)
        XCTAssertEqual(seen.all.count, 3)
        XCTAssertEqual(seen.all[1].headers["if-none-match"], #""v1""#, "A revalidated its own entry")
        XCTAssertEqual(seen.all[2].headers["x-api-token"], "Bearer TOKEN-B")
        XCTAssertNil(seen.all[2].headers["if-none-match"], "B must not revalidate A's entry")
        XCTAssertEqual(
            log.events, [.miss(revalidating: true), .notStored(reason: .statusNotCacheable(401)), .miss(revalidating: false), .stored])
    }

    // MARK: - The request's own Authorization beside the session's credential storage

    func testARequestsOwnAuthorizationIsStoredForItEvenWhenTheSessionStoresACredentialForTheHost() throws {
        // Given a session whose credential storage holds a credential for the host, and a page per token
        let (url, seen) = pagePerToken(in: "Authorization")
        let session = try CacheNotStoredTests.session(withCredentialFor: url)
        defer { session.finishTasksAndInvalidate() }
        let queue = queue(nil)
        let mine = CatalogueRequest(url: url, headers: ["Authorization": "Bearer TOKEN-A"])

        // When a request with its own Authorization is fetched twice, then with another, then with none
        XCTAssertEqual(try get(mine, on: queue, session: session).version, 1)
        XCTAssertEqual(try get(mine, on: queue, session: session).version, 1)
        let other = try get(CatalogueRequest(url: url, headers: ["Authorization": "Bearer TOKEN-B"]), on: queue, session: session)
        let none = try get(CatalogueRequest(url: url), on: queue, session: session)

        // Then the first is stored for what it sent and served from the cache; the others go to the server and get
        // their own pages, and the one without an Authorization of its own (which the transport could add to) is not
        // stored
        XCTAssertEqual(other.version, 2)
        XCTAssertEqual(none.version, 0)
        XCTAssertEqual(seen.all.map { $0.headers["authorization"] }, ["Bearer TOKEN-A", "Bearer TOKEN-B", nil])
        XCTAssertEqual(
            log.events,
            [
                .miss(revalidating: false), .stored, .hit, .miss(revalidating: false), .stored, .miss(revalidating: false),
                .notStored(reason: .credentialInSessionStorage),
            ])
    }

    // MARK: - In memory only

    func testAnInMemoryCacheStoresAndServesAndWritesNoFile() throws {
        // Given the user's caches directory moved to an empty folder of this test (XDG_CACHE_HOME, read by Foundation
        // on Linux at each call), so that the default directory can be watched
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("xdg-\(UUID().uuidString)", isDirectory: true)
        let previous = ProcessInfo.processInfo.environment["XDG_CACHE_HOME"]
        setenv("XDG_CACHE_HOME", home.path, 1)
        addTeardownBlock {
            if let previous { setenv("XDG_CACHE_HOME", previous, 1) } else { unsetenv("XDG_CACHE_HOME") }
            try? FileManager.default.removeItem(at: home)
        }
        guard ResponseCache.defaultDirectory.path.hasPrefix(home.path) else {
            throw XCTSkip("the caches directory does not follow XDG_CACHE_HOME on this platform")
        }
        let (url, seen) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }

        // When an in-memory cache stores a response and serves it
        let memory = ResponseCache.inMemory()
        XCTAssertEqual(try get(CatalogueRequest(url: url), on: queue(nil, cache: memory)).version, 1)
        XCTAssertEqual(try get(CatalogueRequest(url: url), on: queue(nil, cache: memory)).version, 1)

        // Then it was served from memory, and nothing exists in the caches folder: not even the folder
        XCTAssertEqual(seen.all.count, 1)
        XCTAssertEqual(log.events, [.miss(revalidating: false), .stored, .hit])
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path), "the in-memory cache touched the disk")
        XCTAssertNil(memory.storage.directory)
        XCTAssertEqual(memory.maximumEntrySize, (10 << 20) / 4)

        // And the default cache, as a control, does write there: the check above could see a file
        let onDisk = ResponseCache()
        let (other, _) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        _ = try get(CatalogueRequest(url: other), on: queue(nil, cache: onDisk))
        let written = try FileManager.default.contentsOfDirectory(atPath: ResponseCache.defaultDirectory.path)
        XCTAssertFalse(written.isEmpty)
    }
}

/// A flag set once, read from any thread.
private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
