#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Requests that go through the `ResponseCache` neither read nor fill the platform's `URLCache`, so that the
/// ResponseCache's rules (`.reload`, `.revalidate`, `no-cache`, a 304 delivered as such) hold on every platform: on
/// Apple platforms a default session's `URLCache.shared` would otherwise answer some of them itself.
final class OneCacheTests: XCTestCase {
    private let server = TestServer.shared

    func testAResponseCacheRequestNeitherReadsNorFillsTheSessionsURLCache() throws {
        // Given a session with a URLCache that already holds a fresh answer for the route (another version)
        let path = "/one-cache/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.route(path) { request in
            seen.append(request)
            return LoopbackResponse(
                headers: ["Cache-Control": "max-age=600", "Content-Type": "application/json"],
                body: Data(#"{"version":2,"path":"\#(path)"}"#.utf8))
        }
        let url = server.url(path)
        let urlCache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, diskPath: nil)
        let stale = try XCTUnwrap(
            HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Cache-Control": "max-age=600", "Content-Type": "application/json"]))
        urlCache.storeCachedResponse(CachedURLResponse(response: stale, data: Data(#"{"version":1,"path":"\#(path)"}"#.utf8)), for: URLRequest(url: url))
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = urlCache
        configuration.requestCachePolicy = .useProtocolCachePolicy
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let cache = ResponseCache(memoryCapacity: 1 << 20, diskCapacity: 0, directory: nil)
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(responseCache: cache)

        // When it is fetched through the ResponseCache with .reload
        let results = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(CatalogueRequest(url: url, cacheUse: .reload), session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()

        // Then the server answered (not the URLCache's old version), and the URLCache did not store it again
        XCTAssertEqual(try XCTUnwrap(results.values.first).get().version, 2)
        XCTAssertEqual(seen.all.count, 1)
        // (On Linux the entry is removed first, because URLSession there serves it whatever the policy says.)
        let kept = urlCache.cachedResponse(for: URLRequest(url: url))?.data
        XCTAssertFalse(kept.map { String(decoding: $0, as: UTF8.self).contains(#""version":2"#) } ?? false, "the URLCache was written")
        urlCache.removeCachedResponse(for: URLRequest(url: url))
        let plain = Recorder<Result<Catalogue, Error>>()
        queue.addRequest(CatalogueRequest(url: url, cacheUse: .bypass), session: session) { plain.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(seen.all.count, 2)
        queue.addRequest(CatalogueRequest(url: url, cacheUse: .reload), session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(seen.all.count, 3, "a .reload through the ResponseCache reaches the server whatever the URLCache holds")
    }

    func testTheDefaultDirectoryIsTheAppsOwn() {
        // Given the default directory of this process (the test runner has no bundle identifier on Linux)
        let directory = ResponseCache.defaultDirectory
        let app = ResponseCache.appName

        // Then it is named after the app, with nothing in the name that could leave the caches directory
        XCTAssertEqual(directory.lastPathComponent, "Requests.ResponseCache-" + app)
        XCTAssertEqual(app, Bundle.main.bundleIdentifier ?? ProcessInfo.processInfo.processName)
        XCTAssertFalse(app.contains("/"))
        XCTAssertNotEqual(directory.lastPathComponent, "Requests.ResponseCache", "not the directory every app shared")
    }
}
