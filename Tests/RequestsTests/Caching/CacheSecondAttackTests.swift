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

/// A GET with `httpShouldHandleCookies` chosen by the caller.
struct CookieFlagRequest: DecodableRequest {
    typealias Success = Catalogue
    let url: URL
    var handlesCookies = true
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpShouldHandleCookies = handlesCookies
        completion(.success(request))
    }
}

/// A second outside attack on the response cache (2026-11-26, issue #32), after the first attack's fixes; kept as
/// regression tests. Each test asserts the safe behaviour.
final class CacheSecondAttackTests: CacheTestCase {
    private func cookieSession() -> (URLSession, HTTPCookieStorage) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let cookies = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: UUID().uuidString)
        configuration.httpCookieStorage = cookies
        return (URLSession(configuration: configuration), cookies)
    }

    private func cookie(_ name: String, _ value: String, host: String) -> HTTPCookie {
        HTTPCookie(properties: [.name: name, .value: value, .domain: host, .path: "/", .originURL: URL(string: "http://\(host)/")!])!
    }

    // MARK: - 1. httpShouldHandleCookies = false: corelibs still sends the store's cookies

    /// `CacheableRequest` reads no cookies when `request.httpShouldHandleCookies` is false, but on Linux the
    /// transport (`URLSession._Configuration.setCookies(on:)`) ignores that flag and sends the store's cookies anyway.
    /// A private page is then partitioned as if no cookie were sent: after a user switch in the cookie store, the
    /// next user gets the previous user's private page from the cache.
    func testCookiesTheTransportSendsDespiteHttpShouldHandleCookiesFalsePartitionAPrivatePage() throws {
        let (session, cookies) = cookieSession()
        defer { session.finishTasksAndInvalidate() }
        let (url, seen) = versionedRoute { _, request in
            (200, ["Cache-Control": "private, max-age=600"], request.headers["cookie"]?.contains("session=alice") == true ? 100 : 200)
        }
        func set(_ value: String) {
            cookies.cookies?.forEach(cookies.deleteCookie)
            cookies.setCookie(cookie("session", value, host: url.host!))
        }
        set("alice")
        if isOnCurl(session) {
            // libcurl's transfers honour the flag: no cookie is sent, and the page is nobody's.
            XCTAssertEqual(try fetchCatalogue(CookieFlagRequest(url: url, handlesCookies: false), on: session).get().version, 200)
            XCTAssertNil(seen.all.first?.headers["cookie"])
            return
        }
        XCTAssertEqual(try fetchCatalogue(CookieFlagRequest(url: url, handlesCookies: false), on: session).get().version, 100)
        XCTAssertEqual(seen.all.first?.headers["cookie"], "session=alice", "the transport sent the cookie although httpShouldHandleCookies is false")
        set("bob")
        let bob = try fetchCatalogue(CookieFlagRequest(url: url, handlesCookies: false), on: session).get()
        XCTAssertEqual(bob.version, 200, "bob (whose cookie the transport sent) was served alice's private page from the cache")
    }

    // MARK: - 2. Cookie order: the Cookie header's order follows a Dictionary's order

    /// The cookies of a URL come from corelibs' `HTTPCookieStorage.cookies(for:)`, in the order of a Swift Dictionary
    /// (`allCookies.values`): it changes when the dictionary grows (any cookie set for any host) and from one process
    /// to the next (per-process hash seed). The partition digests the header string as is, so the same cookies in
    /// another order miss: a private page is fetched again although nothing about the user changed.
    func testTheSameCookiesInAnotherOrderStillHit() throws {
        let (session, cookies) = cookieSession()
        defer { session.finishTasksAndInvalidate() }
        let (url, seen) = versionedRoute { _, _ in (200, ["Cache-Control": "private, max-age=600"], 1) }
        let host = url.host!
        for name in ["sid", "csrf", "lang", "theme", "consent", "ab"] { cookies.setCookie(cookie(name, "v-\(name)", host: host)) }
        _ = try fetchCatalogue(CookieFlagRequest(url: url), on: session).get()
        // Another host's cookies arrive (another API, a login elsewhere): the store's dictionary grows.
        for n in 0..<60 { cookies.setCookie(cookie("other\(n)", "x", host: "other\(n).example")) }
        _ = try fetchCatalogue(CookieFlagRequest(url: url), on: session).get()
        let sent = seen.all.map { $0.headers["cookie"] ?? "" }
        XCTAssertEqual(
            seen.all.count, 1,
            "the same six cookies, reordered, missed the cache. Sent: \(sent)")
    }

    // MARK: - 3. A damaged partition-key file is never repaired

    /// A `partition-key` that is not 32 bytes (a crash between the O_EXCL create and the write, a full disk) is
    /// refused, and the new key cannot be written over it (O_EXCL): every run uses a random in-memory key, so the disk
    /// cache never hits again across runs, silently, for ever (`removeAll()` keeps the file too).
    func testADamagedPartitionKeyIsRepairedSoTheDiskCacheWorksAcrossRuns() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let keyFile = directory.appendingPathComponent("partition-key")
        XCTAssertTrue(FileManager.default.createFile(atPath: keyFile.path, contents: Data(), attributes: [.posixPermissions: 0o600]))
        let (url, seen) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        let run1 = ResponseCache(memoryCapacity: 0, diskCapacity: 4 << 20, directory: directory, maximumEntrySize: 1 << 20)
        _ = try fetchCatalogue(CatalogueRequest(url: url), cache: run1).get()
        run1.removeAll()
        _ = try fetchCatalogue(CatalogueRequest(url: url), cache: run1).get()
        // A restart: a new cache on the same folder.
        let run2 = ResponseCache(memoryCapacity: 0, diskCapacity: 4 << 20, directory: directory, maximumEntrySize: 1 << 20)
        _ = try fetchCatalogue(CatalogueRequest(url: url), cache: run2).get()
        let keySize = (try? FileManager.default.attributesOfItem(atPath: keyFile.path)[.size] as? Int) ?? -1
        XCTAssertEqual(seen.all.count, 2, "the next run missed what the previous one stored on disk (partition-key size \(keySize))")
    }

    /// Control: with a healthy folder the next run hits.
    func testTheDiskCacheHitsAcrossRuns() throws {
        let (url, seen) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        let run1 = ResponseCache(memoryCapacity: 0, diskCapacity: 4 << 20, directory: directory, maximumEntrySize: 1 << 20)
        _ = try fetchCatalogue(CatalogueRequest(url: url), cache: run1).get()
        let run2 = ResponseCache(memoryCapacity: 0, diskCapacity: 4 << 20, directory: directory, maximumEntrySize: 1 << 20)
        _ = try fetchCatalogue(CatalogueRequest(url: url), cache: run2).get()
        XCTAssertEqual(seen.all.count, 1)
    }

    // MARK: - 4. A folder of the caller's: its mode changed, its files removed

    /// `ResponseCache(directory:)` with a folder that already exists and holds the caller's files (a careless caller:
    /// an app's data folder, `~/.cache`, or as root `/tmp` itself): on first use `PrivateFolder.ensure` chmods it to
    /// 0700 and the index load unlinks every `.tmp-*` file in it. As root with
    /// `directory: FileManager.default.temporaryDirectory`, `/tmp` (owned by root) would become 0700 for every user.
    func testAnExistingFolderOfTheCallerIsNeitherChmoddedNorPurged() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("callers-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        chmod(folder.path, 0o755)
        let notes = folder.appendingPathComponent(".tmp-notes.txt")
        try Data("the caller's own file".utf8).write(to: notes)
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: folder)
        let (url, _) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        _ = try fetchCatalogue(CatalogueRequest(url: url), cache: cache).get()
        var info = stat()
        XCTAssertEqual(stat(folder.path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o755, "the caller's folder mode was changed to \(String(info.st_mode & 0o7777, radix: 8))")
        XCTAssertTrue(FileManager.default.fileExists(atPath: notes.path), "the caller's .tmp-notes.txt was deleted")
    }

    // MARK: - 5. A cookie that changes on every response: the cache never hits

    /// A load balancer's sticky cookie (AWS ALB `AWSALB`, rotated on every response) or any rolling cookie: a public
    /// `max-age=600` response that sets a cookie varies on Cookie, and the next request carries the new cookie, so
    /// it misses, and so on for ever. Five requests, five round trips, zero hits.
    func testARollingCookieDoesNotDefeatAPublicFreshResponse() throws {
        let (session, _) = cookieSession()
        defer { session.finishTasksAndInvalidate() }
        let (url, seen) = versionedRoute { n, _ in (200, ["Cache-Control": "public, max-age=600", "Set-Cookie": "AWSALB=lb\(n); Path=/"], 1) }
        for _ in 0..<5 { _ = try fetchCatalogue(CookieFlagRequest(url: url), on: session).get() }
        XCTAssertLessThanOrEqual(seen.all.count, 2, "a public max-age=600 response was fetched \(seen.all.count) times out of 5")
    }
}

