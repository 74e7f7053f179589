#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Sends a `URLRequest` built by the test.
struct PrebuiltRequest: DataRequest {
    typealias Success = Data
    let urlRequest: URLRequest
    var identifier: String { urlRequest.url?.absoluteString ?? "" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(urlRequest))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// Runs `request` and returns its result; checks the completion ran once.
func send(_ request: PrebuiltRequest, policies: RequestPolicies = RequestPolicies(), file: StaticString = #filePath, line: UInt = #line) -> Result<Data, Error>? {
    let queue = OperationQueue()
    queue.requestPolicies = policies
    let results = Recorder<Result<Data, Error>>()
    queue.addRequest(request, session: testSession) { results.append($0) }
    queue.waitUntilAllOperationsAreFinished()
    XCTAssertEqual(results.count, 1, "completion exactly once", file: file, line: line)
    return results.values.first
}

final class HeaderSafetyTests: XCTestCase {
    func testCRLFInAHeaderNameOrTheMethodIsRefusedBeforeAnythingIsSent() {
        // Given requests whose header name or method would smuggle a second header onto the wire
        let (path, requests) = recordedRoute()
        var badName = URLRequest(url: TestServer.url(path))
        badName.setValue("1", forHTTPHeaderField: "X-A\r\nX-Injected")
        var badMethod = URLRequest(url: TestServer.url(path))
        badMethod.httpMethod = "GET /other HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET"
        var nulMethod = URLRequest(url: TestServer.url(path))
        nulMethod.httpMethod = "GE\0T"
        // When they are sent, and an adapter tries to set a value with CR LF
        let nameResult = send(PrebuiltRequest(urlRequest: badName))
        let methodResult = send(PrebuiltRequest(urlRequest: badMethod))
        let nulResult = send(PrebuiltRequest(urlRequest: nulMethod))
        let adapterResult = send(
            PrebuiltRequest(urlRequest: URLRequest(url: TestServer.url(path))),
            policies: RequestPolicies(adapters: [.setHeader("v\r\nX-Injected: 1", for: "X-Value")])
        )
        // Then each fails with a clear error, and the server saw nothing
        XCTAssertEqual(nameResult?.failure as? RequestBuildingError, .invalidHeader(name: "X-A\r\nX-Injected"))
        XCTAssertEqual(methodResult?.failure as? RequestBuildingError, .invalidMethod(badMethod.httpMethod ?? ""))
        XCTAssertEqual(nulResult?.failure as? RequestBuildingError, .invalidMethod("GE\0T"))
        XCTAssertEqual(adapterResult?.failure as? RequestBuildingError, .invalidHeader(name: "X-Value"))
        XCTAssertEqual(requests.count, 0)
        XCTAssertTrue(String(describing: nameResult?.failure ?? TestError(name: "")).contains("CR, LF or NUL"))
    }

