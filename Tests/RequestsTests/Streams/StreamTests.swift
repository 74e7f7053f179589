#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// GET `url` as a stream decoded by `makeDecoder`.
struct StreamOf<D: StreamDecoder>: StreamRequest {
    typealias Decoder = D
    let url: URL
    let decoder: @Sendable () -> D
    var policy: ReconnectPolicy?
    var ownLimits: TransferLimits? = .stream
    var ownBufferSize = 8 * 1024 * 1024
    var ownRetryPolicy: RetryPolicy?
    var timeout: TimeInterval = 30
    var identifier: String { url.absoluteString }
    var reconnectPolicy: ReconnectPolicy? { policy }
    var limits: TransferLimits? { ownLimits }
    var bufferSize: Int { ownBufferSize }
    var retryPolicy: RetryPolicy? { ownRetryPolicy }
    func makeDecoder() -> D { decoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url, timeoutInterval: timeout)))
    }
}

private struct Tick: Decodable, Equatable, Sendable {
    let n: Int
}

/// An event stream with every default, as a user writes one.
struct EventFeed: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Raw chunks with every default.
struct Chunks: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Records what monitors see, as one line per event.
final class StreamEventLog: RequestEventMonitor, @unchecked Sendable {
    let lines = Recorder<String>()
    func requestWillSend(_ attempt: RequestAttempt) {
        lines.append("send \(attempt.number) \(attempt.urlRequest.value(forHTTPHeaderField: "Last-Event-ID") ?? "-")")
    }
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {
        lines.append("receive \(attempt.number) \(response.statusCode)")
    }
    func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval) {
        lines.append("fail \(attempt.number)")
    }
    func requestDidRetry(_ attempt: RequestAttempt, delay: TimeInterval) {
        lines.append("retry \(attempt.number)")
    }
    func requestDidFinish(_ summary: RequestSummary) {
        lines.append("finish \(summary.error == nil ? "ok" : "error")")
    }
}

/// What one stream delivered: its elements, its outcome, and whether anything broke the rules.
final class StreamProbe<Element>: @unchecked Sendable {
    let elements = Recorder<Element>()
    let outcomes = Recorder<Result<StreamSummary, Error>>()
    let violations = Recorder<String>()

    func receive(_ element: Element) {
        if outcomes.count > 0 { violations.append("element after the completion") }
        elements.append(element)
    }

    func complete(_ result: Result<StreamSummary, Error>) {
        outcomes.append(result)
    }

    var outcome: Result<StreamSummary, Error>? { outcomes.values.first }
}

/// The README's example, against the loopback server.
private let chatAPI = Endpoint(TestServer.shared.baseURL.absoluteString)

private struct Chat: StreamRequest, EndpointRequest {  // server-sent events
    let prompt: String
    var endpoint: Endpoint { chatAPI.post("chat", body: .json(["prompt": prompt])) }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
}

final class StreamTests: XCTestCase {
    private let server = TestServer.shared

    private func path(_ name: String) -> String {
        "/stream/\(name)/\(UUID().uuidString)"
    }

    /// Runs `request` on a fresh queue and waits for its outcome.
    @discardableResult
    private func run<R: StreamRequest>(
        _ request: R, policies: RequestPolicies = RequestPolicies(), completionQueue: DispatchQueue? = nil,
        timeout: TimeInterval = 20, file: StaticString = #filePath, line: UInt = #line,
        onElement: @escaping (R.Element, StreamRequestOperation<R>) -> Void = { _, _ in }
    ) -> (StreamProbe<R.Element>, StreamRequestOperation<R>) {
        let queue = OperationQueue()
        queue.requestPolicies = policies
        let probe = StreamProbe<R.Element>()
        let box = Box<StreamRequestOperation<R>>()
        let operation = queue.addRequest(request, session: testSession, completionQueue: completionQueue) { element in
            probe.receive(element)
            if let operation = box.value { onElement(element, operation) }
        } completion: {
            probe.complete($0.mapError { $0 })
        }
        box.value = operation
        waitUntil(timeout: timeout, "the stream's outcome", file: file, line: line) { operation.isFinished }
        XCTAssertEqual(probe.outcomes.count, 1, "completions", file: file, line: line)
        XCTAssertEqual(probe.violations.values, [], file: file, line: line)
        return (probe, operation)
    }

