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

/// An outside attack on the response cache (2026-11-26, issue #32), kept as regression tests: each test asserts the safe
/// behaviour; a comment over a test says what the attack achieved before the fix.
final class CacheAttackTests: CacheTestCase {
    private func diskContains(_ needle: String, in folder: URL? = nil) -> Bool {
        let folder = folder ?? directory!
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.contains { name in
            (FileManager.default.contents(atPath: folder.appendingPathComponent(name).path)).map { $0.range(of: Data(needle.utf8)) != nil } ?? false
        }
    }

    // MARK: - 304 refresh

    /// A 304 carrying Set-Cookie: `CachedResponse.refreshed(by:)` copies every header but the framing ones, so the
    /// Set-Cookie the init strips is written to disk and replayed with every later hit.
    func testA304sSetCookieIsNeitherStoredNorReplayed() throws {
        let (url, _) = versionedRoute { n, request in
            if n == 0 { return (200, ["ETag": "\"v1\"", "Cache-Control": "max-age=0"], 1) }
            if request.headers["if-none-match"] == "\"v1\"" {
                return (304, ["ETag": "\"v1\"", "Cache-Control": "max-age=600", "Set-Cookie": "session=SECRETCOOKIE304; Path=/"], 1)
            }
            return (200, ["ETag": "\"v1\""], 1)
        }
        XCTAssertEqual(try fetchCatalogue(CatalogueRequest(url: url)).get().version, 1)
        XCTAssertEqual(try fetchCatalogue(CatalogueRequest(url: url)).get().version, 1)  // revalidated by the 304
        XCTAssertEqual(try fetchCatalogue(CatalogueRequest(url: url)).get().version, 1)  // hit
        let entry = cache.entry(for: try XCTUnwrap(CacheableRequest(URLRequest(url: url), session: testSession)))
        let replayed = entry?.httpResponse(for: url)?.value(forHTTPHeaderField: "Set-Cookie")
        XCTAssertNil(replayed, "Set-Cookie from a 304 is replayed on every hit: \(replayed ?? "")")
        XCTAssertFalse(diskContains("SECRETCOOKIE304"), "the cookie value from a 304 is on disk")
    }

    /// A 304 that adds `Vary: X-User`: the refreshed entry's headers say Vary X-User but its `varyValues` are not
    /// recomputed, so a request with another X-User is served the entry without the server being asked.
    func testA304ThatAddsVaryIsEnforced() throws {
        let (url, seen) = versionedRoute { n, request in
            if n == 0 { return (200, ["ETag": "\"v1\"", "Cache-Control": "max-age=0"], 1) }
            if request.headers["if-none-match"] == "\"v1\"" {
                return (304, ["ETag": "\"v1\"", "Cache-Control": "max-age=600", "Vary": "X-User"], 1)
            }
            return (200, ["ETag": "\"v2\"", "Cache-Control": "max-age=600", "Vary": "X-User"], 2)
        }
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        _ = try fetchCatalogue(CatalogueRequest(url: url, headers: ["X-User": "alice"])).get()  // 304 with Vary: X-User
        let bob = try fetchCatalogue(CatalogueRequest(url: url, headers: ["X-User": "bob"])).get()
        XCTAssertEqual(seen.all.count, 3, "bob's request (another X-User under Vary: X-User) must reach the server")
        XCTAssertEqual(bob.version, 2)
    }