    func testHTTPHeadersCompareNamesWithoutCaseAndKeepOrder() {
        var headers: HTTPHeaders = ["Accept": "a", "X-One": "1"]
        headers["accept"] = "b"
        headers["X-Two"] = "2"
        headers["x-one"] = nil
        XCTAssertEqual(headers.map(\.name), ["accept", "X-Two"])
        XCTAssertEqual(headers["ACCEPT"], "b")
        XCTAssertEqual(headers.merging(["X-Two": "3", "Z": "z"]).map(\.value), ["b", "3", "z"])
        XCTAssertEqual(HTTPHeaders(["Accept": "a", "accept": "b"]).map(\.value), ["b"])
    }
}

final class CURLDescriptionTests: XCTestCase {
    // Running the command needs `Process`, which only Linux and macOS have (not iOS, tvOS or watchOS).
    #if os(Linux) || os(macOS)
    private func runInShell(_ command: String) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    private func assertSameRequest(_ urlRequest: URLRequest, file: StaticString = #filePath, line: UInt = #line) throws {
        // Given the same request sent by URLSession and by `sh` running its cURL description
        let (path, requests) = recordedRoute()
        var request = urlRequest
        request.url = TestServer.url(path + "?" + (urlRequest.url?.query ?? ""))
        _ = send(PrebuiltRequest(urlRequest: request), file: file, line: line)
        let command = request.cURLDescription(redaction: .none)
        XCTAssertEqual(try runInShell(command), 0, command, file: file, line: line)
        // Then the server saw the same method, path, query, body and headers
        XCTAssertEqual(requests.count, 2, file: file, line: line)
        guard requests.count == 2 else { return }
        let (viaSession, viaCurl) = (requests.values[0], requests.values[1])
        XCTAssertEqual(viaCurl.method, viaSession.method, file: file, line: line)
        XCTAssertEqual(viaCurl.path, viaSession.path, file: file, line: line)
        XCTAssertEqual(viaCurl.query, viaSession.query, file: file, line: line)
        XCTAssertEqual(viaCurl.body, viaSession.body, file: file, line: line)
        XCTAssertEqual(viaCurl.body, request.httpBody ?? Data(), file: file, line: line)
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            XCTAssertEqual(viaCurl.headers[name.lowercased()], value, name, file: file, line: line)
            XCTAssertEqual(viaSession.headers[name.lowercased()], value, name, file: file, line: line)
        }
    }

    func testTheCommandSendsTheSameTextRequest() throws {
        var request = URLRequest(url: TestServer.url("/x?q=it%27s%20%22quoted%22&x=%24HOME"))
        request.httpMethod = "POST"
        request.setValue("application/json; charset=utf-8", forHTTPHeaderField: "Content-Type")
        request.setValue("Bearer s3cr3t", forHTTPHeaderField: "Authorization")
        request.setValue("it's $HOME `date` \"x\"", forHTTPHeaderField: "X-Tricky")
        request.httpBody = Data(#"{"name":"Crème brûlée","note":"it's $(rm -rf /) `x` \n done"}"#.utf8)
        try assertSameRequest(request)
    }

    func testTheCommandSendsTheSameBinaryRequest() throws {
        var request = URLRequest(url: TestServer.url("/x"))
        request.httpMethod = "PUT"
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data((0...255).map(UInt8.init) + [0, 39, 92, 10])
        try assertSameRequest(request)
    }
    #endif

    func testABodyStartingWithAtIsSentAsTextAndALargeBodyIsNotShown() throws {
        var request = URLRequest(url: TestServer.url("/x"))
        request.httpMethod = "POST"
        request.httpBody = Data("@/etc/passwd".utf8)
        #if os(Linux) || os(macOS)
        try assertSameRequest(request)
        #endif
        request.httpBody = Data(count: 100_000)
        XCTAssertTrue(request.cURLDescription().hasSuffix("# the body of 100000 bytes is not shown"))
    }

    func testCredentialsAreRedactedByDefault() {
        var request = URLRequest(url: TestServer.url("/x?api_key=k3y"))
        request.setValue("Bearer s3cr3t", forHTTPHeaderField: "Authorization")
        request.setValue("session=c00kie", forHTTPHeaderField: "Cookie")
        request.setValue("Basic cHJveHk=", forHTTPHeaderField: "Proxy-Authorization")
        let command = request.cURLDescription()
        XCTAssertTrue(command.contains("'Authorization: <redacted>'"), command)
        XCTAssertTrue(command.contains("'Cookie: <redacted>'"), command)
        XCTAssertTrue(command.contains("'Proxy-Authorization: <redacted>'"), command)
        XCTAssertFalse(command.contains("s3cr3t") || command.contains("c00kie") || command.contains("cHJveHk="), command)
        XCTAssertTrue(command.contains("api_key=k3y"), "query parameters are shown unless named")
        XCTAssertFalse(request.cURLDescription(redaction: Redaction(queryItems: ["api_key"])).contains("k3y"))
        XCTAssertTrue(request.cURLDescription(redaction: .none).contains("Bearer s3cr3t"))
    }
}
