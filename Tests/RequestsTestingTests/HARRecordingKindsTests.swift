#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import RequestsTesting
import XCTest

/// The raw pieces of a stream.
struct StreamedPieces: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// POSTs a multipart form.
struct UploadForm: UploadRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    let form: MultipartFormData
    var identifier: String { "form \(url.absoluteString)" }
    var uploadBody: UploadBody { .multipart(form) }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// POSTs `body` as a body stream of the request's own.
struct StreamedBodyPost: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    let body: Data
    var identifier: String { "stream-post \(url.absoluteString)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBodyStream = InputStream(data: body)
        request.setValue("\(body.count)", forHTTPHeaderField: "Content-Length")
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// What ``HARRecorder`` records of each kind of request: a stream piece by piece, a redirect hop by hop, a multipart
/// form's body. (Run on libcurl too: `REQUESTS_TRANSPORT=curl swift test --filter HARRecordingKindsTests`.)
final class HARRecordingKindsTests: XCTestCase {
    private func entries(_ recorder: HARRecorder) throws -> [[String: Any]] {
        let file = try XCTUnwrap(try JSONSerialization.jsonObject(with: recorder.harData()) as? [String: Any])
        return try XCTUnwrap((file["log"] as? [String: Any])?["entries"] as? [[String: Any]])
    }

    private func content(_ entry: [String: Any]) throws -> [String: Any] {
        try XCTUnwrap((entry["response"] as? [String: Any])?["content"] as? [String: Any])
    }

    /// Runs the stream at `url` to its end with `recorder` attached.
    private func stream<R: StreamRequest>(_ request: R, recorder: HARRecorder) {
        let queue = OperationQueue()
        queue.requestPolicies.monitors = [recorder]
        let done = expectation(description: "the stream ended")
        queue.addRequest(request, session: URLSession(configuration: .ephemeral), receive: { _ in }) { _ in done.fulfill() }
        wait(for: [done], timeout: 20)
    }

    /// The chunks of `content`: their bytes and times, after checking that the times never go back.
    private func chunks(_ content: [String: Any], file: StaticString = #filePath, line: UInt = #line) throws -> [(bytes: Data, time: Double)] {
        let chunks = try XCTUnwrap(content["_chunks"] as? [[String: Any]], "no _chunks", file: file, line: line)
        let decoded = try chunks.map { chunk -> (Data, Double) in
            let text = try XCTUnwrap(chunk["text"] as? String, file: file, line: line)
            let bytes = chunk["encoding"] as? String == "base64" ? try XCTUnwrap(Data(base64Encoded: text), file: file, line: line) : Data(text.utf8)
            return (bytes, try XCTUnwrap(chunk["time"] as? Double, file: file, line: line))
        }
        XCTAssertTrue(decoded.allSatisfy { !$0.0.isEmpty && $0.1 >= 0 }, "every piece has bytes and a time", file: file, line: line)
        XCTAssertEqual(decoded.map(\.1), decoded.map(\.1).sorted(), "times never go back", file: file, line: line)
        return decoded
    }

    func testAStreamIsRecordedPieceByPieceWithTheTimeEachArrived() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let pieces = [Data([0, 1, 2, 0xFF]), Data([0xFE, 0xFD]), Data(repeating: 9, count: 300), Data([42])]
        // 100 ms apart: only a client stalled for longer than that reads two pieces as one.
        server.stream("/bytes") { _ in LoopbackStream(pieces: pieces, intervalMilliseconds: 100) }
        let recorder = HARRecorder()
        stream(StreamedPieces(url: server.url("/bytes")), recorder: recorder)

        let entries = try entries(recorder)
        XCTAssertEqual(entries.count, 1)
        let content = try content(try XCTUnwrap(entries.first))
        let whole = pieces.reduce(Data(), +)
        let chunks = try chunks(content)
        XCTAssertGreaterThan(chunks.count, 1, "the pieces as they arrived")
        XCTAssertEqual(chunks.map(\.bytes).reduce(Data(), +), whole, "every piece, in order")
        XCTAssertEqual((content["_chunks"] as? [[String: Any]])?.first?["encoding"] as? String, "base64", "binary pieces in Base64")
        XCTAssertEqual(content["encoding"] as? String, "base64")
        XCTAssertEqual(content["text"] as? String, whole.base64EncodedString(), "the text is the pieces one after the other")
        XCTAssertEqual(content["size"] as? Int, whole.count)
        XCTAssertNil(content["comment"])
    }

    func testARecordedEventStreamIsReplayedAsTheSameEvents() throws {
        let server = try LoopbackServer()
        server.stream("/events") { _ in .events(["id: 1\ndata: one", "data: two", "event: last\ndata: three"], intervalMilliseconds: 50) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("events-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }
        func events(_ replay: HARReplay) -> [ServerSentEvent] {
            let events = Recorder<ServerSentEvent>()
            let queue = OperationQueue()
            queue.requestPolicies.monitors = replay.monitors
            queue.addRequest(Events(url: server.url("/events")), session: replay.session, receive: { events.append($0) })
            queue.waitUntilAllOperationsAreFinished()
            return events.values
        }
        let recording = try HARReplay(file: file, mode: .once)
        let live = events(recording)
        try recording.finish()
        server.stop()
        XCTAssertEqual(live.map(\.data), ["one", "two", "three"])
        // From the recorded pieces (`_chunks`), with the server gone.
        XCTAssertEqual(events(try HARReplay(file: file, mode: .replayOnly)), live)
    }

    func testServerSentEventsAreRecordedAsTextAndCutAtTheBound() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let events = ["id: 1\ndata: one", "id: 2\ndata: two", "id: 3\ndata: three"]
        server.stream("/events") { _ in .events(events, intervalMilliseconds: 100) }
        let whole = events.map { $0 + "\n\n" }.joined()

        let recorder = HARRecorder()
        stream(Events(url: server.url("/events")), recorder: recorder)
        let content = try content(try XCTUnwrap(try entries(recorder).first))
        let chunks = try chunks(content)
        XCTAssertGreaterThan(chunks.count, 1)
        XCTAssertEqual(String(decoding: chunks.map(\.bytes).reduce(Data(), +), as: UTF8.self), whole)
        XCTAssertNil((content["_chunks"] as? [[String: Any]])?.first?["encoding"], "an event stream's pieces are text")
        XCTAssertEqual(content["text"] as? String, whole)
        XCTAssertNil(content["encoding"])

        // Cut inside the second event: the pieces stop there, and the entry says so.
        let bounded = HARRecorder(maximumBodyBytes: 20)
        stream(Events(url: server.url("/events")), recorder: bounded)
        let cut = try self.content(try XCTUnwrap(try entries(bounded).first))
        XCTAssertEqual(cut["text"] as? String, String(whole.prefix(20)))
        XCTAssertEqual(String(decoding: try self.chunks(cut).map(\.bytes).reduce(Data(), +), as: UTF8.self), String(whole.prefix(20)))
        XCTAssertEqual(cut["size"] as? Int, whole.utf8.count)
        XCTAssertEqual(cut["comment"] as? String, "truncated: 20 of \(whole.utf8.count) bytes kept")
    }
}

// MARK: - Redirects and multipart forms

extension HARRecordingKindsTests {
    private func request(_ entry: [String: Any]) throws -> [String: Any] {
        try XCTUnwrap(entry["request"] as? [String: Any])
    }

    private func response(_ entry: [String: Any]) throws -> [String: Any] {
        try XCTUnwrap(entry["response"] as? [String: Any])
    }

    func testEachRedirectHopIsAnEntryOfItsOwn() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/from") { _ in LoopbackResponse(status: 302, headers: ["Location": "/to"]) }
        server.route("/to") { _ in .text("landed") }
        server.route("/submit") { _ in LoopbackResponse(status: 303, headers: ["Location": "/result"]) }
        server.route("/result") { .text("result of \($0.method)") }
        server.route("/moved") { _ in LoopbackResponse(status: 307, headers: ["Location": "/moved-here"]) }
        server.route("/moved-here") { .text("got \($0.method) \(String(decoding: $0.body, as: UTF8.self))") }
        let recorder = HARRecorder()
        let outcomes = outcomes(
            [
                FetchData(url: server.url("/from")),
                FetchData(url: server.url("/submit"), method: "POST", headers: ["Content-Type": "text/plain"], body: Data("payload".utf8)),
                FetchData(url: server.url("/moved"), method: "POST", headers: ["Content-Type": "text/plain"], body: Data("again".utf8)),
            ], session: URLSession(configuration: .ephemeral), monitors: [recorder])
        XCTAssertEqual(outcomes, ["ok landed", "ok result of GET", "ok got POST again"])

        let entries = try entries(recorder)
        XCTAssertEqual(entries.count, 6, "two hops for each request")
        guard entries.count == 6 else { return }
        let requests = try entries.map(request)
        let responses = try entries.map(response)
        XCTAssertEqual(requests.map { $0["method"] as? String }, ["GET", "GET", "POST", "GET", "POST", "POST"])
        XCTAssertEqual(
            requests.map { $0["url"] as? String },
            ["/from", "/to", "/submit", "/result", "/moved", "/moved-here"].map { server.url($0).absoluteString })
        XCTAssertEqual(responses.map { $0["status"] as? Int }, [302, 200, 303, 200, 307, 200])
        XCTAssertEqual(
            responses.map { $0["redirectURL"] as? String },
            [server.url("/to").absoluteString, "", server.url("/result").absoluteString, "", server.url("/moved-here").absoluteString, ""])
        // The POST's body is on the POST, not on the GET the 303 asked for; a 307 sends it again.
        XCTAssertEqual(requests.map { ($0["postData"] as? [String: Any])?["text"] as? String }, [nil, nil, "payload", nil, "again", "again"])
        XCTAssertEqual(try self.content(entries[5])["text"] as? String, "got POST again")
        XCTAssertTrue(entries.allSatisfy { $0["comment"] == nil }, "each entry is its own hop's: no 'after redirects'")
    }

    func testARedirectThatCouldNotBeFollowedIsOneEntry() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/moved") { _ in LoopbackResponse(status: 307, headers: ["Location": "/moved-here"]) }
        server.route("/moved-here") { _ in .text("never asked") }
        // A body stream cannot be sent again: the 307 is the response (see Limits and security).
        let recorder = HARRecorder()
        let outcomes = outcomes(
            [StreamedBodyPost(url: server.url("/moved"), body: Data("once".utf8))], session: URLSession(configuration: .ephemeral),
            monitors: [recorder])
        XCTAssertEqual(outcomes, ["status 307: "])
        let entries = try entries(recorder)
        XCTAssertEqual(entries.count, 1, "the 307, once")
        XCTAssertEqual(try entries.map { try request($0)["url"] as? String }, [server.url("/moved").absoluteString])
        XCTAssertEqual(try entries.map { try response($0)["status"] as? Int }, [307])
        XCTAssertEqual(try entries.map { (try request($0)["postData"] as? [String: Any])?["comment"] as? String }, ["a body stream is not recorded"])
    }

    func testAMultipartFormBuiltInMemoryIsRecordedAndOneStreamedFromAFileIsNot() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/form") { .text("\($0.body.count)") }
        var small = MultipartFormData()
        small.append("hello form", name: "greeting")
        var large = small
        large.streamingThreshold = 1
        let recorder = HARRecorder()
        let outcomes = outcomes(
            [UploadForm(url: server.url("/form"), form: small), UploadForm(url: server.url("/form"), form: large)],
            session: URLSession(configuration: .ephemeral), monitors: [recorder])
        XCTAssertEqual(outcomes.count, 2)

        let posted = try entries(recorder).map { try XCTUnwrap(try request($0)["postData"] as? [String: Any]) }
        XCTAssertEqual(posted.count, 2)
        let text = try XCTUnwrap(posted[0]["text"] as? String)
        XCTAssertTrue(text.contains("name=\"greeting\""), text)
        XCTAssertTrue(text.contains("hello form"), text)
        XCTAssertEqual(outcomes.first, "ok \(text.utf8.count)", "the whole body the server got")
        XCTAssertTrue((posted[0]["mimeType"] as? String)?.hasPrefix("multipart/form-data; boundary=") == true)
        XCTAssertEqual(posted[1]["text"] as? String, "")
        XCTAssertEqual(posted[1]["comment"] as? String, "a multipart form streamed from a file is not recorded")
    }
}

