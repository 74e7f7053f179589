#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import RequestsTesting
import XCTest

/// POST `body` to `url` as an upload.
struct UploadData: UploadRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    let body: Data
    var identifier: String { "upload \(url.absoluteString)" }
    var uploadBody: UploadBody { .data(body) }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// Records real traffic from the loopback server into a HAR file, then replays it with the server stopped.
final class HARRoundTripTests: XCTestCase {
    private let token = "Bearer s3cr3t-t0k3n"
    private let apiKey = "k3y-0f-the-api"

    /// The requests of the round trip: JSON with a token and a secret query item, a 404, a redirect, an upload with
    /// a secret JSON field, a binary body, the same URL twice with different answers, and a server that is not there.
    private func requests(_ server: URL, closed: URL) -> [any DataRequest] {
        let url = { (path: String) in server.appendingPathComponent(path) }
        var user = FetchData(url: URL(string: "\(url("users/7").absoluteString)?api_key=\(apiKey)&fields=name")!)
        user.headers = ["Authorization": token]
        return [
            user, FetchData(url: url("missing")), FetchData(url: url("old")),
            UploadData(url: url("login"), body: Data(#"{"user":"ada","password":"hunter2"}"#.utf8)),
            FetchData(url: url("binary")), FetchData(url: url("counter")), FetchData(url: url("counter")),
            FetchData(url: closed.appendingPathComponent("nobody")),
        ]
    }

    func testWhatIsRecordedFromTheServerIsReplayedWithoutIt() throws {
        let server = try LoopbackServer()
        let counter = Recorder<Int>()
        server.route("/users/7") { .json(#"{"name":"Ada","signedIn":\#($0.headers["authorization"] != nil)}"#) }
        server.route("/missing") { _ in .json(#"{"error":"not here"}"#, status: 404) }
        server.route("/old") { _ in LoopbackResponse(status: 302, headers: ["Location": "/users/8"]) }
        server.route("/users/8") { _ in .json(#"{"name":"Grace"}"#) }
        server.route("/login") { .json(#"{"received":\#($0.body.count),"token":"t-1"}"#, status: 201) }
        server.route("/binary") { _ in LoopbackResponse(headers: ["Content-Type": "application/octet-stream"], body: Data([0, 1, 2, 0xFF, 0xFE])) }
        server.route("/counter") { _ in
            counter.append(1)
            return .text("call \(counter.values.count)")
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("round-trip-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }
        let redaction = Redaction(queryItems: ["api_key"], jsonFields: ["password", "token"])
        let stopped = try LoopbackServer()
        let closed = stopped.baseURL
        stopped.stop()

        // Record once against the server.
        let recording = try HARReplay(file: file, mode: .once, redaction: redaction)
        XCTAssertTrue(recording.isRecording)
        let liveEvents = EventLog()
        let recorded = outcomes(requests(server.baseURL, closed: closed), session: recording.session, monitors: recording.monitors + [liveEvents])
        try recording.finish()
        server.stop()
        XCTAssertEqual(recorded.count, 8)
        XCTAssertEqual(recorded[7], "URLError \(URLError.cannotConnectToHost.rawValue)")
        XCTAssertEqual(recorded[1], #"status 404: {"error":"not here"}"#)
        XCTAssertEqual(recorded[0], #"ok {"name":"Ada","signedIn":true}"#)
        XCTAssertEqual(recorded[2], #"ok {"name":"Grace"}"#)
        XCTAssertEqual(Array(recorded[5...6]), ["ok call 1", "ok call 2"])

        // The file is private, holds every exchange in order, and no secret.
        let mode = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? NSNumber
        XCTAssertEqual(mode?.intValue, 0o600)
        let text = try String(contentsOf: file, encoding: .utf8)
        for secret in ["s3cr3t", apiKey, "hunter2", "t-1"] {
            XCTAssertFalse(text.contains(secret), "\(secret) is in the HAR file")
        }
        XCTAssertTrue(text.contains(#""value" : "<redacted>""#))
        let log = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])["log"] as? [String: Any]
        let entries = try XCTUnwrap(log?["entries"] as? [[String: Any]])
        let paths = entries.compactMap {
            (($0["request"] as? [String: Any])?["url"] as? String).flatMap { URL(string: $0.replacingOccurrences(of: "<redacted>", with: "x"))?.path }
        }
        // The redirect is two entries, one per hop: the 302, then the request it led to.
        XCTAssertEqual(paths, ["/users/7", "/missing", "/old", "/users/8", "/login", "/binary", "/counter", "/counter", "/nobody"])
        let failed = try XCTUnwrap(entries[8]["response"] as? [String: Any])
        XCTAssertEqual(failed["status"] as? Int, 0)
        XCTAssertEqual((failed["_error"] as? String)?.hasPrefix("URLError -1004:"), true)
        let binary = try XCTUnwrap(entries[5]["response"] as? [String: Any])["content"] as? [String: Any]
        XCTAssertEqual(binary?["encoding"] as? String, "base64")
        XCTAssertEqual(binary?["text"] as? String, Data([0, 1, 2, 0xFF, 0xFE]).base64EncodedString())

        // Replay with the server stopped: the same outcomes, the counter's answers in their order.
        let replay = try HARReplay(file: file, mode: .replayOnly)
        XCTAssertFalse(replay.isRecording)
        let replayedEvents = EventLog()
        let replayed = outcomes(requests(server.baseURL, closed: closed), session: replay.session, monitors: replay.monitors + [replayedEvents])
        XCTAssertEqual(replayed.count, recorded.count)
        for (index, (was, now)) in zip(recorded, replayed).enumerated() where index != 3 {
            XCTAssertEqual(now, was, "request \(index)")
        }
        // The upload's answer is replayed as recorded: with its secret field redacted.
        XCTAssertEqual(replayed[3], #"ok {"received":35,"token":"<redacted>"}"#)
        XCTAssertEqual(replay.stubs?.unmatchedRequests.count, 0)
        // The monitors see the same events, the redirect included: the replay follows the recorded hops.
        XCTAssertEqual(liveEvents.lines, replayedEvents.lines)
        XCTAssertEqual(liveEvents.lines.filter { $0.hasPrefix("redirect") }, ["redirect 302 /users/8"])
        XCTAssertEqual(replayedEvents.lines.count, 7 * 3 + 2 + 1, "no receive for the server that was not there; one redirect")
    }
}

/// The events a monitor saw, one line each, without what differs between a live and a replayed run (times, sizes).
final class EventLog: RequestEventMonitor, @unchecked Sendable {
    private let log = Recorder<String>()
    var lines: [String] { log.values }

    func requestWillSend(_ attempt: RequestAttempt) {
        log.append("send \(attempt.urlRequest.httpMethod ?? "GET") \(attempt.urlRequest.url?.path ?? "")")
    }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        log.append("receive \(response.statusCode)")
    }
    func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest) {
        log.append("redirect \(response.statusCode) \(request.url?.path ?? "")")
    }
    func requestDidFinish(_ summary: RequestSummary) {
        log.append("finish \(summary.attempts) \(summary.error == nil ? "ok" : "failed")")
    }
}

extension XCTestCase {
    /// Each request's outcome, run one after the other on `session` with `monitors`: `ok` and the body, `status` and
    /// the body of a status error, or `error` and the error.
    func outcomes(_ requests: [any DataRequest], session: URLSession, monitors: [any RequestEventMonitor]) -> [String] {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.requestPolicies.monitors = monitors
        let outcomes = Recorder<String>()
        for request in requests {
            func add<R: DataRequest>(_ request: R) {
                queue.addRequest(request, session: session) { result in
                    switch result {
                    case let .success(value): outcomes.append("ok " + ((value as? Data).map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"))
                    case let .failure(error): outcomes.append(Self.describe(error))
                    }
                }
            }
            add(request)
        }
        queue.waitUntilAllOperationsAreFinished()
        return outcomes.values
    }

    private static func describe(_ error: Error) -> String {
        if let error = error as? URLError { return "URLError \(error.code.rawValue)" }
        if case let RequestQueueError.invalidStatusCode(statusCode, _, body) = error {
            return "status \(statusCode): \(String(decoding: body, as: UTF8.self))"
        }
        return "error \(error)"
    }
}

extension HARRoundTripTests {
    func testNewEpisodesGoToTheServerAndJoinTheFile() throws {
        let server = try LoopbackServer()
        server.route("/known") { _ in .text("from the server") }
        server.route("/new") { _ in .text("new from the server") }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("episodes-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }
        let known =
            #"{"request": {"method": "GET", "url": "\#(server.url("/known").absoluteString)"}, "#
            + #""response": {"status": 200, "content": {"mimeType": "text/plain", "text": "from the file"}}}"#
        try Data(#"{"log": {"entries": [\#(known)]}}"#.utf8).write(to: file)

        let episodes = try HARReplay(file: file, mode: .newEpisodes)
        let requests = [FetchData(url: server.url("/known")), FetchData(url: server.url("/new"))]
        XCTAssertEqual(outcomes(requests, session: episodes.session, monitors: episodes.monitors), ["ok from the file", "ok new from the server"])
        try episodes.finish()
        XCTAssertEqual(server.requestCount(path: "/known"), 0)
        XCTAssertEqual(server.requestCount(path: "/new"), 1)
        server.stop()

        let replay = try HARReplay(file: file, mode: .replayOnly)
        XCTAssertEqual(outcomes(requests, session: replay.session, monitors: []), ["ok from the file", "ok new from the server"])
        let mode = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? NSNumber
        XCTAssertEqual(mode?.intValue, 0o600)
    }
}
