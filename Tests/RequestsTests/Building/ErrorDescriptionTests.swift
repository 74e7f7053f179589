#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// One value of every case of every public error type, and what its `localizedDescription` must name.
private struct Sample {
    let error: Error
    let names: [String]
    let caseName: String

    init(_ error: Error, _ caseName: String, names: [String]) {
        (self.error, self.caseName, self.names) = (error, caseName, names)
    }
}

/// A URL with every part that may hold a secret: user, password, query values, fragment.
private let secretURL = URL(string: "https://alice:hunter2@api.example.com:8443/users/7?token=secret123&page=2#frag")!
/// What `secretURL` may appear as.
private let safeURLText = "https://api.example.com:8443/users/7"
/// Pieces of `secretURL` that no message may show.
private let secrets = ["alice", "hunter2", "secret123", "token", "page=2", "frag"]

private func response(_ status: Int, url: URL) -> HTTPURLResponse {
    HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: ["X-Secret": "HEADER-SECRET"])!
}

private let usersURL = URL(string: "https://api.example.com/users/7")!

private let samples: [Sample] = [
    Sample(RequestQueueError.didNotReceiveData, "didNotReceiveData", names: ["no content"]),
    Sample(RequestQueueError.unexpectedEmptyBody(statusCode: 204, method: "POST"), "unexpectedEmptyBody", names: ["204", "POST"]),
    Sample(
        RequestQueueError.invalidStatusCode(statusCode: 404, response: response(404, url: usersURL), body: Data("BODY-SECRET".utf8)),
        "invalidStatusCode", names: ["404 (Not Found)", "https://api.example.com/users/7"]),
    Sample(RequestQueueError.nonEmptyData, "nonEmptyData", names: ["content"]),
    Sample(
        RequestQueueError.nonHTTPResponse(URLResponse(url: URL(fileURLWithPath: "/tmp/x.json"), mimeType: nil, expectedContentLength: 0, textEncodingName: nil)),
        "nonHTTPResponse", names: ["not an HTTP response", "file:///tmp/x.json"]),
    Sample(RequestQueueError.cancelled, "cancelled", names: ["cancelled"]),
    Sample(
        RequestQueueError.dependencyFailed(RequestQueueError.invalidStatusCode(statusCode: 503, response: response(503, url: usersURL), body: Data())),
        "dependencyFailed", names: ["needed failed", "503"]),
    Sample(RequestQueueError.misuse("maximumRedirects(-1) is negative"), "misuse", names: ["maximumRedirects(-1) is negative"]),
    Sample(
        RequestQueueError.unacceptableContentType("text/html; charset=utf-8", acceptable: ["application/json"]),
        "unacceptableContentType", names: ["text/html", "application/json"]),
    Sample(RequestBuildingError.invalidBaseURL("ftp://example.com"), "invalidBaseURL", names: ["ftp://example.com"]),
    Sample(RequestBuildingError.invalidPath("/users/../admin"), "invalidPath", names: ["/users/../admin"]),
    Sample(RequestBuildingError.invalidMethod("GE T"), "invalidMethod", names: ["GE T"]),
    Sample(RequestBuildingError.invalidHeader(name: "X-Trace"), "invalidHeader", names: ["X-Trace"]),
    Sample(RequestBuildingError.unreadableFile(URL(fileURLWithPath: "/tmp/missing/photo.jpg")), "unreadableFile", names: ["photo.jpg"]),
    Sample(RequestBuildingError.unsupportedScheme("ftp://files.example.com/a.txt"), "unsupportedScheme", names: ["ftp://files.example.com/a.txt"]),
    Sample(DownloadError.lengthMismatch(expected: 2048, actual: 1000), "lengthMismatch", names: ["2048", "1000"]),
    Sample(DownloadError.checksumMismatch(expected: "ab", actual: "cd"), "checksumMismatch", names: ["SHA-256"]),
    Sample(DownloadError.rangeMismatch(contentRange: "bytes 0-9/20", status: 206), "rangeMismatch", names: ["206"]),
    Sample(StreamError.lineTooLong(line: 3, limit: 65536), "lineTooLong", names: ["Line 3", "64 KiB"]),
    Sample(StreamError.invalidUTF8(line: 4), "invalidUTF8", names: ["Line 4", "UTF-8"]),
    Sample(StreamError.invalidJSON(line: 5, reason: "oops"), "invalidJSON", names: ["Line 5", "JSON"]),
    Sample(StreamError.eventTooLarge(limit: 1_048_576), "eventTooLarge", names: ["1 MiB"]),
    Sample(StreamError.notAnEventStream(contentType: "text/html"), "notAnEventStream", names: ["text/html"]),
    Sample(StreamError.consumerTooSlow(bufferSize: 262_144), "consumerTooSlow", names: ["256 KiB"]),
    Sample(StreamError.tooManyReconnections(limit: 5, window: 60), "tooManyReconnections", names: ["5", "60 seconds"]),
    Sample(TextDecodingError.invalidBytes(charset: "utf-16", byteCount: 3), "invalidBytes", names: ["utf-16"]),
    Sample(RedirectError.unsupportedScheme("file:///etc/passwd"), "redirectUnsupportedScheme", names: ["file:///etc/passwd"]),
    Sample(RedirectError.tooManyRedirects(limit: 10), "tooManyRedirects", names: ["10"]),
    Sample(TokenAuthenticator.RefreshTimedOut(), "RefreshTimedOut", names: ["token refresh"]),
    Sample(TransferLimitError.responseTooLarge(limit: 64 * 1024 * 1024), "responseTooLarge", names: ["64 MiB"]),
    Sample(TransferLimitError.deadlineExceeded(30), "deadlineExceeded", names: ["30 seconds"]),
    Sample(TransferLimitError.tooSlow(MinimumSpeed(bytes: 1024, seconds: 60)), "tooSlow", names: ["1 KiB", "60 seconds"]),
    Sample(ResponseCacheError.notCached(URL(string: "https://api.example.com/feed")!), "notCached", names: ["https://api.example.com/feed"]),
]

