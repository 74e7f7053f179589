#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// What `/echo` reports about the request it received.
struct EchoReport: Decodable {
    let method: String
    let path: String
    let query: [String: String]
    let headers: [String: String]
    let body: String
    let bodyLength: Int
}

/// The README's API root, pointed at the loopback server.
private let api = Endpoint(TestServer.shared.baseURL.absoluteString)

private struct NewRecipe: Encodable, Sendable {
    let name: String
    let minutes: Double
}

// The README's five-line declarations.
private struct SearchRecipes: DecodableRequest, EndpointRequest {
    typealias Success = EchoReport
    let text: String
    var endpoint: Endpoint { api.get("echo", query: ["q": text, "tags": ["quick", "sweet"], "page": 2]) }
}

private struct CreateRecipe: DecodableRequest, EndpointRequest {
    typealias Success = EchoReport
    let recipe: NewRecipe
    var endpoint: Endpoint { api.post("echo", body: .json(recipe)) }
}

private struct Login: DecodableRequest, EndpointRequest {
    typealias Success = EchoReport
    let user: String, password: String
    var endpoint: Endpoint { api.post("echo", body: .form(["user": user, "password": password])) }
}

private struct UploadPhoto: NoContentRequest, EndpointRequest {
    let photo: URL
    var endpoint: Endpoint { api.post(uploadPath, body: .multipart(MultipartFormData(fields: ["caption": "Pancakes"], files: ["photo": photo]))) }
    let uploadPath: String
}

/// Any endpoint, for the error cases.
private struct Raw: DataRequest, EndpointRequest {
    typealias Success = Data
    let endpoint: Endpoint
    func processData(_ data: Data) throws -> Data { data }
}

final class EndpointTests: XCTestCase {
    private func run<R: DataRequest>(_ request: R, file: StaticString = #filePath, line: UInt = #line) -> Result<R.Success, R.Failure>? {
        let queue = OperationQueue()
        let results = Recorder<Result<R.Success, R.Failure>>()
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion exactly once", file: file, line: line)
        return results.values.first
    }

    func testBaseAndPathJoinWithExactlyOneSlashAndQueriesMerge() throws {
        for base in ["https://api.example.com/v1", "https://api.example.com/v1/"] {
            for path in ["recipes/1", "/recipes/1"] {
                XCTAssertEqual(try Endpoint(base).get(path).url().absoluteString, "https://api.example.com/v1/recipes/1")
            }
        }
        XCTAssertEqual(try Endpoint("https://api.example.com").get("recipes").url().absoluteString, "https://api.example.com/recipes")
        XCTAssertEqual(try Endpoint("https://api.example.com/").url().absoluteString, "https://api.example.com/")
        XCTAssertEqual(
            try Endpoint("https://api.example.com/v1?key=abc").get("search", query: ["q": "a b"]).url().absoluteString,
            "https://api.example.com/v1/search?key=abc&q=a%20b"
        )
        XCTAssertEqual(
            try Endpoint("https://api.example.com").get("recipes/crème brûlée").url().absoluteString,
            "https://api.example.com/recipes/cr%C3%A8me%20br%C3%BBl%C3%A9e"
        )
        XCTAssertEqual(
            try Endpoint("https://api.example.com").get("deals/50%off/a%20b/100%").url().absoluteString,
            "https://api.example.com/deals/50%25off/a%20b/100%25")
        XCTAssertEqual(try Endpoint("https://api.example.com/v1//").get("//a").url().absoluteString, "https://api.example.com/v1/a")
        XCTAssertEqual(Endpoint("https://api.example.com").get("a%zz").description, "GET https://api.example.com/a%25zz")
        let nested = Endpoint("https://api.example.com", path: "v2", headers: ["Accept": "application/json"])
        let derived = nested.get("users", headers: ["X-Trace": "1"])
        XCTAssertEqual(try derived.url().absoluteString, "https://api.example.com/v2/users")
        XCTAssertEqual(derived.headers.map(\.name), ["Accept", "X-Trace"])
        XCTAssertEqual(derived.description, "GET https://api.example.com/v2/users")
    }

    func testAGetWithQueryIsDeclaredInFiveLines() throws {
        let echo = try run(SearchRecipes(text: "crème & brûlée = 100%?")).map { try $0.get() }
        XCTAssertEqual(echo?.method, "GET")
        XCTAssertEqual(echo?.query["q"], "crème & brûlée = 100%?")
        XCTAssertEqual(echo?.query["page"], "2")
        XCTAssertEqual(SearchRecipes(text: "x").identifier, "GET \(TestServer.shared.baseURL.absoluteString)/echo?page=2&q=x&tags%5B%5D=quick&tags%5B%5D=sweet")
    }

    func testAPostOfJSONIsDeclaredInFiveLines() throws {
        let echo = try run(CreateRecipe(recipe: NewRecipe(name: "Crêpes \"fines\"", minutes: 12.5))).map { try $0.get() }
        XCTAssertEqual(echo?.method, "POST")
        XCTAssertEqual(echo?.headers["content-type"], "application/json; charset=utf-8")
        let sent = try JSONSerialization.jsonObject(with: Data((echo?.body ?? "").utf8)) as? [String: Any]
        XCTAssertEqual(sent?["name"] as? String, "Crêpes \"fines\"")
        XCTAssertEqual(sent?["minutes"] as? Double, 12.5)
    }

