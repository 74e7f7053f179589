#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Records cache events and notices.
private final class TrustRecorder: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var recordedEvents: [CacheEvent] = []
    private var recordedNotices: [RequestNotice] = []
    func requestDidUseCache(_ attempt: RequestAttempt, event: CacheEvent) { lock.withLock { recordedEvents.append(event) } }
    func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice) { lock.withLock { recordedNotices.append(notice) } }
    var events: [CacheEvent] { lock.withLock { recordedEvents } }
    var notices: [RequestNotice] { lock.withLock { recordedNotices } }
}

/// Answers every task-level challenge with a credential.
private final class CredentialGiver: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    let credential: URLCredential
    init(_ credential: URLCredential) { self.credential = credential }
    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        completionHandler(.useCredential, credential)
    }
}

/// The response cache where data crosses a trust boundary: a redirect to another origin, credentials the app did not
/// set (the transport's, the cookie store's, the URL's), secrets on disk, hostile freshness values and headers.
/// Two loopback servers on two ports are two origins.
final class CacheTrustTests: CacheTestCase {
    private let recorder = TrustRecorder()

    private func fetch(_ request: CatalogueRequest, on session: URLSession = testSession, cache: ResponseCache? = nil) -> Result<Catalogue, Error> {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [recorder], responseCache: cache ?? self.cache)
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1)
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    /// A route that counts its requests and answers a catalogue of `version(request)` with `headers`.
    private func route(
        on server: LoopbackServer? = nil, headers: [String: String],
        version: @escaping @Sendable (LoopbackRequest) -> Int = { _ in 1 }
    ) -> (URL, SeenRequests) {
        let server = server ?? self.server
        let path = "/trust/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            var headers = headers
            headers["Content-Type"] = "application/json"
            return LoopbackResponse(headers: headers, body: Data(#"{"version":\#(version(request)),"path":"\#(path)"}"#.utf8))
        }
        return (server.url(path), seen)
    }

    /// Every byte the cache wrote to disk, file by file.
    private func filesOnDisk() throws -> [(name: String, contents: Data, mode: Int)] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).map { name in
            let path = directory.appendingPathComponent(name).path
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int ?? -1
            return (name, try Data(contentsOf: URL(fileURLWithPath: path)), mode)
        }
    }

    // MARK: - Redirects

    func testAnAnswerThatCameThroughARedirectIsNeverStoredUnderTheURLAskedFor() throws {
        // Given origin B, whose answer may be kept for a day, and origin A, which answers 302 (no-store) to B
        let other = try LoopbackServer()
        defer { other.stop() }
        let (target, targetSeen) = route(on: other, headers: ["Cache-Control": "max-age=100000"], version: { _ in 2 })
        let redirectSeen = SeenRequests()
        server.route("/trust/redirecting") { request in
            redirectSeen.append(request)
            return LoopbackResponse(status: 302, headers: ["Location": target.absoluteString, "Cache-Control": "no-store"])
        }
        let origin = server.url("/trust/redirecting")

        // When A is asked twice
        let first = try fetch(CatalogueRequest(url: origin)).get()
        let second = try fetch(CatalogueRequest(url: origin)).get()

        // Then A is asked both times: B's answer was not stored under A's URL, and monitors were told why
        XCTAssertEqual(first.version, 2)
        XCTAssertEqual(second.version, 2)
        XCTAssertEqual(redirectSeen.all.count, 2, "A must be asked again: nothing may be stored under its URL")
        XCTAssertEqual(targetSeen.all.count, 2)
        XCTAssertFalse(recorder.events.contains(.stored), "\(recorder.events)")
        XCTAssertTrue(recorder.notices.contains { if case .notStored = $0 { return true } else { return false } }, "\(recorder.notices)")
        XCTAssertNil(cache.entry(for: try XCTUnwrap(CacheableRequest(URLRequest(url: origin), session: testSession))))
    }

    // MARK: - Credentials the app did not set

    func testVaryOnCookieComparesTheCookieTheSessionSentSoALogoutNeverSeesThePreviousUsersPage() throws {
        // Given a session whose cookie store holds a session cookie, and a page that varies on it
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let cookies = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: UUID().uuidString)
        configuration.httpCookieStorage = cookies
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (url, seen) = route(headers: ["Cache-Control": "private, max-age=600", "Vary": "Cookie"]) { request in
            request.headers["cookie"]?.contains("session=alice") == true ? 100 : 0
        }
        let cookie = try XCTUnwrap(
            HTTPCookie(properties: [.name: "session", .value: "alice", .domain: try XCTUnwrap(url.host), .path: "/", .originURL: url]))
        cookies.setCookie(cookie)

        // When Alice's page is fetched (and again, from the cache), then she logs out (the cookie is deleted)
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), on: session).get().version, 100)
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), on: session).get().version, 100)
        XCTAssertEqual(seen.all.count, 1, "the same cookie is served from the cache")
        cookies.deleteCookie(cookie)
        let afterLogout = try fetch(CatalogueRequest(url: url), on: session).get()

        // Then the page after the logout comes from the server, not Alice's from the cache
        XCTAssertEqual(afterLogout.version, 0)
        XCTAssertEqual(seen.all.count, 2)
        XCTAssertNil(seen.all.last?.headers["cookie"])
    }

    func testAResponseThatSetsACookieIsKeptForThatCookieAndTheCookieIsNotWrittenToDisk() throws {
        // Given a page that sets a session cookie (and does not say `Vary: Cookie`), fetched on a session with a
        // cookie store
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let cookies = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: UUID().uuidString)
        configuration.httpCookieStorage = cookies
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (url, seen) = route(headers: ["Cache-Control": "max-age=600", "Set-Cookie": "session=COOKIE-SECRET-42; Path=/"])

        // When it is fetched, then fetched again carrying the cookie it set (put in the store here: corelibs keeps
        // no cookie an IP-address host sets)
        _ = try fetch(CatalogueRequest(url: url), on: session).get()
        if cookies.cookies(for: url)?.isEmpty != false {
            cookies.setCookie(
                try XCTUnwrap(HTTPCookie(properties: [.name: "session", .value: "COOKIE-SECRET-42", .domain: try XCTUnwrap(url.host), .path: "/"])))
        }
        _ = try fetch(CatalogueRequest(url: url), on: session).get()

        // Then the second, which carries a cookie the first did not, is not answered by the first's entry
        XCTAssertEqual(seen.all.count, 2)
        XCTAssertEqual(seen.all.last?.headers["cookie"], "session=COOKIE-SECRET-42")
        // And the cookie's value is nowhere on disk
        let files = try filesOnDisk()
        XCTAssertFalse(files.isEmpty)
        for file in files {
            XCTAssertNil(file.contents.range(of: Data("COOKIE-SECRET-42".utf8)), file.name)
        }
    }

    /// A route that answers 200 with a private, cacheable catalogue to `ada:secret`, and 401 with a Basic challenge
    /// for `realm` otherwise.
    private func protectedRoute(realm: String) -> (URL, SeenRequests) {
        let path = "/trust/basic/\(UUID().uuidString)"
        let expected = "Basic " + Data("ada:secret".utf8).base64EncodedString()
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            guard request.headers["authorization"] == expected else {
                return LoopbackResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="\#(realm)""#])
            }
            return LoopbackResponse(
                headers: ["Cache-Control": "private, max-age=600", "Content-Type": "application/json"],
                body: Data(#"{"version":7,"path":"\#(path)"}"#.utf8))
        }
        return (server.url(path), seen)
    }

    func testAnAnswerToACredentialFromTheSessionsStorageIsNeverServedToASessionWithout() throws {
        // Given a session whose credential storage answers the route's 401 challenge
        let realm = UUID().uuidString
        let (url, seen) = protectedRoute(realm: realm)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let storage = URLCredentialStorage()
        configuration.urlCredentialStorage = storage
        let space = URLProtectionSpace(
            host: try XCTUnwrap(url.host), port: try XCTUnwrap(url.port), protocol: "http", realm: realm,
            authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
        let credential = URLCredential(user: "ada", password: "secret", persistence: .forSession)
        storage.setDefaultCredential(credential, for: space)
        addTeardownBlock { storage.remove(credential, for: space) }
        let authenticated = URLSession(configuration: configuration)
        defer { authenticated.finishTasksAndInvalidate() }

        // When it is fetched with that session, then with one that has no credentials, through one cache
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), on: authenticated).get().version, 7)
        let anonymous = fetch(CatalogueRequest(url: url), on: testSession)

        // Then the second goes to the server and gets its 401: the private answer was not stored
        XCTAssertEqual((anonymous.failure as? RequestQueueError)?.statusCode, 401, "\(anonymous)")
        XCTAssertEqual(seen.all.last?.headers["authorization"], nil)
        XCTAssertFalse(recorder.events.contains(.stored), "\(recorder.events)")
        XCTAssertTrue(recorder.notices.contains { if case .notStored = $0 { return true } else { return false } }, "\(recorder.notices)")
    }

    func testAnAnswerToACredentialTheDelegateSuppliedIsNotStored() throws {
        // Given a session whose delegate answers the route's challenge (the cache cannot see that credential)
        let (url, seen) = protectedRoute(realm: UUID().uuidString)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.urlCredentialStorage = nil
        let giver = CredentialGiver(URLCredential(user: "ada", password: "secret", persistence: .none))
        let authenticated = URLSession(configuration: configuration, delegate: giver, delegateQueue: nil)
        defer { authenticated.finishTasksAndInvalidate() }

        // When it is fetched with that session, then without credentials
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), on: authenticated).get().version, 7)
        let anonymous = fetch(CatalogueRequest(url: url), on: testSession)

        // Then the second is refused by the server, not served from the cache
        XCTAssertEqual((anonymous.failure as? RequestQueueError)?.statusCode, 401, "\(anonymous)")
        XCTAssertGreaterThanOrEqual(seen.all.count, 3, "401, the credentialed 200, then the anonymous request")
        XCTAssertFalse(recorder.events.contains(.stored), "\(recorder.events)")
    }

    func testEachCredentialHasItsOwnEntriesAndNoneIsWrittenToDisk() throws {
        // Given a private page whose body depends on the caller, fetched with two tokens (as an authenticator sets
        // them), with URL user info, and without a credential
        let (url, seen) = route(headers: ["Cache-Control": "private, max-age=600"]) { request in
            switch request.headers["authorization"] {
            case "Bearer TOKEN-OF-ALICE"?: return 1
            case "Bearer TOKEN-OF-BOB"?: return 2
            case let other?: return other.hasPrefix("Basic") ? 3 : -1
            case nil: return 0
            }
        }
        let alice = CatalogueRequest(url: url, headers: ["Authorization": "Bearer TOKEN-OF-ALICE"])
        let bob = CatalogueRequest(url: url, headers: ["Authorization": "Bearer TOKEN-OF-BOB"])

        // When Alice fetches it twice, then Bob, then nobody
        XCTAssertEqual(try fetch(alice).get().version, 1)
        XCTAssertEqual(try fetch(alice).get().version, 1)
        XCTAssertEqual(seen.all.count, 1, "Alice's second answer came from the cache: a token gets caching of its own")
        try assertNoSecretOnDisk()
        XCTAssertEqual(try fetch(bob).get().version, 2)
        XCTAssertEqual(try fetch(CatalogueRequest(url: url)).get().version, 0)

        // Then nobody is ever answered with another's page
        XCTAssertEqual(seen.all.count, 3)

        // And with user info in the URL: the user and password are sent, and never written to disk
        var components = try XCTUnwrap(URLComponents(url: url, resolvingAgainstBaseURL: false))
        components.user = "mallory"
        components.password = "PASSWORD-IN-URL"
        XCTAssertEqual(try fetch(CatalogueRequest(url: try XCTUnwrap(components.url))).get().version, 3)
        try assertNoSecretOnDisk()
        XCTAssertEqual(try fetch(CatalogueRequest(url: url)).get().version, 0, "the anonymous request does not get Mallory's page")
    }

    private func assertNoSecretOnDisk(file: StaticString = #filePath, line: UInt = #line) throws {
        let files = try filesOnDisk()
        XCTAssertFalse(files.isEmpty, file: file, line: line)
        for stored in files {
            for secret in ["TOKEN-OF-ALICE", "TOKEN-OF-BOB", "mallory", "PASSWORD-IN-URL"] {
                XCTAssertNil(stored.contents.range(of: Data(secret.utf8)), "\(secret) in \(stored.name)", file: file, line: line)
            }
        }
    }

    func testAQueueWithATokenAuthenticatorCachesForItsOwnToken() throws {
        // Given a queue whose authenticator sets Alice's token, and a private page
        let (url, seen) = route(headers: ["Cache-Control": "private, max-age=600"]) { request in
            request.headers["authorization"] == "Bearer alice" ? 1 : 2
        }
        let tokens = TokenAuthenticator(token: "alice") { _, completion in completion(.success("alice")) }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(authenticator: tokens, monitors: [recorder], responseCache: cache)
        func get() throws -> Catalogue {
            let results = Recorder<Result<Catalogue, Error>>()
            queue.addRequest(CatalogueRequest(url: url), session: testSession) { results.append($0) }
            queue.waitUntilAllOperationsAreFinished()
            return try XCTUnwrap(results.values.first).get()
        }

        // When it is fetched twice, then again after the user switched
        XCTAssertEqual(try get().version, 1)
        XCTAssertEqual(try get().version, 1)
        XCTAssertEqual(seen.all.count, 1, "the second came from the cache")
        tokens.setToken("bob")

        // Then Bob is answered by the server, not with Alice's page
        XCTAssertEqual(try get().version, 2)
        XCTAssertEqual(seen.all.count, 2)
    }

    func testVaryComparesTheHeadersTheSessionAdds() throws {
        // Given two sessions that add another Accept-Language, and a page that varies on it
        let (url, seen) = route(headers: ["Cache-Control": "max-age=600", "Vary": "Accept-Language"]) { request in
            request.headers["accept-language"] == "fr" ? 33 : 44
        }
        func session(language: String) -> URLSession {
            let configuration = URLSessionConfiguration.ephemeral
            configuration.urlCache = nil
            configuration.httpAdditionalHeaders = ["Accept-Language": language]
            return URLSession(configuration: configuration)
        }
        let french = session(language: "fr")
        let german = session(language: "de")
        defer { [french, german].forEach { $0.finishTasksAndInvalidate() } }

        // When each fetches it
        XCTAssertEqual(try fetch(CatalogueRequest(url: url), on: french).get().version, 33)
        let other = try fetch(CatalogueRequest(url: url), on: german).get()

        // Then the second is not answered with the first's language
        XCTAssertEqual(other.version, 44)
        XCTAssertEqual(seen.all.count, 2)
    }

    // MARK: - Files

    func testTheCacheFolderAndItsFilesAreTheUsersAlone() throws {
        let (url, _) = route(headers: ["Cache-Control": "max-age=600", "Vary": "Accept"])
        _ = try fetch(CatalogueRequest(url: url, headers: ["Accept": "application/json"])).get()
        let folderMode = try FileManager.default.attributesOfItem(atPath: directory.path)[.posixPermissions] as? Int
        XCTAssertEqual(folderMode, 0o700)
        let files = try filesOnDisk()
        XCTAssertGreaterThanOrEqual(files.count, 2, "the entry and the partition key")
        for file in files {
            XCTAssertEqual(file.mode, 0o600, file.name)
        }
    }

    func testAFolderOfAnotherKindOrALinkIsNotUsedForTheCache() throws {
        // Given a cache directory that is a link to a victim folder
        let victim = FileManager.default.temporaryDirectory.appendingPathComponent("victim-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: victim, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: victim) }
        try FileManager.default.createSymbolicLink(at: directory, withDestinationURL: victim)
        let (url, seen) = route(headers: ["Cache-Control": "max-age=600"])

        // When responses are stored (the memory layer still works)
        _ = try fetch(CatalogueRequest(url: url)).get()
        _ = try fetch(CatalogueRequest(url: url)).get()
        XCTAssertEqual(seen.all.count, 1)

        // Then nothing was written through the link, and the victim's mode is untouched
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: victim.path), [])
    }

    // MARK: - Hostile values

    func testFreshnessLifetimesThatAreNotDeltaSecondsAreStale() throws {
        for value in ["inf", "1e308", "0x10", "+5", "-1", "5.5", "nan", " 60x"] {
            let (url, seen) = route(headers: ["Cache-Control": "max-age=\(value)"])
            _ = try fetch(CatalogueRequest(url: url)).get()
            _ = try fetch(CatalogueRequest(url: url)).get()
            XCTAssertEqual(seen.all.count, 2, "max-age=\(value) must not make the response fresh")
        }
        // A huge digit string is 2^31 seconds: fresh, and no trap
        let (url, seen) = route(headers: ["Cache-Control": "max-age=999999999999999999999999999999"])
        _ = try fetch(CatalogueRequest(url: url)).get()
        _ = try fetch(CatalogueRequest(url: url)).get()
        XCTAssertEqual(seen.all.count, 1)
        XCTAssertEqual(CacheControl.deltaSeconds("0060"), 60)
        XCTAssertNil(CacheControl.deltaSeconds(""))
    }

    func testTheEntrySizeCountsTheHeaders() throws {
        // Given a cache that keeps entries of up to 2 KiB, and a small body with 60 kB of headers
        let small = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil, maximumEntrySize: 2048)
        var padding: [String: String] = ["Cache-Control": "max-age=600"]
        for index in 0..<6 { padding["X-Padding-\(index)"] = String(repeating: "p", count: 10_000) }
        let (padded, paddedSeen) = route(headers: padding)
        let (plain, plainSeen) = route(headers: ["Cache-Control": "max-age=600"])

        // When each is fetched twice
        for _ in 0..<2 {
            _ = try fetch(CatalogueRequest(url: padded), cache: small).get()
            _ = try fetch(CatalogueRequest(url: plain), cache: small).get()
        }

        // Then only the one that fits, headers included, was stored
        XCTAssertEqual(paddedSeen.all.count, 2)
        XCTAssertEqual(plainSeen.all.count, 1)
    }
}