// MARK: - The file

extension HARRecordingKindsTests {
    func testAFileWithStreamsRedirectsAndFormsPassesCheckHAR() throws {
        #if os(Linux) || os(macOS)
        let server = try LoopbackServer()
        defer { server.stop() }
        server.stream("/events") { _ in .events(["data: one", "data: two"], intervalMilliseconds: 50) }
        server.stream("/bytes") { _ in LoopbackStream(pieces: [Data([0, 0xFF]), Data([1, 0xFE])], intervalMilliseconds: 50) }
        server.route("/from") { _ in LoopbackResponse(status: 302, headers: ["Location": "/to"]) }
        server.route("/to") { _ in .text("landed") }
        server.route("/form") { .text("\($0.body.count)") }
        var form = MultipartFormData()
        form.append("value", name: "field")
        let recorder = HARRecorder()
        stream(Events(url: server.url("/events")), recorder: recorder)
        stream(StreamedPieces(url: server.url("/bytes")), recorder: recorder)
        _ = outcomes(
            [FetchData(url: server.url("/from")), UploadForm(url: server.url("/form"), form: form)], session: URLSession(configuration: .ephemeral),
            monitors: [recorder])
        XCTAssertEqual(recorder.entryCount, 5)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("kinds-\(UUID().uuidString).har")
        defer { try? FileManager.default.removeItem(at: file) }
        try recorder.write(to: file)

        let text = try checkHAR(file)
        XCTAssertTrue(text.contains("5 entries valid"), text)
        #endif
    }
}