    func testAPostOfAFormIsDeclaredInFiveLines() throws {
        let echo = try run(Login(user: "ada lovelace", password: "p&ss=wörd+")).map { try $0.get() }
        XCTAssertEqual(echo?.headers["content-type"], "application/x-www-form-urlencoded; charset=utf-8")
        XCTAssertEqual(echo?.body, "password=p%26ss%3Dw%C3%B6rd%2B&user=ada%20lovelace")
        var components = URLComponents()
        components.percentEncodedQuery = echo?.body
        XCTAssertEqual(components.queryItems?.map(\.value), ["p&ss=wörd+", "ada lovelace"])
    }

    func testAMultipartUploadIsDeclaredInFiveLines() throws {
        // Given a file and a route that parses the multipart body with the server's own parser
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("photo-\(UUID().uuidString).png")
        let bytes = Data((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let parts = Recorder<[MultipartPart]>()
        let (path, _) = recordedRoute { request in
            parts.append((try? MultipartParser.parse(contentType: request.headers["content-type"] ?? "", body: request.body)) ?? [])
            return LoopbackResponse(status: 204)
        }
        // When it is uploaded
        let result = run(UploadPhoto(photo: file, uploadPath: path))
        // Then the server got both parts, byte for byte
        XCTAssertNotNil(result?.success)
        let received = try XCTUnwrap(parts.values.first)
        XCTAssertEqual(received.map(\.name), ["caption", "photo"])
        XCTAssertEqual(received.first?.body, Data("Pancakes".utf8))
        XCTAssertEqual(received.last?.fileName, file.lastPathComponent)
        XCTAssertEqual(received.last?.contentType, "image/png")
        XCTAssertEqual(received.last?.body, bytes)
    }

    func testALargeMultipartIsStreamedFromATemporaryFile() throws {
        // Given a 3 MB file part above a lowered streaming threshold
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("video-\(UUID().uuidString).mp4")
        var generator = SystemRandomNumberGenerator()
        let bytes = Data((0..<3_000_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try bytes.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        var form = MultipartFormData()
        form.streamingThreshold = 1_000_000
        form.append("clip", name: "title")
        form.append(fileAt: file, name: "video")
        let received = Recorder<LoopbackRequest>()
        let (path, _) = recordedRoute { request in
            received.append(request)
            return .text("ok")
        }
        // When it is sent through the library
        let result = run(Raw(endpoint: api.post(path, body: .multipart(form))))
        // Then the server got both parts byte for byte; on Linux the stream is sent chunked, elsewhere with its length
        XCTAssertNotNil(result?.success)
        let request = try XCTUnwrap(received.values.first)
        #if canImport(FoundationNetworking)
        XCTAssertEqual(request.headers["transfer-encoding"], "chunked")
        XCTAssertNil(request.headers["content-length"])
        #else
        XCTAssertEqual(request.headers["content-length"], String(request.body.count))
        #endif
        let parts = try MultipartParser.parse(contentType: request.headers["content-type"] ?? "", body: request.body)
        XCTAssertEqual(parts.map(\.name), ["title", "video"])
        XCTAssertEqual(parts.last?.contentType, "video/mp4")
        XCTAssertEqual(parts.last?.body, bytes)
        // And the temporary file is gone
        let temporary = FileManager.default.temporaryDirectory.path
        waitUntil("the temporary file is removed") {
            ((try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []).allSatisfy { !$0.hasPrefix("Requests-multipart-") }
        }
    }

    func testCancellingStreamedUploadsAtRandomMomentsLeavesNothingBehind() throws {
        // Given 60 multipart uploads of 300 KB, streamed from temporary files
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("part-\(UUID().uuidString).bin")
        try Data(count: 300_000).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        var form = MultipartFormData(files: ["file": file])
        form.streamingThreshold = 64 * 1024
        let (path, _) = recordedRoute { _ in .text("ok") }
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        let results = Recorder<Result<Data, Error>>()
        let operations = (0..<60).map { _ in
            queue.addRequest(Raw(endpoint: api.post(path, body: .multipart(form))), session: testSession) { results.append($0) }
        }
        // When every other one is cancelled at a different moment
        for (index, operation) in operations.enumerated() where index % 2 == 0 {
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(index * 3)) { operation.cancel() }
        }
        queue.waitUntilAllOperationsAreFinished()
        // Then each completed once, with success or the cancellation, and no temporary file or descriptor is left
        XCTAssertEqual(results.count, 60)
        XCTAssertTrue(results.values.allSatisfy { $0.success != nil || $0.failure?.isRequestCancellation == true })
        let temporary = FileManager.default.temporaryDirectory.path
        waitUntil("no temporary file is left") {
            ((try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []).allSatisfy { !$0.hasPrefix("Requests-multipart-") }
        }
        #if os(Linux)
        waitUntil("no descriptor of a temporary file is left") {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).allSatisfy { fd in
                ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? "").contains("Requests-multipart-") == false
            }
        }
        #endif
    }

    func testBadInputFailsThroughTheCompletionAndSendsNothing() {
        let (path, requests) = recordedRoute()
        let base = TestServer.shared.baseURL.absoluteString
        let missingFile = URL(fileURLWithPath: "/nonexistent/\(UUID().uuidString).jpg")
        var form = MultipartFormData()
        form.append(fileAt: missingFile, name: "photo")
        let cases: [(Endpoint, (Error?) -> Bool)] = [
            (Endpoint("not a url").get(path), { ($0 as? RequestBuildingError) == .invalidBaseURL("not a url") }),
            (Endpoint("ftp://example.com").get(path), { ($0 as? RequestBuildingError) == .invalidBaseURL("ftp://example.com") }),
            (Endpoint("/relative/only").get(path), { ($0 as? RequestBuildingError) == .invalidBaseURL("/relative/only") }),
            (Endpoint(base).get(path + "?sneaky=1"), { ($0 as? RequestBuildingError) == .invalidPath(path + "?sneaky=1") }),
            (Endpoint(base + "/api/v1").get("../admin"), { ($0 as? RequestBuildingError) == .invalidPath("../admin") }),
            (Endpoint(base).get("a/./b"), { ($0 as? RequestBuildingError) == .invalidPath("a/./b") }),
            (Endpoint(base).get(path + "\r\nHost: evil"), { ($0 as? RequestBuildingError) == .invalidPath(path + "\r\nHost: evil") }),
            (Endpoint(base).post(path, body: .json(["minutes": Double.nan])), { $0 is EncodingError }),
            (Endpoint(base).get(path, query: ["minutes": Double.infinity]), { $0 is EncodingError }),
            (Endpoint(base).post(path, body: .multipart(form)), { ($0 as? RequestBuildingError) == .unreadableFile(missingFile) }),
            (Endpoint(base).get(path, headers: ["X-Bad": "1\r\nX-Injected: 2"]), { ($0 as? RequestBuildingError) == .invalidHeader(name: "X-Bad") }),
            (Endpoint(base).endpoint("BAD METHOD", path), { ($0 as? RequestBuildingError) == .invalidMethod("BAD METHOD") }),
        ]
        for (index, (endpoint, isExpected)) in cases.enumerated() {
            let error = run(Raw(endpoint: endpoint))?.failure
            XCTAssertTrue(isExpected(error), "case \(index): \(String(describing: error))")
        }
        XCTAssertEqual(requests.count, 0)
    }

    func testATimeoutPerRequestInWholeSeconds() {
        // Given a response that takes 3 s, and a 1 s timeout (Linux rounds timeouts down to whole seconds)
        let result = run(Raw(endpoint: api.get("delay/3000").timeout(1)))
        // Then the request fails with the timeout
        XCTAssertEqual((result?.failure as? URLError)?.code, .timedOut)
        XCTAssertEqual(try api.get("x").timeout(7).urlRequest().timeoutInterval, 7)
    }

    func testACachePolicyPerRequestCanIgnoreTheLocalCache() throws {
        // Given a session whose cache holds an entry for a URL
        let (path, requests) = recordedRoute { _ in .text("fresh") }
        let cache = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, diskPath: nil)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = cache
        let session = URLSession(configuration: configuration)
        try XCTSkipIf(isOnCurl(session), "libcurl transfers do not use the platform's URLCache (see Transport)")
        defer { session.finishTasksAndInvalidate() }
        let endpoint = api.get(path)
        let url = try endpoint.url()
        let cached = try XCTUnwrap(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Cache-Control": "max-age=600"]))
        cache.storeCachedResponse(CachedURLResponse(response: cached, data: Data("cached".utf8)), for: URLRequest(url: url))
        func body(_ endpoint: Endpoint) -> String? {
            let queue = OperationQueue()
            let operation = queue.addRequest(Raw(endpoint: endpoint), session: session)
            queue.waitUntilAllOperationsAreFinished()
            return operation.result?.success.map { String(decoding: $0, as: UTF8.self) }
        }
        // When it is requested with the default policy, then ignoring the local cache
        let withCache = body(endpoint)
        let sentWithCache = requests.count
        let ignoringCache = body(endpoint.cachePolicy(.reloadIgnoringLocalCacheData))
        // Then the first is served from the cache, and the second from the server
        XCTAssertEqual(withCache, "cached")
        XCTAssertEqual(sentWithCache, 0)
        XCTAssertEqual(ignoringCache, "fresh")
        XCTAssertEqual(requests.count, 1)
    }

    func testEndpointHeadersComeAfterTheBodysContentType() throws {
        let request = try Endpoint("https://api.example.com")
            .post("x", headers: ["Content-Type": "application/vnd.api+json"], body: .json(["a": 1]))
            .urlRequest()
        XCTAssertEqual(request.value(forHTTPHeaderField: "Content-Type"), "application/vnd.api+json")
        XCTAssertEqual(request.httpMethod, "POST")
    }
}