    /// A 304 with large headers grows the entry past maximumEntrySize (`replace` does not check the size).
    func testA304CannotGrowAnEntryPastMaximumEntrySize() throws {
        cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: directory, maximumEntrySize: 2_000)
        let padding = String(repeating: "x", count: 30_000)
        let (url, _) = versionedRoute { n, request in
            if n == 0 { return (200, ["ETag": "\"v1\"", "Cache-Control": "max-age=0"], 1) }
            return (304, ["ETag": "\"v1\"", "Cache-Control": "max-age=0", "X-Pad": padding], 1)
        }
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        let sizes = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { CacheStorage.isEntryFileName($0) }.map {
            try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent($0).path)[.size] as? Int ?? 0
        }
        XCTAssertTrue(sizes.allSatisfy { $0 <= 2_000 + 200 }, "entry larger than maximumEntrySize: \(sizes)")
    }

    // MARK: - Credentials

    /// The cookie store's cookie is a credential, but it partitions the entry only when the response says
    /// `Vary: Cookie` or sets a cookie. A user switch in the cookie store gets the previous user's page.
    func testACookieStoreUserSwitchNeverGetsThePreviousUsersPrivatePage() throws {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        let cookies = HTTPCookieStorage.sharedCookieStorage(forGroupContainerIdentifier: UUID().uuidString)
        configuration.httpCookieStorage = cookies
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let (url, _) = versionedRoute { _, request in
            (200, ["Cache-Control": "private, max-age=600"], request.headers["cookie"]?.contains("session=alice") == true ? 100 : 200)
        }
        func set(_ value: String) {
            cookies.cookies?.forEach(cookies.deleteCookie)
            cookies.setCookie(HTTPCookie(properties: [.name: "session", .value: value, .domain: url.host!, .path: "/", .originURL: url])!)
        }
        set("alice")
        XCTAssertEqual(try fetchCatalogue(CatalogueRequest(url: url), on: session).get().version, 100)
        set("bob")
        let bob = try fetchCatalogue(CatalogueRequest(url: url), on: session).get()
        XCTAssertEqual(bob.version, 200, "bob (other session cookie) was served alice's page from the cache")
    }

    /// An explicit Cookie header on the request is not part of the credential either.
    func testAnExplicitCookieHeaderPartitionsAPrivatePage() throws {
        let (url, seen) = versionedRoute { _, request in
            (200, ["Cache-Control": "private, max-age=600"], request.headers["cookie"] == "sid=alice" ? 100 : 200)
        }
        _ = try fetchCatalogue(CatalogueRequest(url: url, headers: ["Cookie": "sid=alice"])).get()
        _ = try fetchCatalogue(CatalogueRequest(url: url, headers: ["Cookie": "sid=bob"])).get()
        XCTAssertEqual(seen.all.count, 2, "Cookie: sid=bob was served sid=alice's page from the cache")
    }

    /// Secrets in the query string (an `access_token=`, a signed URL) are written to disk in plain text: in the key
    /// (file header) and in the entry's JSON `url`.
    func testAQueryStringTokenIsNeverWrittenToDisk() throws {
        let (base, _) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        let url = URL(string: base.absoluteString + "?access_token=QUERYSECRET42")!
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        XCTAssertFalse(diskContains("QUERYSECRET42"), "query-string token found on disk")
    }

    /// Userinfo password never on disk (expected to hold).
    func testUserInfoAndAuthorizationNeverOnDisk() throws {
        let (base, _) = versionedRoute { _, _ in (200, ["Cache-Control": "private, max-age=600", "Vary": "Authorization, X-Api-Key"], 1) }
        var components = URLComponents(url: base, resolvingAgainstBaseURL: false)!
        components.user = "bob"
        components.password = "USERINFOPW77"
        _ = try fetchCatalogue(CatalogueRequest(url: components.url!, headers: ["Authorization": "Bearer AUTHTOKEN55", "X-Api-Key": "APIKEY99"])).get()
        XCTAssertFalse(diskContains("USERINFOPW77"))
        XCTAssertFalse(diskContains("AUTHTOKEN55"))
        XCTAssertFalse(diskContains("APIKEY99"))
    }

    // MARK: - Folder

    /// A cache folder inside a folder another user can write (a careless caller): the folder is checked once, when the
    /// index is built. The other user swaps it for a folder of their own holding a forged entry (no credential and no
    /// Vary: its digests are "", no HMAC key needed), and the next read is served from it.
    func testAFolderSwappedAfterFirstUseIsNotReadFrom() throws {
        let parent = URL(fileURLWithPath: "/tmp/attack/shared-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
        chmod(parent.path, 0o777)
        chown(parent.path, 65534, 65534)
        defer { try? FileManager.default.removeItem(at: parent) }
        let folder = parent.appendingPathComponent("cache", isDirectory: true)
        let cache = ResponseCache(memoryCapacity: 0, diskCapacity: 4 << 20, directory: folder, maximumEntrySize: 1 << 20)
        let (url, _) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        XCTAssertEqual(try fetchCatalogue(CatalogueRequest(url: url), cache: cache).get().version, 1)
        let name = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: folder.path).first { CacheStorage.isEntryFileName($0) })
        var contents = try Data(contentsOf: folder.appendingPathComponent(name))
        // The other user (uid 65534): moves our folder aside, makes its own with a forged entry.
        XCTAssertEqual(rename(folder.path, parent.appendingPathComponent("ours").path), 0)
        let forged = contents.range(of: Data(#""version":1"#.utf8))!
        contents.replaceSubrange(forged, with: Data(#""version":7"#.utf8))
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        try contents.write(to: folder.appendingPathComponent(name))
        chown(folder.path, 65534, 65534)
        chmod(folder.path, 0o777)
        chown(folder.appendingPathComponent(name).path, 65534, 65534)
        let second = try fetchCatalogue(CatalogueRequest(url: url), cache: cache).get()
        XCTAssertEqual(second.version, 1, "served a forged entry from another user's folder")
    }

    // MARK: - Redirect variants (expected to hold)

    func testSameOrigin308ThenA304IsNotUsedToRefresh() throws {
        let path2 = "/attack-cache/target-\(UUID().uuidString)"
        let seen2 = SeenRequests()
        server.route(path2) { request in
            seen2.append(request)
            if request.headers["if-none-match"] != nil { return LoopbackResponse(status: 304, headers: ["ETag": "\"v1\"", "Cache-Control": "max-age=600"]) }
            return LoopbackResponse(
                headers: ["Content-Type": "application/json", "ETag": "\"v9\"", "Cache-Control": "max-age=600"],
                body: Data(#"{"version":9,"path":"x"}"#.utf8))
        }
        let (url, _) = versionedRoute { n, _ in
            n == 0 ? (200, ["ETag": "\"v1\"", "Cache-Control": "max-age=0"], 1) : (308, ["Location": path2], 1)
        }
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        let second = fetchCatalogue(CatalogueRequest(url: url))
        let third = fetchCatalogue(CatalogueRequest(url: url))
        XCTAssertEqual(try second.get().version, 9)
        XCTAssertEqual(try third.get().version, 9)
    }

    /// A duplicated max-age: RFC 9111 §4.2.1 says use the first or treat as stale; the parser keeps the last.
    func testADuplicatedMaxAgeUsesTheFirst() throws {
        let (url, seen) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=0, max-age=600"], 1) }
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        _ = try fetchCatalogue(CatalogueRequest(url: url)).get()
        XCTAssertEqual(seen.all.count, 2, "max-age=0, max-age=600 was served fresh")
    }

    /// A 301 stored while the queue refused redirects is later served, from the cache, to a request whose policy
    /// follows redirects: the cached 3xx is not followed (functional, not a leak).
    func testARedirectIsNeverStoredSoAFollowingRequestFollowsIt() throws {
        let (target, _) = versionedRoute { _, _ in (200, [:], 5) }
        let (url, _) = versionedRoute { _, _ in (301, ["Location": target.absoluteString, "Cache-Control": "max-age=600"], 0) }
        _ = fetchCatalogue(CatalogueRequest(url: url), policies: RequestPolicies(redirectPolicy: .refuse))
        let followed = fetchCatalogue(CatalogueRequest(url: url), policies: RequestPolicies(redirectPolicy: .follow))
        XCTAssertEqual(try followed.get().version, 5)
    }

    /// HEAD and GET are separate entries (expected to hold).
    func testHeadDoesNotAnswerGet() throws {
        let (url, seen) = versionedRoute { _, _ in (200, ["Cache-Control": "max-age=600"], 1) }
        _ = fetchCatalogue(CatalogueRequest(url: url, method: "HEAD"))
        let get = fetchCatalogue(CatalogueRequest(url: url))
        XCTAssertEqual(try get.get().version, 1)
        XCTAssertEqual(seen.all.count, 2)
    }
}