/// The caller's session has Foundation's URLCache (every default configuration does): with a ResponseCache on, is a
/// private page still partitioned by the cookie sent?
final class FoundationURLCacheAttackTests: XCTestCase {
    private let server = TestServer.shared

    func testADefaultConfigurationsURLCacheDoesNotServeAnotherUsersPrivatePage() throws {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = URLCache(memoryCapacity: 4 << 20, diskCapacity: 0, diskPath: nil)
        let cookies = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: UUID().uuidString)
        configuration.httpCookieStorage = cookies
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let path = "/attack2-urlcache/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            let version = request.headers["cookie"]?.contains("session=alice") == true ? 100 : 200
            return LoopbackResponse(
                headers: ["Content-Type": "application/json", "Cache-Control": "private, max-age=600"],
                body: Data(#"{"version":\#(version),"path":"x"}"#.utf8))
        }
        let url = server.url(path)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("foundation-cache-\(UUID().uuidString)", isDirectory: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: directory)
        func fetchCatalogue() throws -> Catalogue {
            let queue = OperationQueue()
            queue.requestPolicies = RequestPolicies(responseCache: cache)
            let results = Recorder<Result<Catalogue, Error>>()
            queue.addRequest(CatalogueRequest(url: url), session: session) { results.append($0) }
            queue.waitUntilAllOperationsAreFinished()
            return try XCTUnwrap(results.values.first).get()
        }
        func set(_ value: String) {
            cookies.cookies?.forEach(cookies.deleteCookie)
            cookies.setCookie(HTTPCookie(properties: [.name: "session", .value: value, .domain: url.host!, .path: "/", .originURL: url])!)
        }
        set("alice")
        XCTAssertEqual(try fetchCatalogue().version, 100)
        set("bob")
        XCTAssertEqual(try fetchCatalogue().version, 200, "bob got alice's private page (server saw \(seen.all.count) requests)")
    }
}