    func testTheReadmeExample() async throws {
        server.stream("/chat") { request in
            let prompt = (try? JSONDecoder().decode([String: String].self, from: request.body))?["prompt"] ?? "?"
            return .events(["data: You said", "data: \(prompt)"])
        }
        let queue = OperationQueue()
        var text = ""
        let done = expectation(description: "completion")
        queue.addRequest(Chat(prompt: "Hello"), completionQueue: .main) { event in
            text += event.data
        } completion: { result in
            XCTAssertEqual(result.success?.elements, 2)
            done.fulfill()
        }
        await fulfillment(of: [done], timeout: 10)
        XCTAssertEqual(text, "You saidHello")

        var events: [String] = []
        for try await event in queue.stream(for: Chat(prompt: "Hello")) {
            events.append(event.data)
        }
        XCTAssertEqual(events, ["You said", "Hello"])
    }

    // MARK: - Chunks, lines, JSON lines

    func testChunksArriveInOrderOnTheCompletionQueueThenTheCompletion() throws {
        // Given a megabyte of a known pattern, and a serial completion queue
        let queue = DispatchQueue(label: "consumer")
        let key = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: key, value: true)
        let offQueue = Recorder<Bool>()
        // When it is streamed as raw chunks
        let (probe, operation) = run(Chunks(url: server.url("/bytes/1000000")), completionQueue: queue) { _, _ in
            if DispatchQueue.getSpecific(key: key) != true { offQueue.append(true) }
        }
        // Then every byte arrives, in order, on that queue, in more than one chunk, before a successful completion
        let bytes = probe.elements.values.reduce(Data(), +)
        XCTAssertEqual(bytes.count, 1_000_000)
        XCTAssertTrue(bytes.enumerated().allSatisfy { $0.element == UInt8($0.offset % 256) })
        XCTAssertGreaterThan(probe.elements.count, 1)
        XCTAssertEqual(offQueue.count, 0)
        let summary = try XCTUnwrap(probe.outcome?.success)
        XCTAssertEqual(summary.bytes, 1_000_000)
        XCTAssertEqual(summary.elements, probe.elements.count)
        XCTAssertEqual(summary.connections, 1)
        XCTAssertEqual(operation.response?.statusCode, 200)
    }

    func testLinesAcrossPiecesWithCRLFAndALastLineWithoutABreak() throws {
        // Given lines cut at awkward places by the server's pieces
        let path = path("lines")
        server.stream(path) { _ in
            LoopbackStream(pieces: ["fir", "st\r", "\nsecond\n", "\u{FEFF}kept\nthi", "rd"].map { Data($0.utf8) }, intervalMilliseconds: 5)
        }
        // When they are read as lines
        let (probe, _) = run(StreamOf(url: server.url(path)) { LineDecoder() })
        // Then each line arrives whole, without its break
        XCTAssertNotNil(probe.outcome?.success)
        XCTAssertEqual(probe.elements.values, ["first", "second", "\u{FEFF}kept", "third"])
    }

    func testABadJSONLineFailsWithItsNumberAfterTheLinesBeforeIt() throws {
        // Given NDJSON whose third line is not a Tick
        let path = path("ndjson")
        server.stream(path) { _ in
            LoopbackStream(pieces: [#"{"n":1}"# + "\n", #"{"n":2}"# + "\n", #"{"n":"x"}"# + "\n", #"{"n":4}"# + "\n"].map { Data($0.utf8) })
        }
        // When it is decoded
        let (probe, _) = run(StreamOf(url: server.url(path)) { JSONLinesDecoder<Tick>() })
        // Then the first two arrive, and the stream fails naming line 3
        XCTAssertEqual(probe.elements.values, [Tick(n: 1), Tick(n: 2)])
        guard case let .invalidJSON(line, _)? = probe.outcome?.failure as? StreamError else {
            return XCTFail("\(String(describing: probe.outcome))")
        }
        XCTAssertEqual(line, 3)
    }

    // MARK: - Server-sent events

    func testEventsArriveAsTheServerSendsThem() throws {
        // Given an event stream with comments, a multi-line event and an id
        let path = path("sse")
        server.stream(path) { _ in
            .events([": hello", "event: greeting\ndata: hi\ndata: there", "id: 1\ndata: {\"n\":1}"], intervalMilliseconds: 10)
        }
        // When it is read with the defaults
        let (probe, _) = run(EventFeed(url: server.url(path)))
        // Then each event arrives, and the stream ends with the body (no reconnection by default)
        XCTAssertEqual(probe.elements.values, [ServerSentEvent(type: "greeting", data: "hi\nthere"), ServerSentEvent(data: #"{"n":1}"#, id: "1")])
        XCTAssertEqual(probe.outcome?.success?.connections, 1)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testAnEventStreamWithTheWrongContentTypeFailsBeforeAnyEvent() throws {
        // Given a server that answers an event stream with JSON lines
        let path = path("not-sse")
        server.stream(path) { _ in
            LoopbackStream(headers: ["Content-Type": "application/json"], pieces: [Data("data: x\n\n".utf8)])
        }
        // When it is read as events
        let (probe, _) = run(EventFeed(url: server.url(path)))
        // Then it fails with the content type, and nothing was delivered or sent again
        XCTAssertEqual(probe.outcome?.failure as? StreamError, .notAnEventStream(contentType: "application/json"))
        XCTAssertEqual(probe.elements.count, 0)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testADroppedEventStreamReconnectsWithTheLastEventIDAfterTheServersRetryTime() throws {
        // Given a stream that drops in the middle of event 4, after asking for a 50 ms retry, and then resumes
        // from the id the client sends
        let path = path("reconnect")
        let lastEventIDs = Recorder<String>()
        server.stream(path) { request in
            lastEventIDs.append(request.headers["last-event-id"] ?? "-")
            guard let from = request.headers["last-event-id"].flatMap(Int.init) else {
                var first = LoopbackStream.events(["retry: 50", "id: 1\ndata: one", "id: 2\ndata: two", "id: 3\ndata: three"], ending: .close)
                first.pieces.append(Data("id: 4\ndata: fo".utf8))
                return first
            }
            return .events((from + 1...6).map { "id: \($0)\ndata: \($0)" })
        }
        let log = StreamEventLog()
        // When it is read with a policy whose own delay is far longer than the test waits
        let request = StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: ReconnectPolicy(delay: 60))
        let (probe, _) = run(request, policies: RequestPolicies(monitors: [log]))
        // Then every event arrives once, in order, over two connections, the second one sending Last-Event-ID: 3
        XCTAssertEqual(probe.elements.values.map(\.data), ["one", "two", "three", "4", "5", "6"])
        XCTAssertEqual(probe.elements.values.map(\.id), ["1", "2", "3", "4", "5", "6"])
        XCTAssertEqual(lastEventIDs.values, ["-", "3"])
        let summary = try XCTUnwrap(probe.outcome?.success)
        XCTAssertEqual(summary.connections, 2)
        XCTAssertEqual(summary.elements, 6)
        // And the monitors saw the drop and the reconnection
        XCTAssertEqual(log.lines.values, ["send 1 -", "receive 1 200", "fail 1", "retry 1", "send 2 3", "receive 2 200", "finish ok"])
    }

    func testAReconnectionAnsweredWith204EndsTheStream() throws {
        // Given a stream that drops, and then answers 204
        let path = path("reconnect-204")
        server.stream(path) { request in
            request.headers["last-event-id"] == nil
                ? .events(["retry: 10", "id: 1\ndata: one"], ending: .close)
                : LoopbackStream(status: 204, pieces: [])
        }
        // When it is read with reconnection
        let (probe, _) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: .default))
        // Then it succeeds after the 204, without a third request
        XCTAssertEqual(probe.elements.values.map(\.data), ["one"])
        XCTAssertEqual(probe.outcome?.success?.response?.statusCode, 204)
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testAReconnectionAnsweredWithAnErrorStatusFailsWithoutAnotherTry() throws {
        // Given a stream that drops, and then answers 503, with a retry policy on the queue
        let path = path("reconnect-503")
        server.stream(path) { request in
            request.headers["last-event-id"] == nil
                ? .events(["retry: 10", "id: 1\ndata: one"], ending: .reset)
                : LoopbackStream(status: 503, headers: ["Content-Type": "text/plain"], pieces: [Data("down".utf8)])
        }
        // When it is read
        let (probe, _) = run(
            StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: .default),
            policies: RequestPolicies(retryPolicy: RetryPolicy(baseDelay: 0.01))
        )
        // Then the 503 ends it, with its body, and no retry follows
        XCTAssertEqual((probe.outcome?.failure as? RequestQueueError)?.statusCode, 503)
        XCTAssertEqual((probe.outcome?.failure as? RequestQueueError)?.responseBody, Data("down".utf8))
        XCTAssertEqual(probe.elements.count, 1)
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testReconnectionGivesUpAfterItsAttemptsInARow() throws {
        // Given a stream that always drops before its first event
        let path = path("always-drops")
        server.stream(path) { _ in .events(["retry: 1", ": nothing yet"], ending: .reset) }
        // When it is read with at most three empty connections in a row
        let log = StreamEventLog()
        let (probe, _) = run(
            StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: ReconnectPolicy(maxAttempts: 3)),
            policies: RequestPolicies(monitors: [log]))
        // Then it fails with the transport error after three connections
        XCTAssertTrue(probe.outcome?.failure is URLError, "\(String(describing: probe.outcome))")
        XCTAssertEqual(server.requestCount(path: path), 3)
        // And monitors saw each connection fail, the last one too, before the finish
        XCTAssertEqual(
            log.lines.values,
            [
                "send 1 -", "receive 1 200", "fail 1", "retry 1", "send 2 -", "receive 2 200", "fail 2", "retry 2", "send 3 -", "receive 3 200", "fail 3",
                "finish error",
            ])
    }

    // MARK: - Status, retries, limits

    func testAnErrorStatusIsAFailureWithItsBodyAndNoElement() throws {
        // Given a 404 with a JSON body
        // When it is streamed
        let (probe, _) = run(Chunks(url: server.url("/status/404")))
        // Then it fails with the status and the body, and no chunk was delivered
        let error = try XCTUnwrap(probe.outcome?.failure as? RequestQueueError)
        XCTAssertEqual(error.statusCode, 404)
        XCTAssertEqual(error.responseBody.map { String(decoding: $0, as: UTF8.self) }, #"{"status":404,"error":"Not Found"}"#)
        XCTAssertEqual(probe.elements.count, 0)
    }

    func testTheRetryPolicyAppliesBeforeTheFirstElementOnly() throws {
        // Given a 503 then a stream
        let before = path("retry-before")
        let first = Box<Bool>()
        server.stream(before) { _ in
            guard first.value == nil else { return .events(["data: ok"]) }
            first.value = true
            return LoopbackStream(status: 503, pieces: [])
        }
        let retry = RetryPolicy(baseDelay: 0.01)
        // When it is read with a retry policy
        let (retried, _) = run(StreamOf(url: server.url(before), decoder: { ServerSentEventDecoder() }, ownRetryPolicy: retry))
        // Then the 503 was retried
        XCTAssertEqual(retried.elements.values.map(\.data), ["ok"])
        XCTAssertEqual(server.requestCount(path: before), 2)

        // Given lines whose connection drops after the first line
        let after = path("retry-after")
        server.stream(after) { _ in LoopbackStream(pieces: [Data("one\n".utf8), Data("tw".utf8)], intervalMilliseconds: 20, ending: .reset) }
        // When it is read with the same policy
        let (dropped, _) = run(StreamOf(url: server.url(after), decoder: { LineDecoder() }, ownRetryPolicy: retry))
        // Then the drop is the outcome: the line was delivered, so it is not sent again, and the half line is not delivered
        XCTAssertTrue(dropped.outcome?.failure is URLError, "\(String(describing: dropped.outcome))")
        XCTAssertEqual(dropped.elements.values, ["one"])
        XCTAssertEqual(server.requestCount(path: after), 1)
    }

    func testALineLongerThanTheLimitEndsAnEndlessBody() throws {
        // Given a body of zero bytes that never ends (and never breaks a line)
        // When it is read as lines of at most 64 KiB
        let (probe, _) = run(StreamOf(url: server.url("/hostile/endless?chunk=4096&interval=1")) { LineDecoder(maximumLineLength: 65536) })
        // Then it fails with the limit, at once
        XCTAssertEqual(probe.outcome?.failure as? StreamError, .lineTooLong(line: 1, limit: 65536))
    }

    func testInvalidUTF8InALineFails() throws {
        let path = path("bad-utf8")
        server.stream(path) { _ in LoopbackStream(pieces: [Data("ok\n".utf8), Data([0x6E, 0x6F, 0xC3, 0x28, 0x0A])]) }
        let (probe, _) = run(StreamOf(url: server.url(path)) { LineDecoder() })
        XCTAssertEqual(probe.elements.values, ["ok"])
        XCTAssertEqual(probe.outcome?.failure as? StreamError, .invalidUTF8(line: 2))
    }

    func testAServerThatClosesMidLineFails() throws {
        // Given a chunked body cut off (no last chunk) in the middle of a line
        let path = path("mid-line")
        server.stream(path) { _ in LoopbackStream(pieces: [Data("whole\nhal".utf8)], ending: .close) }
        // When it is read as lines
        let (probe, _) = run(StreamOf(url: server.url(path)) { LineDecoder() })
        // Then the whole line arrives, the half line does not, and the stream fails with the transport's error
        XCTAssertEqual(probe.elements.values, ["whole"])
        XCTAssertTrue(probe.outcome?.failure is URLError, "\(String(describing: probe.outcome))")
    }

    func testTheMaximumBodySizeAppliesWhenTheRequestSetsIt() throws {
        var limits = TransferLimits.stream
        limits.maximumBodySize = 100_000
        let (probe, _) = run(StreamOf(url: server.url("/hostile/endless?chunk=8192&interval=1"), decoder: { DataChunkDecoder() }, ownLimits: limits))
        XCTAssertEqual(probe.outcome?.failure as? TransferLimitError, .responseTooLarge(limit: 100_000))
        XCTAssertLessThanOrEqual(probe.elements.values.reduce(0) { $0 + $1.count }, 100_000)
    }

    func testTheMinimumSpeedAppliesWhenTheRequestSetsIt() throws {
        // Given a body that trickles a byte every 100 ms
        var limits = TransferLimits.stream
        limits.minimumSpeed = MinimumSpeed(bytes: 1024, seconds: 1)
        // When it is streamed with a minimum of 1 KiB a second
        let (probe, _) = run(StreamOf(url: server.url("/hostile/endless?chunk=1&interval=100"), decoder: { DataChunkDecoder() }, ownLimits: limits))
        // Then it fails as too slow, after the bytes that came
        XCTAssertEqual(probe.outcome?.failure as? TransferLimitError, .tooSlow(MinimumSpeed(bytes: 1024, seconds: 1)))
        XCTAssertGreaterThan(probe.elements.count, 0)
    }

    func testAConsumerThatFallsBehindFailsTheStreamInsteadOfGrowingMemory() throws {
        try XCTSkipIf(isOnCurl(testSession), "libcurl pauses the transfer instead: StreamBackpressureTests")
        // Given a body of 64 MiB at 32 MB/s and a handler that takes 20 ms a chunk (paced, so that the cancel that
        // follows the failure meets the body in its middle, not as it ends: Foundation on Linux can crash then)
        let request = StreamOf(url: server.url("/trickle/67108864?chunk=65536&interval=2"), decoder: { DataChunkDecoder() }, ownBufferSize: 1024 * 1024)
        // When it is streamed with a 1 MiB buffer
        let (probe, _) = run(request, timeout: 60) { _, _ in Thread.sleep(forTimeInterval: 0.02) }
        // Then it fails with the buffer size, long before the body's end
        XCTAssertEqual(probe.outcome?.failure as? StreamError, .consumerTooSlow(bufferSize: 1024 * 1024))
        XCTAssertLessThan(probe.elements.count, 1000)
    }

    // MARK: - Cancellation

    func testACancellationFromAnotherThreadWhileChunksArriveCompletesOnceAndDeliversNothingAfter() {
        for round in 0..<20 {
            // Given an endless body
            let queue = OperationQueue()
            let probe = StreamProbe<Data>()
            let operation = queue.addRequest(
                Chunks(url: server.url("/hostile/endless?chunk=1024&interval=1")), session: testSession,
                receive: probe.receive, completion: probe.complete
            )
            // When another thread cancels it after a few chunks (after none, in the first rounds)
            let wanted = round % 4
            DispatchQueue.global().async {
                while probe.elements.count < wanted, !operation.isFinished { usleep(200) }
                operation.cancel()
            }
            waitUntil("round \(round) finishes") { operation.isFinished }
            // Then it completed once, cancelled, with nothing delivered after the completion
            XCTAssertEqual(probe.outcomes.count, 1)
            XCTAssertTrue(probe.outcome?.failure?.isRequestCancellation == true)
            XCTAssertEqual(probe.violations.values, [])
        }
    }

    func testACancellationBeforeTheFirstByteCompletesAtOnce() {
        let probe = StreamProbe<Data>()
        let operation = OperationQueue().addRequest(
            Chunks(url: server.url("/bytes/100?delay=5000")), session: testSession, receive: probe.receive, completion: probe.complete
        )
        Thread.sleep(forTimeInterval: 0.1)
        operation.cancel()
        waitUntil(timeout: 2, "the cancellation") { operation.isFinished }
        XCTAssertTrue(probe.outcome?.failure?.isRequestCancellation == true)
        XCTAssertEqual(probe.elements.count, 0)
    }

    // MARK: - AsyncThrowingStream

    func testAnAsyncLoopReadsEveryElement() async throws {
        let path = path("async")
        server.stream(path) { _ in .events((1...5).map { "data: \($0)" }, intervalMilliseconds: 5) }
        var data: [String] = []
        for try await event in OperationQueue().stream(for: EventFeed(url: server.url(path)), session: testSession) {
            data.append(event.data)
        }
        XCTAssertEqual(data, ["1", "2", "3", "4", "5"])
    }

    func testBreakingOutOfTheLoopCancelsTheOperation() async throws {
        // Given a stream that never ends, and a monitor
        let log = StreamEventLog()
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(monitors: [log])
        // When the loop breaks after two chunks
        var count = 0
        for try await _ in queue.stream(for: Chunks(url: server.url("/hostile/endless?chunk=100&interval=5")), session: testSession) {
            count += 1
            if count == 2 { break }
        }
        // Then the operation is cancelled and finishes
        let deadline = Date().addingTimeInterval(10)
        while queue.operationCount > 0, Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
        XCTAssertEqual(queue.operationCount, 0)
        XCTAssertEqual(log.lines.values.last, "finish error")
    }

    func testCancellingTheTaskEndsTheLoopWithTheCancellation() async throws {
        // Given a stream that sends one chunk and then nothing, read by a loop that says when it has the chunk
        let queue = UncheckedSendable(OperationQueue())
        let path = path("one-then-nothing")
        server.stream(path) { _ in LoopbackStream(pieces: [Data("first".utf8)], ending: .hang) }
        let request = Chunks(url: server.url(path))
        let signal = Box<AsyncStream<Void>.Continuation>()
        let received = AsyncStream<Void> { signal.value = $0 }
        let task = Task {
            for try await _ in queue.value.stream(for: request, session: testSession) {
                signal.value?.yield()
            }
        }
        for await _ in received { break }
        // When the Task is cancelled (the loop waits for the next element, or is about to)
        task.cancel()
        // Then the loop ends: with the cancellation if it was waiting, as it almost always is here, or without an error
        // if it had not called `next()` again yet (see `OperationQueue.stream(for:session:after:)`)
        do {
            try await task.value
        } catch {
            XCTAssertTrue(error.isRequestCancellation, "\(error)")
        }
        // And the operation is cancelled and finishes, so that the connection is let go
        let deadline = Date().addingTimeInterval(60)
        while queue.value.operationCount > 0, Date() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
        XCTAssertEqual(queue.value.operationCount, 0)
    }

    // MARK: - An operation among others

    func testDependentsRunAfterTheStreamsCompletion() {
        let queue = OperationQueue()
        let order = Recorder<String>()
        let path = path("dependents")
        server.stream(path) { _ in .events(["data: a", "data: b"], intervalMilliseconds: 20) }
        let stream = queue.addRequest(EventFeed(url: server.url(path)), session: testSession) {
            order.append($0.data)
        } completion: { _ in
            order.append("completion")
        }
        let after = BlockOperation { order.append("dependent") }
        after.addDependency(stream)
        queue.addOperation(after)
        waitUntil("the dependent ran") { after.isFinished }
        XCTAssertEqual(order.values, ["a", "b", "completion", "dependent"])
        XCTAssertTrue(queue.requestCurrentlyExecuting(EventFeed(url: server.url(path))) == nil)
    }

    func testTheQueuesAdaptersAndPreconditionsApplyToEachConnection() {
        // Given an event stream that drops once, and a queue whose adapter tags each request
        let path = path("adapted")
        let tags = Recorder<String>()
        server.stream(path) { request in
            tags.append((request.headers["x-tag"] ?? "-") + " " + (request.headers["accept"] ?? "-"))
            return request.headers["last-event-id"] == nil ? .events(["retry: 1", "id: 1\ndata: a"], ending: .reset) : .events(["id: 2\ndata: b"])
        }
        // And a precondition that records the stream's place it sees, and a monitor that records why it reconnects
        let placesChecked = Recorder<String>()
        final class Reasons: RequestEventMonitor, @unchecked Sendable {
            let seen = Recorder<ReattemptReason>()
            func requestWillAttemptAgain(_ attempt: RequestAttempt, reason: ReattemptReason, delay: TimeInterval) { seen.append(reason) }
        }
        let reasons = Reasons()
        let policies = RequestPolicies(
            adapters: [.setHeader("stream", for: "X-Tag"), .setHeader("text/event-stream; charset=utf-8", for: "Accept")],
            preconditions: [
                RequestPrecondition { request in
                    placesChecked.append(request.value(forHTTPHeaderField: "Last-Event-ID") ?? "-")
                    guard request.value(forHTTPHeaderField: "X-Tag") == "stream" else { throw RequestQueueError.misuse("untagged") }
                }
            ],
            monitors: [reasons]
        )
        // When it is read
        let (probe, _) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: .default), policies: policies)
        // Then both connections went through the adapter and the precondition
        XCTAssertEqual(probe.elements.values.map(\.data), ["a", "b"])
        // And the request's own Accept header was kept over the decoder's
        XCTAssertEqual(tags.values, ["stream text/event-stream; charset=utf-8", "stream text/event-stream; charset=utf-8"])
        // And the precondition saw the request as sent, with the stream's place on the reconnection
        XCTAssertEqual(placesChecked.values, ["-", "1"])
        // And monitors saw the second connection as a reconnection
        XCTAssertEqual(reasons.seen.values, [.reconnect])
    }

    func testALimitEndsAReconnectingStreamInsteadOfReconnecting() {
        // Given an event stream with more events than its body limit allows, and the default reconnection
        let path = path("limit-no-reconnect")
        server.stream(path) { _ in .events((1...200).map { "id: \($0)\ndata: event number \($0)" }) }
        var limits = TransferLimits.stream
        limits.maximumBodySize = 2000
        // When it is read
        let (probe, _) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: .default, ownLimits: limits))
        // Then the limit ends it: a limit is not a dropped connection
        XCTAssertEqual(probe.outcome?.failure as? TransferLimitError, .responseTooLarge(limit: 2000))
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testTheElementsBeforeABadLineInTheSameChunkAreDelivered() {
        let path = path("bad-line-same-chunk")
        server.stream(path) { _ in LoopbackStream(pieces: [Data("{\"n\":1}\n{\"n\":\"x\"}\n{\"n\":3}\n".utf8)]) }
        let (probe, _) = run(StreamOf(url: server.url(path)) { JSONLinesDecoder<Tick>() })
        XCTAssertEqual(probe.elements.values, [Tick(n: 1)])
        guard case let .invalidJSON(line, _)? = probe.outcome?.failure as? StreamError else { return XCTFail("\(String(describing: probe.outcome))") }
        XCTAssertEqual(line, 2)
    }

    func testAReconnectionAnsweredWithAnotherSuccessStatusFails() {
        let path = path("reconnect-201")
        server.stream(path) { request in
            request.headers["last-event-id"] == nil
                ? .events(["retry: 1", "id: 1\ndata: one"], ending: .reset)
                : LoopbackStream(status: 201, headers: ["Content-Type": "text/event-stream"], pieces: [Data("data: two\n\n".utf8)])
        }
        let (probe, _) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, policy: .default))
        XCTAssertEqual((probe.outcome?.failure as? RequestQueueError)?.statusCode, 201)
        XCTAssertEqual(probe.elements.values.map(\.data), ["one"])
    }

    func testTheHandlerIsReleasedWhenTheOperationFinishes() {
        let path = path("release")
        server.stream(path) { _ in .events(["data: a"]) }
        let queue = OperationQueue()
        let (operation, weakTracker) = { () -> (StreamRequestOperation<EventFeed>, Weak<Sentinel>) in
            let tracker = Sentinel()
            let operation = queue.addRequest(EventFeed(url: server.url(path)), session: testSession) { _ in
                _ = tracker
            } completion: { _ in
            }
            return (operation, Weak(tracker))
        }()
        waitUntil("the stream finishes") { operation.isFinished }
        waitUntil("the handler is released") { weakTracker.object == nil }
    }

    func testADeadlineAppliesOnlyWhenTheRequestAsks() {
        var limits = TransferLimits.stream
        limits.deadline = 0.3
        let path = path("deadline")
        server.stream(path) { _ in .events(["data: a"], ending: .hang) }
        let (probe, _) = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() }, ownLimits: limits))
        XCTAssertEqual(probe.elements.values.map(\.data), ["a"])
        XCTAssertEqual(probe.outcome?.failure as? TransferLimitError, .deadlineExceeded(0.3))
    }
}
