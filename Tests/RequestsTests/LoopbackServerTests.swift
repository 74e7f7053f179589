import Foundation
import RequestsTestServer
import XCTest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Exercises `LoopbackServer` for real, over a socket, with `URLSession`.
final class LoopbackServerTests: XCTestCase {
    private var server: LoopbackServer!
    private var session: URLSession!

    override func setUpWithError() throws {
        try super.setUpWithError()
        server = try LoopbackServer()
        session = URLSession(configuration: .ephemeral)
    }

    override func tearDown() {
        session.invalidateAndCancel()
        server.stop()
        session = nil
        server = nil
        super.tearDown()
    }

    // MARK: - Helpers

    /// The outcome of one data task.
    private struct Outcome: Sendable {
        var data: Data?
        var response: HTTPURLResponse?
        var error: URLError?
        var otherError: String?
    }

    /// Holds values written from URLSession's queue and read by the test, behind a lock.
    private final class Box<Value: Sendable>: @unchecked Sendable {
        private let lock = NSLock()
        private var storage: Value
        init(_ value: Value) { storage = value }
        var value: Value {
            lock.lock()
            defer { lock.unlock() }
            return storage
        }
        func update(_ change: (inout Value) -> Void) {
            lock.lock()
            defer { lock.unlock() }
            change(&storage)
        }
    }

    /// Starts a data task and returns a box that holds its outcome once `expectation` is fulfilled.
    private func start(_ request: URLRequest, fulfilling expectation: XCTestExpectation) -> Box<Outcome?> {
        let box = Box<Outcome?>(nil)
        session.dataTask(with: request) { data, response, error in
            let outcome = Outcome(
                data: data,
                response: response as? HTTPURLResponse,
                error: error as? URLError,
                otherError: error.map { "\($0)" }
            )
            box.update { $0 = outcome }
            expectation.fulfill()
        }.resume()
        return box
    }

    /// Runs one request to completion.
    private func fetch(_ request: URLRequest, file: StaticString = #filePath, line: UInt = #line) throws -> Outcome {
        let done = expectation(description: "\(request.httpMethod ?? "GET") \(request.url?.absoluteString ?? "")")
        let box = start(request, fulfilling: done)
        wait(for: [done], timeout: 30)
        return try XCTUnwrap(box.value, "the task did not finish", file: file, line: line)
    }

    private func fetch(_ path: String) throws -> Outcome {
        try fetch(URLRequest(url: server.url(path)))
    }