final class CacheSessionHeaderTests: XCTestCase {
    private let server = TestServer.shared

    private func versionedRoute() -> (URL, SeenRequests) {
        let path = "/attack2-session/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            let version = request.headers["authorization"] == "Bearer ALICE" ? 1 : request.headers["authorization"] == "Bearer BOB" ? 2 : 0
            return LoopbackResponse(
                headers: ["Content-Type": "application/json", "Cache-Control": "max-age=600"],
                body: Data(#"{"version":\#(version),"path":"x"}"#.utf8))
        }
        return (server.url(path), seen)
    }

    private func fetchCatalogue(_ url: URL, on session: URLSession, cache: ResponseCache) throws -> Catalogue {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(responseCache: cache)
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(CatalogueRequest(url: url), session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        return try XCTUnwrap(results.values.first).get()
    }

    /// Authorization from httpAdditionalHeaders, public max-age (no Vary): each session must get its own answer.
    func testSessionAuthorizationHeadersPartition() throws {
        func session(_ token: String) -> URLSession {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.urlCache = nil
            configuration.httpAdditionalHeaders = ["authorization": "Bearer \(token)"]
            return URLSession(configuration: configuration)
        }
        let alice = session("ALICE"), bob = session("BOB")
        defer { [alice, bob].forEach { $0.finishTasksAndInvalidate() } }
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let (url, seen) = versionedRoute()
        XCTAssertEqual(try fetchCatalogue(url, on: alice, cache: cache).version, 1)
        XCTAssertEqual(try fetchCatalogue(url, on: alice, cache: cache).version, 1)
        XCTAssertEqual(try fetchCatalogue(url, on: bob, cache: cache).version, 2)
        XCTAssertEqual(try fetchCatalogue(url, on: testSession, cache: cache).version, 0)
        XCTAssertEqual(seen.all.count, 3)
    }

    /// URLSession.shared and a default configuration: a public fresh response is a hit.
    func testSharedSessionHits() throws {
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let (url, seen) = versionedRoute()
        _ = try fetchCatalogue(url, on: .shared, cache: cache)
        _ = try fetchCatalogue(url, on: .shared, cache: cache)
        let session = URLSession(configuration: .default)
        defer { session.finishTasksAndInvalidate() }
        _ = try fetchCatalogue(url, on: session, cache: cache)
        XCTAssertEqual(seen.all.count, 1)
    }
}