/// The case names of every public error type, one switch each, so that a new case fails to compile here until it
/// has a sample above.
private func caseName(of error: Error) -> String? {
    switch error {
    case let error as RequestQueueError:
        switch error {
        case .didNotReceiveData: return "didNotReceiveData"
        case .unexpectedEmptyBody: return "unexpectedEmptyBody"
        case .invalidStatusCode: return "invalidStatusCode"
        case .nonEmptyData: return "nonEmptyData"
        case .nonHTTPResponse: return "nonHTTPResponse"
        case .cancelled: return "cancelled"
        case .dependencyFailed: return "dependencyFailed"
        case .misuse: return "misuse"
        case .unacceptableContentType: return "unacceptableContentType"
        }
    case let error as RequestBuildingError:
        switch error {
        case .invalidBaseURL: return "invalidBaseURL"
        case .invalidPath: return "invalidPath"
        case .invalidMethod: return "invalidMethod"
        case .invalidHeader: return "invalidHeader"
        case .unreadableFile: return "unreadableFile"
        case .unsupportedScheme: return "unsupportedScheme"
        }
    case let error as DownloadError:
        switch error {
        case .lengthMismatch: return "lengthMismatch"
        case .checksumMismatch: return "checksumMismatch"
        case .rangeMismatch: return "rangeMismatch"
        }
    case let error as StreamError:
        switch error {
        case .lineTooLong: return "lineTooLong"
        case .invalidUTF8: return "invalidUTF8"
        case .invalidJSON: return "invalidJSON"
        case .eventTooLarge: return "eventTooLarge"
        case .notAnEventStream: return "notAnEventStream"
        case .consumerTooSlow: return "consumerTooSlow"
        case .tooManyReconnections: return "tooManyReconnections"
        }
    case let error as TextDecodingError:
        switch error {
        case .invalidBytes: return "invalidBytes"
        }
    case let error as RedirectError:
        switch error {
        case .unsupportedScheme: return "redirectUnsupportedScheme"
        case .tooManyRedirects: return "tooManyRedirects"
        }
    case is TokenAuthenticator.RefreshTimedOut:
        return "RefreshTimedOut"
    case let error as TransferLimitError:
        switch error {
        case .responseTooLarge: return "responseTooLarge"
        case .deadlineExceeded: return "deadlineExceeded"
        case .tooSlow: return "tooSlow"
        }
    case let error as ResponseCacheError:
        switch error {
        case .notCached: return "notCached"
        }
    default:
        return nil
    }
}

/// The number of cases the switch above names: 9 + 6 + 3 + 7 + 1 + 2 + 1 + 3 + 1.
private let caseCount = 33