    private func jsonObject(_ data: Data?) throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: try XCTUnwrap(data))
        return try XCTUnwrap(object as? [String: Any])
    }

    // MARK: - Tests

    func testJSONRouteAndKeepAlive() throws {
        // Given a fresh server
        // When two requests for /json are made one after the other
        let first = try fetch("/json")
        let second = try fetch("json")

        // Then both succeed with the recipe, over one reused connection
        for outcome in [first, second] {
            XCTAssertNil(outcome.otherError)
            XCTAssertEqual(outcome.response?.statusCode, 200)
            XCTAssertEqual(outcome.response?.value(forHTTPHeaderField: "Content-Type"), "application/json; charset=utf-8")
            let json = try jsonObject(outcome.data)
            XCTAssertEqual(json["name"] as? String, "Pancakes")
            XCTAssertEqual(json["ingredients"] as? [String], ["flour", "milk", "eggs"])
            XCTAssertEqual(json["steps"] as? [String], ["mix", "fry"])
        }
        XCTAssertEqual(server.acceptedConnectionCount, 1)
        XCTAssertEqual(server.requestCount(path: "/json"), 2)
    }

    func testStatusRoute() throws {
        // Given a fresh server
        // When /status/404 and /status/204 are requested
        let notFound = try fetch("/status/404")
        let noContent = try fetch("/status/204")
        let invalid = try fetch("/status/abc")

        // Then the status codes are passed through, with a JSON body only where one is allowed
        XCTAssertNil(notFound.otherError)
        XCTAssertEqual(notFound.response?.statusCode, 404)
        let json = try jsonObject(notFound.data)
        XCTAssertEqual(json["status"] as? Int, 404)
        XCTAssertEqual(json["error"] as? String, "Not Found")

        XCTAssertNil(noContent.otherError)
        XCTAssertEqual(noContent.response?.statusCode, 204)
        XCTAssertEqual(noContent.data?.count ?? 0, 0)

        XCTAssertEqual(invalid.response?.statusCode, 400)
    }

    func testEchoWithContentLengthAndChunkedBodies() throws {
        // Given a 100 KiB body of printable text
        let text = String(repeating: "0123456789abcdef", count: 100 * 1024 / 16)
        let body = Data(text.utf8)
        var request = URLRequest(url: server.url("/echo?greeting=hello%20world&n=1"))
        request.httpMethod = "POST"
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        request.httpBody = body

        // When it is POSTed with a Content-Length
        let plain = try fetch(request)

        // Then the echo reports the method, the length, the decoded query and the headers
        XCTAssertNil(plain.otherError)
        XCTAssertEqual(plain.response?.statusCode, 200)
        let echoed = try jsonObject(plain.data)
        XCTAssertEqual(echoed["method"] as? String, "POST")
        XCTAssertEqual(echoed["path"] as? String, "/echo")
        XCTAssertEqual(echoed["bodyLength"] as? Int, body.count)
        XCTAssertEqual(echoed["body"] as? String, text)
        XCTAssertEqual((echoed["query"] as? [String: String])?["greeting"], "hello world")
        XCTAssertEqual((echoed["headers"] as? [String: String])?["content-length"], "\(body.count)")

        // When the same bytes are sent as a body stream (which URLSession sends chunked)
        var streamed = URLRequest(url: server.url("/echo"))
        streamed.httpMethod = "POST"
        streamed.httpBodyStream = InputStream(data: body)
        let chunked = try fetch(streamed)

        // Then the echo has the same bytes
        XCTAssertNil(chunked.otherError)
        XCTAssertEqual(chunked.response?.statusCode, 200)
        let echoedStream = try jsonObject(chunked.data)
        XCTAssertEqual(echoedStream["bodyLength"] as? Int, body.count)
        XCTAssertEqual(echoedStream["body"] as? String, text)
    }

    func testBytesRouteStreamsExactBytes() throws {
        // Given a fresh server
        // When a million bytes are requested
        let outcome = try fetch("/bytes/1000000")

        // Then exactly those bytes arrive
        XCTAssertNil(outcome.otherError)
        XCTAssertEqual(outcome.response?.statusCode, 200)
        let data = try XCTUnwrap(outcome.data)
        XCTAssertEqual(data.count, 1_000_000)
        let expected = Data((0..<1_000_000).map { UInt8(truncatingIfNeeded: $0) })
        XCTAssertTrue(data == expected, "the bytes differ from i % 256")
    }

    func testAStreamAlwaysSaysItsContentType() throws {
        // Given a stream route that names no Content-Type, and one that names its own
        server.stream("/typed/none") { _ in LoopbackStream(pieces: [Data("a".utf8)]) }
        server.stream("/typed/events") { _ in .events(["data: a"]) }

        // When each is requested
        let plain = try fetch("/typed/none")
        let events = try fetch("/typed/events")

        // Then each says what it is (Apple's data tasks hold back small bodies whose type they must guess)
        XCTAssertEqual(plain.response?.value(forHTTPHeaderField: "Content-Type"), "application/octet-stream")
        XCTAssertEqual(events.response?.value(forHTTPHeaderField: "Content-Type"), "text/event-stream")
        XCTAssertEqual(plain.data, Data("a".utf8))
    }

    func testTrickleSendsTheSameBytesInSmallChunksWithTheFullLength() throws {
        let outcome = try fetch("/trickle/10000?chunk=777&interval=5")
        XCTAssertNil(outcome.otherError)
        XCTAssertEqual(outcome.response?.value(forHTTPHeaderField: "Content-Length"), "10000")
        XCTAssertTrue(outcome.data == Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0) }), "the bytes differ from i % 256")
    }

    func testSinkCountsAndChecksumsBodiesWithoutKeepingThem() throws {
        // Given 3 MB of random bytes, above what the server would hold for any other route
        var generator = SystemRandomNumberGenerator()
        let body = Data((0..<3_000_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        for chunked in [false, true] {
            var request = URLRequest(url: server.url("/sink/upload"))
            request.httpMethod = "POST"
            if chunked { request.httpBodyStream = InputStream(data: body) } else { request.httpBody = body }
            // When it is sent with a Content-Length, then chunked
            let answer = try jsonObject(try fetch(request).data)
            // Then the sink reports its size and CRC-32
            XCTAssertEqual(answer["bytes"] as? Int, body.count)
            XCTAssertEqual((answer["crc32"] as? String).flatMap { UInt32($0, radix: 16) }, BodyDigest(body).crc32)
        }
        // And the CRC-32 is the standard one
        XCTAssertEqual(BodyDigest(Data("123456789".utf8)).crc32, 0xCBF4_3926)
    }

    func testCloseMidBodyFails() throws {
        // Given a route that closes the connection halfway through the body
        // When it is requested
        let outcome = try fetch("/fault/close-mid-body")

        // Then the task fails instead of delivering a truncated success
        XCTAssertNotNil(outcome.otherError, "a truncated body must be an error")
        XCTAssertEqual(server.requestCount(path: "/fault/close-mid-body"), 1)
    }

    func testNeverRespondTimesOut() throws {
        // Given a request with a one-second timeout (Linux rounds timeouts down to whole seconds)
        var request = URLRequest(url: server.url("/fault/never-respond"))
        request.timeoutInterval = 1

        // When the server never answers
        let outcome = try fetch(request)

        // Then the task fails with a timeout
        XCTAssertEqual(outcome.error?.code, .timedOut, "got \(outcome.otherError ?? "no error")")
    }

    func testCustomRouteCountsAndConcurrentDelays() throws {
        // Given a custom route that shadows a built-in one
        server.route("/json") { request in
            .text("custom \(request.method) \(request.query["x"] ?? "")", status: 201)
        }

        // When it is requested
        let custom = try fetch("/json?x=42")

        // Then the handler answers, and the request is counted by path without the query
        XCTAssertEqual(custom.response?.statusCode, 201)
        XCTAssertEqual(custom.data.map { String(decoding: $0, as: UTF8.self) }, "custom GET 42")
        XCTAssertEqual(server.requestCount(path: "/json"), 1)

        // When 64 requests for /delay/20 run at once
        let count = 64
        let allDone = expectation(description: "64 delayed requests")
        allDone.expectedFulfillmentCount = count
        let boxes = (0..<count).map { _ in start(URLRequest(url: server.url("/delay/20")), fulfilling: allDone) }
        wait(for: [allDone], timeout: 60)

        // Then all of them succeed
        for box in boxes {
            let outcome = try XCTUnwrap(box.value)
            XCTAssertNil(outcome.otherError)
            XCTAssertEqual(outcome.response?.statusCode, 200)
            XCTAssertEqual(try jsonObject(outcome.data)["delayMs"] as? Int, 20)
        }
        XCTAssertEqual(server.requestCount(path: "/delay/20"), count)
        XCTAssertEqual(server.totalRequestCount, count + 1)
    }

    func testStopReturnsWhileARequestIsOutstanding() throws {
        // Given a request the server never answers, and that has reached the server
        let failed = expectation(description: "the outstanding request ends")
        let box = start(URLRequest(url: server.url("/fault/never-respond")), fulfilling: failed)
        let reached = expectation(
            for: NSPredicate { [server] _, _ in
                server?.requestCount(path: "/fault/never-respond") == 1
            }, evaluatedWith: NSNull())
        wait(for: [reached], timeout: 10)

        // When the server is stopped (on another thread, so a hang cannot block the test forever)
        let stopped = expectation(description: "stop() returned")
        let server = self.server!
        Thread.detachNewThread {
            server.stop()
            server.stop()  // idempotent
            stopped.fulfill()
        }

        // Then stop() returns and the client gets an error
        wait(for: [stopped, failed], timeout: 10)
        XCTAssertNotNil(box.value?.otherError, "the client must see an error, not a response")
        XCTAssertNil(box.value?.response)
    }

    func testMalformedRequestGets400AndClose() throws {
        // Given a raw connection to the server
        // When it sends a request line that is not HTTP
        let reply = try rawExchange("NOT A VALID REQUEST\r\n\r\n")

        // Then the server answers 400 and closes the connection (the read reached end of stream)
        XCTAssertTrue(reply.hasPrefix("HTTP/1.1 400 Bad Request\r\n"), reply)
        XCTAssertTrue(reply.contains("Connection: close\r\n"), reply)

        // And the server keeps serving
        XCTAssertEqual(try fetch("/json").response?.statusCode, 200)
    }

    /// Sends `text` on a new socket and returns everything received until the server closes (at most 10 s).
    private func rawExchange(_ text: String) throws -> String {
        // A write to a socket the server has closed must fail with EPIPE, not end the test process with SIGPIPE: Linux
        // takes MSG_NOSIGNAL on each send, Apple platforms SO_NOSIGPIPE on the socket (they have no MSG_NOSIGNAL).
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let noSignal = Int32(MSG_NOSIGNAL)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        let noSignal: Int32 = 0
        #endif
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        #if canImport(Darwin)
        var on: Int32 = 1
        XCTAssertEqual(setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size)), 0, "SO_NOSIGPIPE, errno \(errno)")
        #endif
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = server.port.bigEndian
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        XCTAssertEqual(connected, 0, "connect failed with errno \(errno)")
        let request = Array(text.utf8)
        let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, noSignal) }
        XCTAssertEqual(sent, request.count)

        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return String(decoding: received, as: UTF8.self) }
            received += chunk[0..<count]
        }
        XCTFail("the server did not close the connection")
        return String(decoding: received, as: UTF8.self)
    }

    func testScriptedResponsesComeInTurnAndTheLastRepeats() {
        // Given a script: 503 with Retry-After, then 200
        let server = try! LoopbackServer()
        defer { server.stop() }
        server.script(
            "/flaky",
            [
                LoopbackResponse(status: 503, headers: ["Retry-After": "1"], body: Data("busy".utf8)),
                .text("ok"),
            ])
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        // When it is requested three times
        let statuses = Recorder<Int>()
        let retryAfter = Box<String?>(nil)
        for _ in 0..<3 {
            let done = expectation(description: "response")
            session.dataTask(with: server.url("/flaky")) { _, response, _ in
                let http = response as? HTTPURLResponse
                statuses.append(http?.statusCode ?? -1)
                if http?.statusCode == 503 { retryAfter.update { $0 = http?.value(forHTTPHeaderField: "Retry-After") } }
                done.fulfill()
            }.resume()
            wait(for: [done], timeout: 10)
        }
        // Then the responses came in turn, the last repeated, and every attempt was counted
        XCTAssertEqual(statuses.values, [503, 200, 200])
        XCTAssertEqual(retryAfter.value, "1")
        XCTAssertEqual(server.requestCount(path: "/flaky"), 3)
    }

    // MARK: - Ranged resources

    /// A request for a ranged resource, never answered from a cache and without compression.
    private func rangedRequest(_ path: String, range: String? = nil, ifRange: String? = nil, method: String = "GET") -> URLRequest {
        var request = URLRequest(url: server.url(path))
        request.httpMethod = method
        request.cachePolicy = .reloadIgnoringLocalCacheData
        request.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        if let range { request.setValue(range, forHTTPHeaderField: "Range") }
        if let ifRange { request.setValue(ifRange, forHTTPHeaderField: "If-Range") }
        return request
    }

    private func header(_ name: String, _ outcome: Outcome) -> String? {
        outcome.response?.value(forHTTPHeaderField: name)
    }

    func testRangedResourceContentIsTheShiftedPattern() {
        let content = LoopbackResource.content(length: 70_000, version: 7)
        XCTAssertEqual(content.count, 70_000)
        XCTAssertTrue(content.enumerated().allSatisfy { $0.element == UInt8(($0.offset + 7) % 251) }, "byte i is (i + 7) % 251")
        XCTAssertEqual(LoopbackResource.byte(at: 65_600, version: 7), UInt8((65_600 + 7) % 251))
        XCTAssertEqual(LoopbackResource.byte(at: 0, version: -1), 250)
        XCTAssertEqual(LoopbackResource.content(length: 0).count, 0)
    }

    func testRangedResourceServesTheWholeRepresentationWithOnlyItsValidator() throws {
        // Given a resource of 100,000 bytes with the default strong ETag
        server.resource("/file") { _ in LoopbackResource(length: 100_000) }

        // When it is fetched without a Range
        let outcome = try fetch(rangedRequest("/file"))

        // Then the whole content arrives with an ETag, Accept-Ranges and no Last-Modified
        XCTAssertNil(outcome.otherError)
        XCTAssertEqual(outcome.response?.statusCode, 200)
        XCTAssertEqual(header("ETag", outcome), #""v0-100000""#)
        XCTAssertEqual(header("Accept-Ranges", outcome), "bytes")
        XCTAssertEqual(header("Content-Type", outcome), "application/octet-stream")
        XCTAssertEqual(header("Content-Length", outcome), "100000")
        XCTAssertNil(header("Last-Modified", outcome))
        XCTAssertNil(header("Content-Range", outcome))
        XCTAssertTrue(outcome.data == LoopbackResource.content(length: 100_000), "the bytes differ from the version 0 content")
        XCTAssertEqual(server.bodyBytesSent(path: "/file"), 100_000)
    }

    func testRangeWithMatchingIfRangeGets206WithTheSlice() throws {
        // Given a resource of 10,000 bytes
        server.resource("/file") { _ in LoopbackResource(length: 10_000) }
        let content = LoopbackResource.content(length: 10_000)

        // When an open range is asked for with a matching If-Range
        let open = try fetch(rangedRequest("/file", range: "bytes=100-", ifRange: #""v0-10000""#))

        // Then 206 brings bytes 100 to the end
        XCTAssertNil(open.otherError)
        XCTAssertEqual(open.response?.statusCode, 206)
        XCTAssertEqual(header("Content-Range", open), "bytes 100-9999/10000")
        XCTAssertEqual(header("Content-Length", open), "9900")
        XCTAssertTrue(open.data == content.subdata(in: 100..<10_000), "the slice differs from bytes 100…")

        // When closed ranges are asked for without If-Range, one of them past the end
        let closed = try fetch(rangedRequest("/file", range: "bytes=100-199"))
        let pastEnd = try fetch(rangedRequest("/file", range: "bytes=9990-20000"))

        // Then each gets its slice, the last one clamped to the end
        XCTAssertEqual(closed.response?.statusCode, 206)
        XCTAssertEqual(header("Content-Range", closed), "bytes 100-199/10000")
        XCTAssertTrue(closed.data == content.subdata(in: 100..<200))
        XCTAssertEqual(pastEnd.response?.statusCode, 206)
        XCTAssertEqual(header("Content-Range", pastEnd), "bytes 9990-9999/10000")
        XCTAssertTrue(pastEnd.data == content.subdata(in: 9990..<10_000))

        // And only the slices were sent, over one kept-alive connection
        XCTAssertEqual(server.bodyBytesSent(path: "/file"), 9900 + 100 + 10)
        XCTAssertEqual(server.acceptedConnectionCount, 1)
    }

    func testIfRangeForAnOlderVersionGetsTheWholeNewRepresentation() throws {
        // Given a resource whose version the test changes between requests
        let version = Box(0)
        server.resource("/file") { _ in LoopbackResource(length: 10_000, version: version.value) }
        let first = try fetch(rangedRequest("/file"))
        let etag = try XCTUnwrap(header("ETag", first))
        XCTAssertEqual(etag, #""v0-10000""#)

        // When it changes and the client resumes with the old ETag
        version.update { $0 = 1 }
        let resumed = try fetch(rangedRequest("/file", range: "bytes=5000-", ifRange: etag))

        // Then it gets the whole new version instead of a slice
        XCTAssertNil(resumed.otherError)
        XCTAssertEqual(resumed.response?.statusCode, 200)
        XCTAssertEqual(header("ETag", resumed), #""v1-10000""#)
        XCTAssertNil(header("Content-Range", resumed))
        XCTAssertTrue(resumed.data == LoopbackResource.content(length: 10_000, version: 1), "the bytes differ from version 1")
    }

    func testWeakETagNeverSatisfiesIfRange() throws {
        // Given a resource with a weak ETag
        server.resource("/file") { _ in LoopbackResource(length: 10_000, validator: .weakETag) }
        let full = try fetch(rangedRequest("/file"))
        XCTAssertEqual(header("ETag", full), #"W/"v0-10000""#)
        XCTAssertNil(header("Last-Modified", full))

        // When a range is asked for with that weak ETag in If-Range, then without If-Range
        let withWeak = try fetch(rangedRequest("/file", range: "bytes=100-", ifRange: #"W/"v0-10000""#))
        let withoutIfRange = try fetch(rangedRequest("/file", range: "bytes=100-"))

        // Then the weak validator gets the whole representation, and the plain range its slice
        XCTAssertEqual(withWeak.response?.statusCode, 200)
        XCTAssertEqual(withWeak.data?.count, 10_000)
        XCTAssertEqual(withoutIfRange.response?.statusCode, 206)
        XCTAssertEqual(withoutIfRange.data?.count, 9900)
    }

    func testLastModifiedIfRange() throws {
        // Given built-in resources validated by a date, version 0 and version 57
        let first = try fetch(rangedRequest("/ranged/1000?validator=date"))
        let later = try fetch(rangedRequest("/ranged/1000?validator=date&v=57"))

        // Then the dates are IMF-fixdates that differ by the version in days, with no ETag
        XCTAssertEqual(header("Last-Modified", first), "Sun, 06 Nov 1994 08:49:37 GMT")
        XCTAssertEqual(header("Last-Modified", later), "Mon, 02 Jan 1995 08:49:37 GMT")
        XCTAssertNil(header("ETag", first))
        XCTAssertTrue(later.data == LoopbackResource.content(length: 1000, version: 57))

        // When a range is asked for with the same date, then with the other version's date
        let matching = try fetch(rangedRequest("/ranged/1000?validator=date&v=57", range: "bytes=10-", ifRange: "Mon, 02 Jan 1995 08:49:37 GMT"))
        let stale = try fetch(rangedRequest("/ranged/1000?validator=date&v=57", range: "bytes=10-", ifRange: "Sun, 06 Nov 1994 08:49:37 GMT"))

        // Then the same date gets the slice and the other the whole representation
        XCTAssertEqual(matching.response?.statusCode, 206)
        XCTAssertTrue(matching.data == LoopbackResource.content(length: 1000, version: 57).subdata(in: 10..<1000))
        XCTAssertEqual(stale.response?.statusCode, 200)
        XCTAssertEqual(stale.data?.count, 1000)
    }

    func testRangeFaultsAndUnsatisfiableRanges() throws {
        let content = LoopbackResource.content(length: 10_000)

        // A server that ignores ranges answers 200 with everything
        let ignored = try fetch(rangedRequest("/ranged/10000?range=ignore", range: "bytes=100-", ifRange: #""v0-10000""#))
        XCTAssertEqual(ignored.response?.statusCode, 200)
        XCTAssertNil(header("Content-Range", ignored))
        XCTAssertTrue(ignored.data == content)

        // A lying server starts 100 bytes later than asked, and says so in Content-Range
        let wrong = try fetch(rangedRequest("/ranged/10000?range=wrong", range: "bytes=100-"))
        XCTAssertEqual(wrong.response?.statusCode, 206)
        XCTAssertEqual(header("Content-Range", wrong), "bytes 200-9999/10000")
        XCTAssertTrue(wrong.data == content.subdata(in: 200..<10_000))
        let wrongNearEnd = try fetch(rangedRequest("/ranged/10000?range=wrong", range: "bytes=9950-"))
        XCTAssertEqual(header("Content-Range", wrongNearEnd), "bytes 9999-9999/10000")
        XCTAssertEqual(wrongNearEnd.data?.count, 1)

        // A start at or past the end, and a server that refuses every range, answer 416 without a body
        let pastEnd = try fetch(rangedRequest("/ranged/10000", range: "bytes=10000-"))
        let refused = try fetch(rangedRequest("/ranged/10000?range=416", range: "bytes=0-"))
        for outcome in [pastEnd, refused] {
            XCTAssertNil(outcome.otherError)
            XCTAssertEqual(outcome.response?.statusCode, 416)
            XCTAssertEqual(header("Content-Range", outcome), "bytes */10000")
            XCTAssertEqual(outcome.data?.count ?? 0, 0)
        }

        // Ranges it does not parse (suffix, several, another unit, reversed) are ignored
        for range in ["bytes=-500", "bytes=0-1,5-6", "items=0-5", "bytes=20-10"] {
            let outcome = try fetch(rangedRequest("/ranged/10000", range: range))
            XCTAssertEqual(outcome.response?.statusCode, 200, range)
            XCTAssertEqual(outcome.data?.count, 10_000, range)
        }

        // Invalid options are a bad request
        XCTAssertEqual(try fetch("/ranged/100?validator=bogus").response?.statusCode, 400)
        XCTAssertEqual(try fetch("/ranged/100?chunk=0").response?.statusCode, 400)
        XCTAssertEqual(try fetch("/ranged/abc").response?.statusCode, 400)
    }

    func testCutAfterClosesMidBodyAndTheResumeCompletes() throws {
        // Given a resource of 200,000 bytes that is cut at offset 50,000
        server.resource("/file") { _ in LoopbackResource(length: 200_000, cutAfter: 50_000) }

        // When it is fetched whole
        let cut = try fetch(rangedRequest("/file"))

        // Then the client sees a failed transfer, and the server wrote the bytes before the cut
        XCTAssertNotNil(cut.error, "a cut body must be a URLError, got \(cut.otherError ?? "no error")")
        XCTAssertEqual(server.bodyBytesSent(path: "/file"), 50_000)

        // When the client resumes at the cut, and asks for a range that ends before it
        let resumed = try fetch(rangedRequest("/file", range: "bytes=50000-", ifRange: #""v0-200000""#))
        let before = try fetch(rangedRequest("/file", range: "bytes=0-999"))

        // Then neither is cut: together with the first attempt, the whole content arrived once
        XCTAssertNil(resumed.otherError)
        XCTAssertEqual(resumed.response?.statusCode, 206)
        XCTAssertEqual(header("Content-Range", resumed), "bytes 50000-199999/200000")
        XCTAssertTrue(resumed.data == LoopbackResource.content(length: 200_000).subdata(in: 50_000..<200_000))
        XCTAssertEqual(before.response?.statusCode, 206)
        XCTAssertEqual(before.data?.count, 1000)
        XCTAssertEqual(server.bodyBytesSent(path: "/file"), 200_000 + 1000)
    }

    func testCutWithResetAndPacedChunks() throws {
        // Given the built-in route cut at 1,000 bytes with a reset
        let reset = try fetch(rangedRequest("/ranged/200000?cut=1000&reset=1&chunk=300"))

        // Then the client sees a failed transfer after the server wrote 1,000 bytes
        XCTAssertNotNil(reset.error, "a reset must be a URLError, got \(reset.otherError ?? "no error")")
        XCTAssertEqual(server.bodyBytesSent(path: "/ranged/200000"), 1000)

        // When a resource is sent 1,000 bytes every 100 ms
        let started = Date()
        let paced = try fetch(rangedRequest("/ranged/3000?chunk=1000&interval=100"))

        // Then it takes two pauses and arrives whole
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.19)
        XCTAssertTrue(paced.data == LoopbackResource.content(length: 3000))

        // And HEAD gets the headers a range would get, without a body
        let head = try fetch(rangedRequest("/ranged/5000", range: "bytes=1000-", method: "HEAD"))
        XCTAssertEqual(head.response?.statusCode, 206)
        XCTAssertEqual(header("Content-Length", head), "4000")
        XCTAssertEqual(header("Content-Range", head), "bytes 1000-4999/5000")
        XCTAssertEqual(head.data?.count ?? 0, 0)
        XCTAssertEqual(server.bodyBytesSent(path: "/ranged/5000"), 0)
    }
}
