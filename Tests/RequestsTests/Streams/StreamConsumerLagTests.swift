#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// A consumer that does nothing never fails, however far the library's own work falls behind a fast loopback body
/// (`bufferSize` bounds only the consumer's lag; the library's is kept in memory, then in a private file); one that
/// really sleeps fails with `consumerTooSlow`; and no spill file is left behind.
final class StreamConsumerLagTests: XCTestCase {
    private let server = TestServer.shared
    /// Large enough that, before the fix, an empty consumer failed on it in most runs.
    private let chunkBodySize = 1 << 30
    /// Decoded bodies: decoding is slow in a debug build, so the library lags far behind from the first MiB; what lags
    /// beyond the buffer size (8 MiB) goes through the spill file, and must come back in order.
    private let decodedBodySize = 16 << 20
    private let smallBuffer = 1 << 20

    override func setUp() {
        super.setUp()
        XCTAssertEqual(spillFiles(), [], "spill files left by an earlier test")
    }

    override func tearDown() {
        // Every stream here has completed: none of its files may remain.
        XCTAssertEqual(spillFiles(), [])
        super.tearDown()
    }

    private func spillFiles() -> [String] {
        guard let folder = try? PrivateFolder.requestsFolder() else { return [] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { $0.hasSuffix(".spill") }
    }

    /// Checks that the chunks of `/bytes/N` come whole and in order (byte `i` is `i % 256`): their ends, cheaply.
    private final class ByteOrder: @unchecked Sendable {
        private let lock = NSLock()
        private var offset = 0
        private(set) var broken = false
        func take(_ chunk: Data) {
            lock.withLock {
                guard let first = chunk.first, let last = chunk.last else { return }
                if first != UInt8(truncatingIfNeeded: offset) || last != UInt8(truncatingIfNeeded: offset + chunk.count - 1) { broken = true }
                offset += chunk.count
            }
        }
        var bytes: Int { lock.withLock { offset } }
    }

    /// Counts numbered elements, and those that are not the next number.
    private final class Sequence: @unchecked Sendable {
        private let lock = NSLock()
        private var next = 0
        private var mismatches = 0
        func take(_ isNumbered: (Int) -> Bool) {
            lock.withLock {
                if !isNumbered(next) { mismatches += 1 }
                next += 1
            }
        }
        var count: Int { lock.withLock { next } }
        var wrong: Int { lock.withLock { mismatches } }
    }

    /// Runs `request` with a handler on a fresh queue, and returns its outcome. (The timeout only guards against a
    /// hang: 1 GiB takes 7 s under ThreadSanitizer here, several times that on a loaded machine.)
    private func run<R: StreamRequest>(_ request: R, timeout: TimeInterval = 600, receive: @escaping (R.Element) -> Void) -> Result<StreamSummary, Error>? {
        let outcome = Box<Result<StreamSummary, Error>>()
        let operation = OperationQueue().addRequest(request, session: testSession, receive: receive) { outcome.value = $0.mapError { $0 } }
        waitUntil(timeout: timeout, "the stream's outcome") { operation.isFinished }
        return outcome.value
    }

    // MARK: - An empty consumer never fails

    func testAnEmptyAsyncLoopOverAFastBodyNeverFails() async throws {
        let order = ByteOrder()
        let request = StreamOf(url: server.url("/bytes/\(chunkBodySize)"), decoder: { DataChunkDecoder() })
        for try await chunk in OperationQueue().stream(for: request, session: testSession) {
            order.take(chunk)
        }
        XCTAssertEqual(order.bytes, chunkBodySize)
        XCTAssertFalse(order.broken, "a chunk out of order")
    }

    func testAnEmptyHandlerOverAFastBodyNeverFails() throws {
        let order = ByteOrder()
        let outcome = run(StreamOf(url: server.url("/bytes/\(chunkBodySize)"), decoder: { DataChunkDecoder() }), receive: order.take)
        XCTAssertEqual(outcome?.success?.bytes, Int64(chunkBodySize), "\(String(describing: outcome))")
        XCTAssertEqual(order.bytes, chunkBodySize)
        XCTAssertFalse(order.broken, "a chunk out of order")
    }

    func testEmptyLineHandlersNeverFail() throws {
        let (path, lines) = serve("lines", line: { "line \($0) " + String(repeating: "x", count: 50) })
        let sequence = Sequence()
        let outcome = run(StreamOf(url: server.url(path), decoder: { LineDecoder() })) { line in
            sequence.take { line.hasPrefix("line \($0) ") }
        }
        XCTAssertNotNil(outcome?.success, "\(String(describing: outcome))")
        XCTAssertEqual(sequence.count, lines)
        XCTAssertEqual(sequence.wrong, 0, "lines out of order")
    }

    func testAnEmptyJSONLinesLoopNeverFails() async throws {
        struct Record: Decodable, Sendable { let n: Int; let text: String }
        let (path, lines) = serve("ndjson", line: { "{\"n\":\($0),\"text\":\"" + String(repeating: "y", count: 900) + "\"}" })
        var next = 0
        var wrong = 0
        let request = StreamOf(url: server.url(path), decoder: { JSONLinesDecoder<Record>() })
        for try await record in OperationQueue().stream(for: request, session: testSession) {
            if record.n != next { wrong += 1 }
            next += 1
        }
        XCTAssertEqual(next, lines)
        XCTAssertEqual(wrong, 0, "records out of order")
    }

    func testAnEmptyEventHandlerNeverFails() throws {
        let (path, events) = serve("events", contentType: "text/event-stream", line: { "id: \($0)\ndata: " + String(repeating: "z", count: 100) + "\n" })
        let sequence = Sequence()
        let outcome = run(StreamOf(url: server.url(path), decoder: { ServerSentEventDecoder() })) { event in
            sequence.take { event.id == "\($0)" }
        }
        XCTAssertNotNil(outcome?.success, "\(String(describing: outcome))")
        XCTAssertEqual(sequence.count, events)
        XCTAssertEqual(sequence.wrong, 0, "events out of order")
    }

    /// Serves about ``decodedBodySize`` bytes of numbered lines (`line(i)` and a line feed) in 64 KiB pieces, as fast
    /// as the server sends; returns the path and the number of lines.
    private func serve(_ name: String, contentType: String = "application/x-ndjson", line: (Int) -> String) -> (String, Int) {
        var pieces: [Data] = []
        var piece = Data()
        var count = 0
        var size = 0
        while size < decodedBodySize {
            let text = Data((line(count) + "\n").utf8)
            count += 1
            size += text.count
            piece.append(text)
            if piece.count >= 64 * 1024 {
                pieces.append(piece)
                piece = Data()
            }
        }
        pieces.append(piece)
        let path = "/lag/\(name)/\(UUID().uuidString)"
        let all = pieces
        server.stream(path) { _ in LoopbackStream(headers: ["Content-Type": contentType], pieces: all) }
        return (path, count)
    }

    // MARK: - A consumer that sleeps still fails

    func testAHandlerThatSleepsFailsAsTooSlow() throws {
        try XCTSkipIf(isOnCurl(testSession), "libcurl pauses the transfer instead: StreamBackpressureTests")
        let request = StreamOf(url: server.url("/bytes/\(chunkBodySize)"), decoder: { DataChunkDecoder() })
        let received = Box<Int>()
        let outcome = run(request) { _ in
            received.value = (received.value ?? 0) + 1
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertEqual(outcome?.failure as? StreamError, .consumerTooSlow(bufferSize: 8 << 20), "\(String(describing: outcome))")
        XCTAssertLessThan(received.value ?? 0, 1000)
    }

    func testAnAsyncLoopThatSleepsFailsAsTooSlow() async throws {
        try XCTSkipIf(isOnCurl(testSession), "libcurl pauses the transfer instead: StreamBackpressureTests")
        // (A 1 MiB buffer: the elements offered before the failure, half of it, are read first, 50 ms each.)
        let request = StreamOf(url: server.url("/bytes/\(chunkBodySize)"), decoder: { DataChunkDecoder() }, ownBufferSize: smallBuffer)
        var received = 0
        do {
            for try await _ in OperationQueue().stream(for: request, session: testSession) {
                received += 1
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            XCTFail("the stream ended after \(received) chunks")
        } catch {
            XCTAssertEqual(error as? StreamError, .consumerTooSlow(bufferSize: smallBuffer), "\(error)")
        }
        XCTAssertLessThan(received, 1000)
    }
}
