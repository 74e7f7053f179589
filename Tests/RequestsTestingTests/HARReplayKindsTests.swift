#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import RequestsTesting
import XCTest

/// GET `url` as a download.
private struct FetchFile: DownloadRequest {
    typealias Failure = Error
    let url: URL
    var identifier: String { "download \(url.absoluteString)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// GET `url` as a stream of raw chunks.
private struct Chunks: StreamRequest {
    let url: URL
    var identifier: String { "chunks \(url.absoluteString)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// GET `url` as server-sent events, without reconnecting.
private struct EventFeed: StreamRequest {
    let url: URL
    var identifier: String { "events \(url.absoluteString)" }
    var reconnectPolicy: ReconnectPolicy? { nil }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Every request kind replayed from a HAR file, through the engine's replay transport: nothing reaches a network
/// (the host `replay.test` does not exist).
final class HARReplayKindsTests: XCTestCase {
    fileprivate func harFile(_ entries: [String]) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("kinds-\(UUID().uuidString).har")
        try Data(#"{"log": {"version": "1.2", "creator": {"name": "test", "version": "1"}, "entries": [\#(entries.joined(separator: ","))]}}"#.utf8)
            .write(to: url)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    fileprivate func harEntry(_ url: String, method: String = "GET", status: Int = 200, headers: String = "[]", content: String, postData: String? = nil)
        -> String
    {
        let post = postData.map { #", "postData": \#($0)"# } ?? ""
        return #"{"request": {"method": "\#(method)", "url": "\#(url)"\#(post)}, "response": {"status": \#(status), "headers": \#(headers), "content": \#(content)}}"#
    }

    func testADownloadIsWrittenToItsFile() throws {
        let bytes = Data((0..<5000).map { UInt8($0 % 251) })
        let replay = try HARReplay(
            file: harFile([
                harEntry(
                    "https://replay.test/photo.bin", headers: #"[{"name": "Content-Length", "value": "5000"}]"#,
                    content: #"{"size": 5000, "mimeType": "application/octet-stream", "encoding": "base64", "text": "\#(bytes.base64EncodedString())"}"#)
            ]), mode: .replayOnly)
        let file = try XCTUnwrap(run(FetchFile(url: URL(string: "https://replay.test/photo.bin")!), on: replay.session).first).get()
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        XCTAssertEqual(try Data(contentsOf: file), bytes)
    }

    func testAnUploadsBodyIsMatched() throws {
        let replay = try HARReplay(
            file: harFile([
                harEntry(
                    "https://replay.test/login", method: "POST", status: 201, content: #"{"mimeType": "application/json", "text": "{\"token\":\"a\"}"}"#,
                    postData: #"{"mimeType": "application/json", "text": "{\"user\":\"ada\"}"}"#),
                harEntry(
                    "https://replay.test/login", method: "POST", status: 201, content: #"{"mimeType": "application/json", "text": "{\"token\":\"g\"}"}"#,
                    postData: #"{"mimeType": "application/json", "text": "{\"user\":\"grace\"}"}"#),
            ]), mode: .replayOnly, matching: HARMatching(body: true))
        let url = URL(string: "https://replay.test/login")!
        // The second entry's body: matched by the upload's body, not by order.
        let grace = try XCTUnwrap(run(UploadData(url: url, body: Data(#"{"user":"grace"}"#.utf8)), on: replay.session).first).get()
        XCTAssertEqual(String(decoding: grace, as: UTF8.self), #"{"token":"g"}"#)
        let nobody = try XCTUnwrap(run(UploadData(url: url, body: Data(#"{"user":"eve"}"#.utf8)), on: replay.session).first)
        XCTAssertThrowsError(try nobody.get()) { error in
            guard case HARReplayError.noMatch = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(replay.stubs?.requests.map { $0.body.map { String(decoding: $0, as: UTF8.self) } }, [#"{"user":"grace"}"#, #"{"user":"eve"}"#])
    }

    private let streamed = #"""
        {"size": 12, "mimeType": "application/octet-stream", "text": "one;two;three", "_chunks": [
          {"time": 0, "text": "one;"}, {"time": 400, "text": "two;"}, {"time": 800, "text": "three"}]}
        """#

    /// The stream's chunks, and when each arrived.
    private func chunks(_ replay: HARReplay) -> (chunks: [String], times: [DispatchTime], result: Result<StreamSummary, Error>?) {
        let received = Recorder<(String, DispatchTime)>()
        let result = Recorder<Result<StreamSummary, Error>>()
        let queue = OperationQueue()
        queue.addRequest(
            Chunks(url: URL(string: "https://replay.test/ticks")!), session: replay.session,
            receive: { received.append((String(decoding: $0, as: UTF8.self), .now())) }, completion: { result.append($0) })
        queue.waitUntilAllOperationsAreFinished()
        return (received.values.map(\.0), received.values.map(\.1), result.values.first)
    }

    func testAStreamArrivesInItsRecordedChunks() throws {
        let replay = try HARReplay(file: harFile([harEntry("https://replay.test/ticks", content: streamed)]), mode: .replayOnly)
        let (chunks, _, result) = chunks(replay)
        XCTAssertEqual(chunks, ["one;", "two;", "three"])
        XCTAssertEqual(try result?.get().bytes, 13)
        XCTAssertEqual(try result?.get().elements, 3)
    }

    func testPacingKeepsTheRecordedDelays() throws {
        let replay = try HARReplay(file: harFile([harEntry("https://replay.test/ticks", content: streamed)]), mode: .replayOnly, pacing: true)
        let (chunks, times, _) = chunks(replay)
        guard chunks == ["one;", "two;", "three"] else { return XCTFail("\(chunks)") }
        // A lower bound only: a busy machine can make the gap longer, never shorter.
        let gap = Double(times[2].uptimeNanoseconds - times[0].uptimeNanoseconds) / 1e9
        XCTAssertGreaterThanOrEqual(gap, 0.79, "the third chunk came 800 ms after the first when recorded")
    }

    func testServerSentEventsAreDecodedFromTheirChunks() throws {
        let content = #"""
            {"mimeType": "text/event-stream", "text": "data: a\n\nid: 2\ndata: b\n\n", "_chunks": [
              {"time": 0, "text": "data: a\n\nid: 2\nda"}, {"time": 5, "text": "ta: b\n\n"}]}
            """#
        let replay = try HARReplay(
            file: harFile([
                harEntry("https://replay.test/events", headers: #"[{"name": "Content-Type", "value": "text/event-stream"}]"#, content: content)
            ]), mode: .replayOnly)
        let events = Recorder<ServerSentEvent>()
        let queue = OperationQueue()
        queue.addRequest(EventFeed(url: URL(string: "https://replay.test/events")!), session: replay.session, receive: { events.append($0) })
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(events.values, [ServerSentEvent(data: "a"), ServerSentEvent(data: "b", id: "2")])
    }

    func testARedirectIsFollowedHopByHop() throws {
        let replay = try HARReplay(
            file: harFile([
                harEntry(
                    "https://replay.test/old", status: 302, headers: #"[{"name": "Location", "value": "/new"}]"#,
                    content: #"{"mimeType": "", "text": ""}"#),
                harEntry("https://replay.test/new", content: #"{"mimeType": "text/plain", "text": "moved here"}"#),
            ]), mode: .replayOnly)
        let events = EventLog()
        let outcome = outcomes([FetchData(url: URL(string: "https://replay.test/old")!)], session: replay.session, monitors: [events])
        XCTAssertEqual(outcome, ["ok moved here"])
        XCTAssertEqual(events.lines, ["send GET /old", "redirect 302 /new", "receive 200", "finish 1 ok"])
        XCTAssertEqual(replay.stubs?.requests.map(\.url.path), ["/old", "/new"])

        // A queue whose policy refuses redirects gets the 302 itself.
        let queue = OperationQueue()
        queue.requestPolicies.redirectPolicy = .refuse
        let refused = Recorder<Result<Data, Error>>()
        queue.addRequest(FetchData(url: URL(string: "https://replay.test/old")!), session: replay.session) { refused.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        guard case let .failure(RequestQueueError.invalidStatusCode(status, _, _))? = refused.values.first else {
            return XCTFail("\(refused.values)")
        }
        XCTAssertEqual(status, 302)
    }

    func testACancelDuringAPacedStreamEndsItOnce() throws {
        let content = #"{"mimeType": "text/plain", "text": "ab", "_chunks": [{"time": 0, "text": "a"}, {"time": 60000, "text": "b"}]}"#
        let replay = try HARReplay(file: harFile([harEntry("https://replay.test/ticks", content: content)]), mode: .replayOnly, pacing: true)
        let received = Recorder<String>()
        let results = Recorder<Result<StreamSummary, Error>>()
        let first = expectation(description: "the first chunk")
        let queue = OperationQueue()
        let operation = queue.addRequest(
            Chunks(url: URL(string: "https://replay.test/ticks")!), session: replay.session,
            receive: {
                received.append(String(decoding: $0, as: UTF8.self))
                first.fulfill()
            }, completion: { results.append($0) })
        wait(for: [first], timeout: 30)
        operation.cancel()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(received.values, ["a"])
        XCTAssertEqual(results.values.count, 1)
        XCTAssertThrowsError(try results.values.first?.get())
    }
}

extension HARReplayKindsTests {
    func testFinishFailsTheTestWhenARequestMatchedNothing() throws {
        let replay = try HARReplay(
            file: harFile([harEntry("https://replay.test/users/7", content: #"{"mimeType": "text/plain", "text": "Ada"}"#)]), mode: .replayOnly)
        _ = run(FetchData(url: URL(string: "https://replay.test/users/8")!), on: replay.session)
        XCTAssertThrowsError(try replay.finish()) { error in
            guard case let HARReplayError.unmatchedRequests(errors) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(errors.count, 1)
            XCTAssertTrue("\(error)".contains("the closest is entry 0: GET https://replay.test/users/7 → 200"), "\(error)")
        }
        let matched = try HARReplay(
            file: harFile([harEntry("https://replay.test/users/7", content: #"{"mimeType": "text/plain", "text": "Ada"}"#)]), mode: .replayOnly)
        _ = run(FetchData(url: URL(string: "https://replay.test/users/7")!), on: matched.session)
        XCTAssertNoThrow(try matched.finish())
    }
}

extension HARReplayKindsTests {
    func testNewEpisodesSendAnUploadsBodyToTheServer() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/login") { .text("got \(String(decoding: $0.body, as: UTF8.self))", status: 201) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("episodes-upload-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }

        let episodes = try HARReplay(file: file, mode: .newEpisodes)
        let sent = try XCTUnwrap(run(UploadData(url: server.url("/login"), body: Data(#"{"user":"ada"}"#.utf8)), on: episodes.session).first).get()
        XCTAssertEqual(String(decoding: sent, as: UTF8.self), #"got {"user":"ada"}"#)
        try episodes.finish()
        server.stop()

        // The new entry holds the body it sent, and a replay matched on bodies answers it.
        let replay = try HARReplay(file: file, mode: .replayOnly, matching: HARMatching(body: true))
        let replayed = try XCTUnwrap(run(UploadData(url: server.url("/login"), body: Data(#"{"user":"ada"}"#.utf8)), on: replay.session).first).get()
        XCTAssertEqual(replayed, sent)
        try replay.finish()
    }
}

extension HARReplayKindsTests {
    /// A server that sends its headers and half its body, then closes: recorded with its status and `_error`, replayed
    /// as the same failure, after the same bytes.
    func testABodyThatBrokeOffIsRecordedAndReplayedAsTheSameFailure() throws {
        let server = try LoopbackServer()
        server.route("/broken") { _ in
            var broken = LoopbackResponse.text(String(repeating: "x", count: 2000))
            broken.fault = .closeMidBody
            return broken
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("broken-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }

        let recording = try HARReplay(file: file, mode: .all)
        let liveBytes = Recorder<Int>()
        let monitor = BytesMonitor(bytes: liveBytes)
        let live = outcomes([FetchData(url: server.url("/broken"))], session: recording.session, monitors: recording.monitors + [monitor])
        try recording.finish()
        server.stop()
        XCTAssertTrue(live[0].hasPrefix("URLError"), live[0])

        let entry = try XCTUnwrap(
            (try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any]).flatMap { ($0["log"] as? [String: Any])?["entries"] as? [[String: Any]] }?
                .first)
        let response = try XCTUnwrap(entry["response"] as? [String: Any])
        XCTAssertEqual(response["status"] as? Int, 200)
        XCTAssertNotNil(response["_error"] as? String, "the error beside the status")

        let replay = try HARReplay(file: file, mode: .replayOnly)
        let replayedBytes = Recorder<Int>()
        let replayed = outcomes([FetchData(url: server.url("/broken"))], session: replay.session, monitors: [BytesMonitor(bytes: replayedBytes)])
        XCTAssertEqual(replayed, live)
        XCTAssertEqual(replayedBytes.values, liveBytes.values, "the same bytes arrived before the failure")
        try replay.finish()
    }
}

/// Records the body bytes of each attempt that got a response.
private final class BytesMonitor: RequestEventMonitor, @unchecked Sendable {
    let bytes: Recorder<Int>
    init(bytes: Recorder<Int>) { self.bytes = bytes }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        bytes.append(bodyBytes)
    }
}

/// GET `url` with a request timeout of `timeout` seconds, as a stream of raw chunks.
private struct ImpatientChunks: StreamRequest {
    let url: URL
    let timeout: TimeInterval
    var identifier: String { "impatient \(url.absoluteString)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url, timeoutInterval: timeout)))
    }
}

extension HARReplayKindsTests {
    func testAResponseWithoutABodyGetsNoneAndKeepsItsLength() throws {
        let replay = try HARReplay(
            file: harFile([
                harEntry(
                    "https://replay.test/file", method: "HEAD", headers: #"[{"name": "Content-Length", "value": "1048576"}]"#,
                    content: #"{"size": 0, "mimeType": ""}"#),
                // As browsers export a 304: with the cached body, which no 304 carries.
                harEntry(
                    "https://replay.test/config", status: 304, headers: #"[{"name": "Content-Length", "value": "51"}, {"name": "ETag", "value": "\"v1\""}]"#,
                    content: #"{"size": 51, "mimeType": "application/json", "text": "{\"features\":{\"streaming\":true},\"version\":\"2026\"}"}"#),
            ]), mode: .replayOnly)
        let queue = OperationQueue()
        let head = Recorder<HTTPURLResponse>()
        let monitor = ResponseMonitor(responses: head)
        queue.requestPolicies.monitors = [monitor]
        queue.addRequest(FetchData(url: URL(string: "https://replay.test/file")!, method: "HEAD"), session: replay.session) { _ in }
        queue.addRequest(FetchData(url: URL(string: "https://replay.test/config")!), session: replay.session) { _ in }
        queue.waitUntilAllOperationsAreFinished()
        let responses = Dictionary(head.values.map { ($0.statusCode, $0) }, uniquingKeysWith: { first, _ in first })
        XCTAssertEqual(responses[200]?.expectedContentLength, 1_048_576, "a HEAD's length is the representation's")
        XCTAssertEqual(monitor.bodyBytes.values.sorted(), [0, 0], "neither the HEAD nor the 304 delivers a body")
    }

    func testABrowsersErrorBesideAWholeBodyIsNotAFailure() throws {
        let replay = try HARReplay(
            file: harFile([
                #"{"request": {"method": "GET", "url": "https://replay.test/a"}, "response": {"status": 200, "_error": "net::ERR_ABORTED", "content": {"size": 2, "mimeType": "text/plain", "text": "ok"}}}"#,
                #"{"request": {"method": "GET", "url": "https://replay.test/b"}, "response": {"status": 200, "_error": "", "content": {"size": 2, "mimeType": "text/plain", "text": "ok"}}}"#,
                #"{"request": {"method": "GET", "url": "https://replay.test/c"}, "response": {"status": 200, "_error": "net::ERR_CONNECTION_RESET", "content": {"size": 10, "mimeType": "text/plain", "text": "part"}}}"#,
            ]), mode: .replayOnly)
        let results = outcomes(
            ["a", "b", "c"].map { FetchData(url: URL(string: "https://replay.test/\($0)")!) }, session: replay.session, monitors: [])
        XCTAssertEqual(results, ["ok ok", "ok ok", "URLError \(URLError.networkConnectionLost.rawValue)"], "only a body known to be short broke")
    }

    func testAHostilePauseEndsAtTheRequestsTimeout() throws {
        let content = #"{"mimeType": "text/plain", "text": "ab", "_chunks": [{"time": 0, "text": "a"}, {"time": 1e300, "text": "b"}]}"#
        let replay = try HARReplay(file: harFile([harEntry("https://replay.test/ticks", content: content)]), mode: .replayOnly, pacing: true)
        let received = Recorder<String>()
        let queue = OperationQueue()
        queue.addRequest(
            ImpatientChunks(url: URL(string: "https://replay.test/ticks")!, timeout: 1), session: replay.session,
            receive: { received.append(String(decoding: $0, as: UTF8.self)) })
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(received.values, ["a", "b"])
    }

    func testAFieldTheReplayAnswersWithMustHaveItsType() throws {
        for entry in [
            #"{"request": {"method": 5, "url": "https://replay.test/a"}, "response": {"status": 200}}"#,
            #"{"request": {"url": "https://replay.test/a"}, "response": {"status": 200, "content": {"text": ["x"]}}}"#,
            #"{"request": {"url": "https://replay.test/a"}, "response": {"status": 200, "content": {"text": "x", "_chunks": [{"time": 0, "text": 7}]}}}"#,
        ] {
            XCTAssertThrowsError(try HARReplay(file: harFile([entry]), mode: .replayOnly), entry) { error in
                guard case HARReplayError.unreadableFile = error else { return XCTFail("\(error)") }
            }
        }
    }
}

/// Keeps each response and its body's size.
private final class ResponseMonitor: RequestEventMonitor, @unchecked Sendable {
    let responses: Recorder<HTTPURLResponse>
    let bodyBytes = Recorder<Int>()
    init(responses: Recorder<HTTPURLResponse>) { self.responses = responses }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        responses.append(response)
        self.bodyBytes.append(bodyBytes)
    }
}
