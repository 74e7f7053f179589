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
        let reached = expectation(for: NSPredicate { [server] _, _ in
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
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let noSignal = Int32(MSG_NOSIGNAL)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        let noSignal: Int32 = 0
        #endif
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
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
        server.script("/flaky", [
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
}