final class ErrorDescriptionTests: XCTestCase {
    func testEveryCaseOfEveryErrorHasAMessageNamingWhatFailed() {
        // Given one value of every case of every public error type
        XCTAssertEqual(Set(samples.compactMap { caseName(of: $0.error) }).count, caseCount, "one sample per case")
        for sample in samples {
            XCTAssertEqual(caseName(of: sample.error), sample.caseName)
            // When it is shown the way a UI shows errors
            let message = sample.error.localizedDescription
            // Then it is a sentence of Requests' own, not Foundation's "(Requests.X error 1.)" fallback
            XCTAssertTrue(sample.error is LocalizedError, "\(sample.caseName) is not a LocalizedError")
            XCTAssertFalse(message.contains("(Requests."), "\(sample.caseName): \(message)")
            XCTAssertNil(message.range(of: #"error -?\d"#, options: .regularExpression), "\(sample.caseName): \(message)")
            XCTAssertTrue(message.hasSuffix("."), "\(sample.caseName): \(message)")
            // And it names what failed
            for name in sample.names {
                XCTAssertTrue(message.contains(name), "\(sample.caseName): \(message) does not name \(name)")
            }
            // And the developer's description still says something
            XCTAssertFalse(String(describing: sample.error).isEmpty)
        }
    }

    func testAStatusErrorNeverShowsTheBodyOrHeadersAndSuggestsWhatToDo() {
        // Given a status error that carries a body and a header
        let error: Error = RequestQueueError.invalidStatusCode(statusCode: 401, response: response(401, url: usersURL), body: Data("BODY-SECRET".utf8))
        // When it is shown
        let nsError = error as NSError
        // Then it names the status and the URL, never the body or the headers, and suggests signing in
        XCTAssertEqual(error.localizedDescription, "The server answered 401 (Unauthorized) to the request for https://api.example.com/users/7.")
        XCTAssertEqual(nsError.localizedRecoverySuggestion, "Sign in again, then try again.")
        for text in [error.localizedDescription, String(describing: error)] {
            XCTAssertFalse(text.contains("BODY-SECRET") || text.contains("HEADER-SECRET"), text)
        }
    }

    func testAURLsUserPasswordQueryAndFragmentNeverAppear() {
        // Given every error that shows a URL or a path, made from one holding credentials and a token
        let secretText = secretURL.absoluteString
        let errors: [(Error, String)] = [
            (RequestQueueError.invalidStatusCode(statusCode: 404, response: response(404, url: secretURL), body: Data()), safeURLText),
            (RequestQueueError.nonHTTPResponse(URLResponse(url: secretURL, mimeType: nil, expectedContentLength: 0, textEncodingName: nil)), safeURLText),
            (RequestQueueError.dependencyFailed(ResponseCacheError.notCached(secretURL)), safeURLText),
            (ResponseCacheError.notCached(secretURL), safeURLText),
            (RequestBuildingError.invalidBaseURL(secretText), safeURLText),
            (RequestBuildingError.invalidBaseURL("alice:hunter2@api.example.com:8443/users/7?token=secret123"), "api.example.com:8443/users/7"),
            (RequestBuildingError.unsupportedScheme(secretText), safeURLText),
            (RequestBuildingError.invalidPath("/users/7?token=secret123&page=2#frag"), "/users/7?…"),
            (RedirectError.unsupportedScheme(secretText), safeURLText),
        ]
        for (error, shown) in errors {
            // When it is shown to a user or written to a log
            let texts = [error.localizedDescription, String(describing: error), (error as NSError).localizedRecoverySuggestion ?? ""]
            // Then it names scheme, host, port and path, and none of the secrets
            XCTAssertTrue(texts[0].contains(shown), "\(texts[0]) does not name \(shown)")
            for text in texts {
                for secret in secrets {
                    XCTAssertFalse(text.contains(secret), "\(text) shows \(secret)")
                }
            }
        }
    }

    func testSizesAndDurationsAreWrittenForPeople() {
        XCTAssertEqual(ErrorText.bytes(1), "1 byte")
        XCTAssertEqual(ErrorText.bytes(1023), "1023 bytes")
        XCTAssertEqual(ErrorText.bytes(1536), "1.5 KiB")
        XCTAssertEqual(ErrorText.bytes(64 * 1024 * 1024), "64 MiB")
        XCTAssertEqual(ErrorText.bytes(Int64.max), "8 EiB")
        XCTAssertEqual(ErrorText.bytes(Int64.min), "-8 EiB")
        XCTAssertEqual(ErrorText.seconds(1), "1 second")
        XCTAssertEqual(ErrorText.seconds(0.25), "0.25 seconds")
        XCTAssertEqual(ErrorText.seconds(.infinity), "inf seconds")
        XCTAssertEqual(ErrorText.status(999), "999")
        XCTAssertEqual(ErrorText.clipped(String(repeating: "a", count: 500)).count, ErrorText.maximumQuotedLength + 1)
    }

    func testARealNotFoundNamesTheStatusAndThePathButNotTheQuery() {
        // Given a route that answers 404 with a body and a header
        let path = "/errors/\(UUID().uuidString)/missing"
        TestServer.shared.route(path) { _ in
            LoopbackResponse(status: 404, headers: ["X-Secret": "HEADER-SECRET"], body: Data("BODY-SECRET".utf8))
        }
        // When a request for it, with a token in its query, runs on a queue
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let done = expectation(description: "completion")
        queue.addRequest(GetData(url: TestServer.url(path + "?token=secret123")), session: testSession) { result in
            results.append(result)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        // Then its message names the status and the path, and not the token, the body or the header
        let message = results.values.first?.failure?.localizedDescription ?? ""
        XCTAssertTrue(message.contains("404 (Not Found)"), message)
        XCTAssertTrue(message.contains(TestServer.url(path).absoluteString), message)
        for secret in ["secret123", "token", "BODY-SECRET", "HEADER-SECRET"] {
            XCTAssertFalse(message.contains(secret), message)
        }
        XCTAssertEqual(results.count, 1)
    }
}
