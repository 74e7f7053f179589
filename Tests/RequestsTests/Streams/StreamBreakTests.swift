#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Ending a stream early closes its connection, whichever way it ends: a `break` out of the loop, a cancelled Task, a
/// cancelled operation, a limit. The loopback server sends an endless body, 64 KiB a millisecond, and reports when it
/// sees the connection close; each test waits for that, and prints how long it took and what the server sent after the
/// stop. (Those figures are not asserted. The body is paced because Linux's URLSession takes from milliseconds to
/// seconds to close a connection that sends as fast as it reads, minutes under ThreadSanitizer on a loaded machine: see
/// docs/reliability.md; `requests-bench --only streams` measures that case.)
final class StreamBreakTests: XCTestCase {
    private let server = TestServer.shared
    private let path = "/hostile/endless"
    private let query = "?chunk=65536&interval=1"
    /// How much the consumer takes before it stops.
    private let enough = 4 << 20

    /// The body the server sends for the `index`th request to the endless route.
    private func body(_ index: Int) -> LoopbackServer.EndlessBody? {
        let bodies = server.endlessBodies(path: path)
        return index < bodies.count ? bodies[index] : nil
    }

    /// The server's count of body `index` when the consumer stops, and the time.
    private struct Stop {
        var bytesSent: Int
        var at: UInt64
    }

    private func stop(_ index: Int) -> Stop {
        Stop(bytesSent: body(index)?.bytesSent ?? 0, at: LoopbackServer.now)
    }

    /// Waits for the server to see the connection of body `index` close (the test fails if it never does), and prints
    /// what it sent after `stop`.
    private func expectClose(of index: Int, after stop: Stop?, _ form: String, file: StaticString = #filePath, line: UInt = #line) {
        waitUntil(timeout: 300, "the server sees the connection close", file: file, line: line) { self.body(index)?.endedAt != nil }
        guard let end = body(index), let endedAt = end.endedAt, let stop else { return }
        print("\(form): the server saw the close \(endedAt - min(endedAt, stop.at)) ms after the stop, having sent \((end.bytesSent - stop.bytesSent) >> 10) KiB more")
    }

    private var request: StreamOf<DataChunkDecoder> {
        StreamOf(url: server.url(path + query), decoder: { DataChunkDecoder() })
    }

    func testBreakingOutOfTheLoopClosesTheConnection() async throws {
        let index = server.endlessBodies(path: path).count
        var consumed = 0
        var stopped: Stop?
        for try await chunk in OperationQueue().stream(for: request, session: testSession) {
            consumed += chunk.count
            if consumed >= enough {
                stopped = stop(index)
                break
            }
        }
        XCTAssertNotNil(stopped, "the endless body ended")
        expectClose(of: index, after: stopped, "break")
    }

    func testCancellingTheTaskClosesTheConnection() async throws {
        let index = server.endlessBodies(path: path).count
        let (request, enough) = (self.request, self.enough)
        let signal = Box<AsyncStream<Void>.Continuation>()
        let flowing = AsyncStream<Void> { signal.value = $0 }
        let task = Task {
            var consumed = 0
            for try await chunk in OperationQueue().stream(for: request, session: testSession) {
                consumed += chunk.count
                if consumed >= enough { signal.value?.yield() }
            }
        }
        for await _ in flowing { break }
        let stopped = stop(index)
        task.cancel()
        // The loop ends: with the cancellation when it waited for an element, or without an error when the cancel came
        // while its body ran (an `AsyncThrowingStream` then ends; see `OperationQueue.stream(for:session:after:)`).
        do {
            try await task.value
        } catch {
            XCTAssertTrue(error.isRequestCancellation, "\(error)")
        }
        expectClose(of: index, after: stopped, "Task.cancel()")
    }

    func testCancellingTheOperationClosesTheConnection() throws {
        let index = server.endlessBodies(path: path).count
        let consumed = Box<Int>()
        let stopped = Box<Stop>()
        let operation = Box<Operation>()
        let outcome = Box<Result<StreamSummary, Error>>()
        let done = expectation(description: "completion")
        operation.value = OperationQueue().addRequest(
            request, session: testSession,
            receive: { chunk in
                consumed.value = (consumed.value ?? 0) + chunk.count
                if (consumed.value ?? 0) >= self.enough, stopped.value == nil {
                    stopped.value = self.stop(index)
                    operation.value?.cancel()
                }
            }
        ) { result in
            outcome.value = result.mapError { $0 }
            done.fulfill()
        }
        wait(for: [done], timeout: 300)
        XCTAssertNotNil(outcome.value?.failure, "\(String(describing: outcome.value))")
        expectClose(of: index, after: stopped.value, "Operation.cancel()")
    }

    func testALimitClosesTheConnection() throws {
        let index = server.endlessBodies(path: path).count
        var limits = TransferLimits.stream
        limits.maximumBodySize = Int64(enough)
        var limited = request
        limited.ownLimits = limits
        let outcome = Box<Result<StreamSummary, Error>>()
        let done = expectation(description: "completion")
        OperationQueue().addRequest(limited, session: testSession, receive: { _ in }) { result in
            outcome.value = result.mapError { $0 }
            done.fulfill()
        }
        wait(for: [done], timeout: 300)
        let stopped = stop(index)
        XCTAssertEqual(outcome.value?.failure as? TransferLimitError, .responseTooLarge(limit: Int64(enough)), "\(String(describing: outcome.value))")
        expectClose(of: index, after: stopped, "the body-size limit (measured from the completion)")
    }
}
