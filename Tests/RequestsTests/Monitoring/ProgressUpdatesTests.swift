#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// Every snapshot, until the sequence ends.
private func collect(_ updates: AsyncStream<ProgressSnapshot>) async -> [ProgressSnapshot] {
    var snapshots: [ProgressSnapshot] = []
    for await snapshot in updates {
        snapshots.append(snapshot)
    }
    return snapshots
}

final class ProgressUpdatesTests: XCTestCase {
    private let server = TestServer.shared

    private func assertNeverBackwards(_ snapshots: [ProgressSnapshot], file: StaticString = #filePath, line: UInt = #line) {
        for (before, after) in zip(snapshots, snapshots.dropFirst()) {
            XCTAssertLessThanOrEqual(before.completedUnitCount, after.completedUnitCount, "\(snapshots)", file: file, line: line)
        }
    }

    func testADownloadsProgressArrivesAsItMovesAndEndsComplete() async throws {
        // Given a 2 MB download sent in ten pieces (a download reports every 256 KiB)
        let queue = OperationQueue()
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("progress-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: destination) }
        let results = Recorder<Result<URL, Error>>()
        let operation = queue.addRequest(
            Download(url: server.url("/trickle/2000000?chunk=200000&interval=50"), destination: destination), session: testSession
        ) { results.append($0) }
        // When its progress is read to the end
        let snapshots = await collect(operation.progressUpdates)
        // Then it moved through the bytes, never backwards, and ended complete once the completion had run
        XCTAssertEqual(results.count, 1)
        XCTAssertTrue(operation.isFinished)
        assertNeverBackwards(snapshots)
        XCTAssertEqual(snapshots.last, ProgressSnapshot(completedUnitCount: 2_000_000, totalUnitCount: 2_000_000))
        XCTAssertGreaterThanOrEqual(snapshots.filter { $0.completedUnitCount > 0 && $0.completedUnitCount < 2_000_000 }.count, 2, "\(snapshots)")
        XCTAssertEqual(snapshots.last?.fractionCompleted, 1)
    }

    func testAFailureOrACancellationEndsTheSequenceWhereTheProgressStopped() async {
        let queue = OperationQueue()
        // A failure
        let failed = queue.addRequest(GetDecodable<[String]>(url: server.url("/status/500")), session: testSession) { _ in }
        let afterFailure = await collect(failed.progressUpdates)
        XCTAssertEqual(afterFailure.last?.fractionCompleted, 0)
        XCTAssertTrue(failed.isFinished)

        // A cancellation in the middle of an endless body
        let endless = queue.addRequest(
            Download(url: server.url("/hostile/endless?chunk=100000&interval=10")), session: testSession
        ) { _ in }
        let endlessUpdates = endless.progressUpdates
        let reader = Task { await collect(endlessUpdates) }
        waitUntil("bytes arrive") { endless.progress.completedUnitCount > 0 }
        endless.cancel()
        let afterCancel = await reader.value
        XCTAssertLessThan(afterCancel.last?.fractionCompleted ?? 1, 1)
        guard case .cancelled? = endless.result?.failure as? RequestQueueError else {
            return XCTFail("\(String(describing: endless.result))")
        }
    }

    func testReadingAfterTheEndGivesTheLastValueAndEnds() async throws {
        let queue = OperationQueue()
        let operation = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession) { _ in }
        waitUntil("it finishes") { operation.isFinished }
        let snapshots = await collect(operation.progressUpdates)
        XCTAssertEqual(snapshots, [ProgressSnapshot(completedUnitCount: 1, totalUnitCount: 1)])
    }

    func testStoppingTheReaderDoesNotCancelTheRequest() async throws {
        // Given a slow download and a reader that stops after its first value
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(GetData(url: server.url("/delay/300")), session: testSession) { results.append($0) }
        for await _ in operation.progressUpdates { break }
        // And another whose task is cancelled
        let updates = operation.progressUpdates
        let reader = Task { await collect(updates) }
        reader.cancel()
        _ = await reader.value
        // Then the request still succeeds
        waitUntil("it finishes") { operation.isFinished }
        XCTAssertNotNil(try results.values.first?.get())
    }

    func testABatchCountsItsRequests() async {
        let queue = OperationQueue()
        let requests = (0..<4).map { GetData(url: server.url("/delay/\(50 * $0)")) }
        let batch = queue.addBatch(requests, session: testSession)
        let snapshots = await collect(batch.progressUpdates)
        assertNeverBackwards(snapshots)
        XCTAssertEqual(snapshots.last, ProgressSnapshot(completedUnitCount: 4, totalUnitCount: 4))
    }
}
