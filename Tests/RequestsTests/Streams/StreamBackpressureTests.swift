#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// On a transport that can pause (libcurl, `REQUESTS_TRANSPORT=curl` on Linux), a consumer that falls behind pauses
/// the transfer instead of failing the stream (`consumerTooSlow`, as on URLSession): what the library holds stays
/// within the inbox's memory limit and the buffer size, and a pause is not a timeout.
final class StreamBackpressureTests: XCTestCase {
    private let server = TestServer.shared
    private let bufferSize = 1 << 20
    /// `StreamState.memoryLimit` for that buffer size: what the inbox holds at most, besides one piece.
    private let memoryLimit = 1 << 20

    override func setUpWithError() throws {
        try super.setUpWithError()
        try XCTSkipUnless(isOnCurl(testSession), "URLSession cannot pause a transfer: a lagging consumer fails the stream there")
    }

    /// Counts what the handler was given.
    private final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var counts = (elements: 0, bytes: 0)
        func take(_ chunk: Data) -> (elements: Int, bytes: Int) {
            lock.withLock {
                counts = (counts.elements + 1, counts.bytes + chunk.count)
                return counts
            }
        }
    }

    func testASlowHandlerPausesTheTransferAndTheLibraryHoldsNoMoreThanItsLimits() throws {
        // Given a fast 1 GiB body and a handler that takes 10 ms a chunk (about 1.6 MB/s)
        let request = StreamOf(url: server.url("/bytes/\(1 << 30)"), decoder: { DataChunkDecoder() }, ownBufferSize: bufferSize)
        let tally = Tally()
        let held = Box<(received: Int64, delivered: Int)>()
        let outcome = Box<Result<StreamSummary, Error>>()
        let box = Box<StreamRequestOperation<StreamOf<DataChunkDecoder>>>()
        let operation = OperationQueue().addRequest(request, session: testSession) { chunk in
            let (elements, delivered) = tally.take(chunk)
            Thread.sleep(forTimeInterval: 0.01)
            // When 60 chunks have been handled, what the library received so far is read, and the stream cancelled
            guard elements == 60, let operation = box.value else { return }
            held.value = (operation.withLock { operation.stream.bytes }, delivered)
            operation.cancel()
        } completion: {
            outcome.value = $0.mapError { $0 }
        }
        box.value = operation
        waitUntil(timeout: 120, "the stream's outcome") { operation.isFinished }
        // Then the stream did not fail as too slow: it was paused, and ends with the cancel
        XCTAssertNil(outcome.value?.success)
        XCTAssertNotEqual(outcome.value?.failure as? StreamError, .consumerTooSlow(bufferSize: bufferSize))
        // And the library held at most its inbox's limit beyond what the handler was given (without the pause, the
        // body arrives at loopback speed: hundreds of MiB in those 60 chunks)
        let (received, delivered) = try XCTUnwrap(held.value)
        XCTAssertLessThanOrEqual(received - Int64(delivered), Int64(memoryLimit + bufferSize + (64 << 10)), "received \(received), handled \(delivered)")
    }

    func testASlowAsyncLoopIsPausedNotFailed() async throws {
        // Given a fast 1 GiB body read by a loop that sleeps 5 ms an element, with a 1 MiB buffer
        let request = StreamOf(url: server.url("/bytes/\(1 << 30)"), decoder: { DataChunkDecoder() }, ownBufferSize: bufferSize)
        var received = 0
        // When it reads 150 elements (about 2.4 MiB, more than the buffer) and stops
        for try await _ in OperationQueue().stream(for: request, session: testSession) {
            received += 1
            if received == 150 { break }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        // Then no `consumerTooSlow` was thrown on the way (the loop would have ended with it)
        XCTAssertEqual(received, 150)
    }

    func testAPauseLongerThanTheRequestTimeoutIsNoTimeout() throws {
        // Given a 4 MiB body, a request timeout of 1 s, and a handler whose first chunk takes 2.5 s
        let size = 4 << 20
        let request = StreamOf(url: server.url("/bytes/\(size)"), decoder: { DataChunkDecoder() }, ownBufferSize: bufferSize, timeout: 1)
        let tally = Tally()
        let outcome = Box<Result<StreamSummary, Error>>()
        let operation = OperationQueue().addRequest(request, session: testSession) { chunk in
            if tally.take(chunk).elements == 1 { Thread.sleep(forTimeInterval: 2.5) }
        } completion: {
            outcome.value = $0.mapError { $0 }
        }
        waitUntil(timeout: 120, "the stream's outcome") { operation.isFinished }
        // Then the transfer waited paused (the rest of the body cannot fit in the library's limits meanwhile) and
        // the whole body arrived: the wait was the consumer's, not the server's
        XCTAssertEqual(outcome.value?.success?.bytes, Int64(size), "\(String(describing: outcome.value))")
    }
}
