#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

final class StressTests: XCTestCase {
    private let server = TestServer.shared

    /// 10,000 requests of all three kinds, with random cancellation from several threads while they run.
    /// Every completion runs exactly once and every operation finishes.
    func testTenThousandRequestsWithRandomCancellationFromSeveralThreads() {
        let total = 10_000
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 16
        let completions = CompletionCounter(count: total)
        let serverRequestsBefore = server.totalRequestCount
        var operations: [Operation] = []
        operations.reserveCapacity(total)

        queue.isSuspended = true
        for index in 0..<total {
            let slow = index % 10 == 0 ? "&delay=5" : ""
            switch index % 3 {
            case 0:
                operations.append(
                    queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json?i=\(index)\(slow)")), session: testSession) { result in
                        completions.record(index, cancelled: result.failure?.isRequestCancellation ?? false, failed: result.failure != nil)
                    })
            case 1:
                operations.append(
                    queue.addRequest(GetData(url: server.url("/bytes/512?i=\(index)\(slow)")), session: testSession) { result in
                        completions.record(index, cancelled: result.failure?.isRequestCancellation ?? false, failed: result.failure != nil)
                    })
            default:
                operations.append(
                    queue.addRequest(SendNoContent(url: server.url("/status/204?i=\(index)\(slow)")), session: testSession) { result in
                        completions.record(index, cancelled: result.failure?.isRequestCancellation ?? false, failed: result.failure != nil)
                    })
            }
        }
        let shared = operations
        queue.isSuspended = false

        // Four threads cancel random operations near the head of the queue (queued, starting, in flight or
        // completing), at most `cancelsPerThread` each, while the run lasts. How many land before their completion
        // depends on the machine's speed; that every other request succeeds does not.
        let cancelsPerThread = 600
        let cancellers = DispatchGroup()
        let cancellable = UncheckedSendable(shared)
        for seed in 0..<4 {
            DispatchQueue.global().async(group: cancellers) {
                var generator = SplitMix64(seed: UInt64(seed + 1))
                var made = 0
                while completions.completedCount < total, made < cancelsPerThread {
                    let index = min(total - 1, completions.completedCount + Int(generator.next() % 32))
                    completions.willCancel(index)
                    cancellable.value[index].cancel()
                    made += 1
                    usleep(UInt32(generator.next() % 16_000))
                }
            }
        }
        XCTAssertEqual(cancellers.wait(timeout: .now() + 300), .success)
        queue.waitUntilAllOperationsAreFinished()

        let summary = completions.summary
        XCTAssertEqual(summary.calledTwice, [], "completions called more than once")
        XCTAssertEqual(summary.neverCalled, [], "completions never called")
        XCTAssertTrue(shared.allSatisfy(\.isFinished))
        XCTAssertTrue(shared.allSatisfy { !$0.isExecuting })
        XCTAssertGreaterThan(summary.cancelled, 0)
        XCTAssertEqual(summary.failedUncancelled, [], "a request nobody cancelled failed")
        XCTAssertEqual(summary.failed, summary.cancelled, "only cancellations fail")
        let reachedServer = server.totalRequestCount - serverRequestsBefore
        print(
            "stress: \(total) requests, \(summary.cancelled) cancelled (\(reachedServer - (total - summary.cancelled)) of them after reaching the server), \(summary.failed - summary.cancelled) other failures"
        )
    }
}

/// Counts completions per index.
private final class CompletionCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [Int]
    private var targeted: Set<Int> = []
    private var failures: Set<Int> = []
    private var completed = 0
    private var cancelled = 0
    private var failed = 0

    init(count: Int) { counts = Array(repeating: 0, count: count) }

    func record(_ index: Int, cancelled wasCancelled: Bool, failed didFail: Bool) {
        lock.lock()
        counts[index] += 1
        completed += 1
        if wasCancelled { cancelled += 1 }
        if didFail {
            failed += 1
            failures.insert(index)
        }
        lock.unlock()
    }

    /// Call before cancelling operation `index`.
    func willCancel(_ index: Int) {
        lock.lock()
        targeted.insert(index)
        lock.unlock()
    }

    var completedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return completed
    }

    var summary: (calledTwice: [Int], neverCalled: [Int], cancelled: Int, failed: Int, failedUncancelled: [Int]) {
        lock.lock()
        defer { lock.unlock() }
        return (
            counts.indices.filter { counts[$0] > 1 }, counts.indices.filter { counts[$0] == 0 }, cancelled, failed,
            failures.subtracting(targeted).sorted()
        )
    }
}

/// A small deterministic random generator, so a failing run can be replayed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
