#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// A small decodable value.
private struct ComposedProfile: Decodable, Equatable {
    let name: String
}

/// What the cached route serves: the version of its representation.
private struct ComposedVersion: Decodable, Equatable {
    let version: Int
}

/// An upload POSTed to `url`.
private protocol PostedUpload: UploadRequest {
    var url: URL { get }
}

extension PostedUpload {
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        completion(.success(request))
    }
}

/// The response decoded as JSON: an upload transfer with the decodable interpreter.
private struct UploadDecoding<S: Decodable>: PostedUpload, DecodableRequest {
    typealias Success = S
    let url: URL
    var uploadBody: UploadBody = .data(Data(#"{"draft":true}"#.utf8))
}

/// No response body expected: an upload transfer with the no-content interpreter.
private struct UploadNoContent: PostedUpload, NoContentRequest {
    let url: URL
    var uploadBody: UploadBody = .data(Data("payload".utf8))
}

/// The response read as text: an upload transfer with the text interpreter.
private struct UploadText: PostedUpload, TextRequest {
    let url: URL
    var uploadBody: UploadBody = .data(Data("payload".utf8))
}

/// GET `url`, decoded as a ``ComposedVersion``, through whatever cache the queue's policies name.
private struct GetVersion: DecodableRequest {
    typealias Success = ComposedVersion
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Records the attempts that fail and the reasons of the ones that follow, in order.
private final class ReattemptLog: RequestEventMonitor, @unchecked Sendable {
    let events = Recorder<String>()
    func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval) { events.append("didFail \(attempt.number)") }
    func requestWillAttemptAgain(_ attempt: RequestAttempt, reason: ReattemptReason, delay: TimeInterval) {
        events.append("again \(attempt.number) \(reason)")
    }
}

/// A download whose precondition sees what is sent.
private struct CheckedDownload: DownloadRequest {
    let url: URL
    let precondition: RequestPrecondition
    var identifier: String { url.absoluteString }
    var preconditions: [RequestPrecondition] { [precondition] }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Each kind of transfer combines with each way of interpreting the response, and one part of the engine (the
/// cache) does not use up what another (the retry policy) allows.
final class EngineCompositionTests: XCTestCase {
    private let server = TestServer.shared

    /// A fresh path answered by `respond`, and the requests it received.
    private func serve(_ respond: @escaping @Sendable (LoopbackRequest) -> LoopbackResponse) -> (URL, Recorder<LoopbackRequest>) {
        let path = "/composition/\(UUID().uuidString)"
        let seen = Recorder<LoopbackRequest>()
        server.route(path) { request in
            seen.append(request)
            return respond(request)
        }
        return (server.url(path), seen)
    }

    /// A fresh path that answers every request with `status`, `headers` and `body`, and the requests it received.
    private func serve(status: Int, headers: [String: String] = [:], body: String = "") -> (URL, Recorder<LoopbackRequest>) {
        serve { _ in LoopbackResponse(status: status, headers: headers, body: Data(body.utf8)) }
    }

    /// Runs `request` on a queue of its own (with `policies`) and returns its one outcome.
    private func run<R: DataRequest>(
        _ request: R, policies: RequestPolicies? = nil, on queue: OperationQueue = OperationQueue()
    ) -> Result<R.Success, Error> where R.Failure == Error {
        if let policies { queue.requestPolicies = policies }
        let results = Recorder<Result<R.Success, Error>>()
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion exactly once")
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    // MARK: - Upload × decodable

    func testADecodableUploadAnswered204IsItsEmptyValue() throws {
        let json = ["Content-Type": "application/json"]

        // Given an upload whose Success is EmptyBody, answered 204 with no body
        let (emptyURL, emptySeen) = serve(status: 204)
        // When it runs
        let empty = run(UploadDecoding<EmptyBody>(url: emptyURL))
        // Then the empty body is EmptyBody(), and the body was uploaded with POST
        XCTAssertEqual(try empty.get(), EmptyBody(), "\(empty)")
        XCTAssertEqual(emptySeen.values.map(\.method), ["POST"])
        XCTAssertEqual(emptySeen.values.first?.body, Data(#"{"draft":true}"#.utf8))

        // Given an upload whose Success is an Optional, answered 204 with no body
        let (nilURL, _) = serve(status: 204)
        // When it runs, Then the empty body is nil
        let none = run(UploadDecoding<ComposedProfile?>(url: nilURL))
        XCTAssertEqual(try none.get(), nil, "\(none)")

        // Given the same upload answered 200 with JSON
        let (bodyURL, _) = serve(status: 200, headers: json, body: #"{"name":"Ada"}"#)
        // When it runs, Then the body is still decoded
        let decoded = run(UploadDecoding<ComposedProfile?>(url: bodyURL))
        XCTAssertEqual(try decoded.get(), ComposedProfile(name: "Ada"), "\(decoded)")

        // Given the same upload answered 200 with no body: 200 is not a status whose empty body is allowed
        let (okURL, _) = serve(status: 200, headers: json)
        // When it runs, Then it fails naming the status and the method
        let ok = run(UploadDecoding<ComposedProfile?>(url: okURL))
        guard case .unexpectedEmptyBody(statusCode: 200, method: "POST")? = ok.failure as? RequestQueueError else {
            return XCTFail("expected unexpectedEmptyBody(statusCode: 200, method: \"POST\"), got \(ok)")
        }
    }

    // MARK: - Cache × retry

    func testACacheReloadDoesNotUseUpARetry() throws {
        // Given a route whose first response is stored with ETag "a" and must be revalidated, whose 304 names another
        // representation ("b"), and whose next unconditional request meets a 503 once before a 200 with version 2
        let unconditional = Recorder<Int>()
        let (url, seen) = serve { request in
            if request.headers["if-none-match"] == #""a""# {
                return LoopbackResponse(status: 304, headers: ["ETag": #""b""#, "Cache-Control": "max-age=0"])
            }
            unconditional.append(1)
            switch unconditional.count {
            case 1:
                return LoopbackResponse(
                    headers: ["ETag": #""a""#, "Cache-Control": "max-age=0", "Content-Type": "application/json"], body: Data(#"{"version":1}"#.utf8))
            case 2:
                return LoopbackResponse(status: 503)
            default:
                return LoopbackResponse(
                    headers: ["ETag": #""b""#, "Cache-Control": "max-age=0", "Content-Type": "application/json"], body: Data(#"{"version":2}"#.utf8))
            }
        }
        // And a queue with a cache and a retry policy of 2 attempts in all that retries a 503 at once
        let retry = RetryPolicy(maxAttempts: 2, baseDelay: 0, jitter: 0, retryableStatusCodes: [503])
        let log = ReattemptLog()
        let policies = RequestPolicies(retryPolicy: retry, monitors: [log], responseCache: ResponseCache(directory: nil))
        let queue = OperationQueue()
        XCTAssertEqual(try run(GetVersion(url: url), policies: policies, on: queue).get(), ComposedVersion(version: 1))
        XCTAssertEqual(seen.count, 1, "the first response came from the network")
        XCTAssertEqual(log.events.values, [])

        // When the same URL is requested again
        let second = run(GetVersion(url: url), on: queue)

        // Then the reload after the 304 was not one of the policy's attempts: its 503 was retried, and the new
        // representation arrived
        XCTAssertEqual(try second.get(), ComposedVersion(version: 2), "\(second)")
        // And the server saw the first GET, the conditional one, the reload without a validator, and its retry
        XCTAssertEqual(seen.values.map(\.method), ["GET", "GET", "GET", "GET"])
        XCTAssertEqual(seen.values.map { $0.headers["if-none-match"] }, [nil, #""a""#, nil, nil])
        // And monitors saw why each attempt followed: a reload (no failure before it), then a retry after the 503
        XCTAssertEqual(log.events.values, ["again 1 cacheReload", "didFail 2", "again 2 retry"])
    }

    // MARK: - The final check

    func testTheFinalCheckSeesTheHeadersTheTransferAdds() throws {
        // Given bytes of an earlier download on disk (named as Requests names its partial files, in its private
        // folder), described by a resume state
        let partial = try PrivateFolder.requestsFolder().appendingPathComponent("Requests-download-\(UUID().uuidString)")
        try Data("0123456789".utf8).write(to: partial)
        defer { try? FileManager.default.removeItem(at: partial) }
        let (url, seen) = serve(status: 200, body: "unused")
        let state = ResumeState(
            url: url, validator: .entityTag(#""v1""#), bytesReceived: 10, expectedLength: nil, partialFile: partial, destination: nil)
        // And a precondition that records the request it is shown and refuses it
        struct Refused: Error {}
        let checked = Recorder<URLRequest>()
        let download = CheckedDownload(
            url: url,
            precondition: RequestPrecondition {
                checked.append($0); throw Refused()
            })

        // When the download resumes
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        queue.addRequest(download, resumingFrom: state, session: testSession) { result, _ in results.append(result) }
        queue.waitUntilAllOperationsAreFinished()

        // Then the precondition saw the range, its validator and the identity encoding the download adds
        let request = try XCTUnwrap(checked.values.first)
        XCTAssertEqual(request.value(forHTTPHeaderField: "Range"), "bytes=10-")
        XCTAssertEqual(request.value(forHTTPHeaderField: "If-Range"), #""v1""#)
        XCTAssertEqual(request.value(forHTTPHeaderField: "Accept-Encoding"), "identity")
        // And its refusal is the outcome, with nothing sent
        XCTAssertTrue(results.values.first?.failure is Refused, "\(results.values)")
        XCTAssertEqual(seen.count, 0)
    }

    // MARK: - Upload × no content, upload × text

    func testAnUploadCombinesWithTheNoContentAndTextInterpreters() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("composition-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("payload.txt")
        try Data("from a file".utf8).write(to: file)
        let bodies: [(String, UploadBody)] = [
            ("data", .data(Data("payload".utf8))),
            ("file", .file(file)),
            ("multipart", .multipart(MultipartFormData(fields: ["field": "value"], files: [:]))),
        ]

        for (name, body) in bodies {
            // Given a no-content upload of each kind of body, answered 204
            let (url, seen) = serve(status: 204)
            // When it runs
            let result = run(UploadNoContent(url: url, uploadBody: body))
            // Then it succeeds, and the server received a POST with a body
            XCTAssertNoThrow(try result.get(), "\(name): \(result)")
            XCTAssertEqual(seen.values.map(\.method), ["POST"], name)
            XCTAssertFalse(seen.values.first?.body.isEmpty ?? true, name)
        }

        // Given a no-content upload answered 200 with a body
        let (bodyURL, _) = serve(status: 200, headers: ["Content-Type": "application/json"], body: #"{"unexpected":true}"#)
        // When it runs, Then it fails because the body is not empty
        let nonEmpty = run(UploadNoContent(url: bodyURL))
        guard case .nonEmptyData? = nonEmpty.failure as? RequestQueueError else {
            return XCTFail("expected nonEmptyData, got \(nonEmpty)")
        }

        // Given a text upload answered with ISO-8859-1 text (not valid UTF-8, the fallback)
        let word = "Grüße, déjà vu"
        let latin1 = try XCTUnwrap(word.data(using: .isoLatin1))
        let (textURL, _) = serve { _ in LoopbackResponse(headers: ["Content-Type": "text/plain; charset=iso-8859-1"], body: latin1) }
        // When it runs, Then the text is decoded in the charset the response names
        let text = run(UploadText(url: textURL))
        XCTAssertEqual(try text.get(), word, "\(text)")
    }
}
