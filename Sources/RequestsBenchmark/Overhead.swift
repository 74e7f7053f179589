#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
import Requests

/// A request operation with no network: it completes as soon as it starts.
private final class InstantOperation: RequestOperation<Int, Error>, @unchecked Sendable {
    override func execute() {
        complete(with: .success(1))
    }
}

/// CPU µs per operation, median of `rounds`, for `count` operations made by `make` on a queue of `concurrency`.
private func cpuPerOperation(count: Int, concurrency: Int, rounds: Int, _ make: () -> Operation) -> Double {
    var samples: [Double] = []
    for _ in 0..<rounds {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = concurrency
        let operations = (0..<count).map { _ in make() }
        let start = ResourceUsage.cpuMicroseconds()
        queue.addOperations(operations, waitUntilFinished: true)
        samples.append((ResourceUsage.cpuMicroseconds() - start) / Double(count))
    }
    return samples.sorted()[samples.count / 2]
}

/// Section 6: what the operation machinery costs by itself, without the network, beside `BlockOperation`.
/// It separates the library's own cost from the cost of scheduling around network waits (section 2).
func overheadSection(count: Int, rounds: Int) -> Section {
    var section = Section(
        name: "Overhead",
        title: "6. Operation overhead without the network: CPU µs per operation, median of \(rounds) runs of \(grouped(Double(count)))",
        rows: [])
    for concurrency in [1, 16] {
        let request = cpuPerOperation(count: count, concurrency: concurrency, rounds: rounds) {
            InstantOperation(completionQueue: nil, mapError: { $0 }, completion: { _ in })
        }
        let block = cpuPerOperation(count: count, concurrency: concurrency, rounds: rounds) { BlockOperation {} }
        section.rows.append(
            Row(
                measure: "Concurrency \(concurrency)",
                library: "\(fixed(request, 1)) µs (RequestOperation)",
                baseline: "\(fixed(block, 1)) µs (BlockOperation)",
                comparison: "\(signed(request - block, 1)) µs",
                goal: "",
                verdict: request.isFinite && block.isFinite ? .info : .failed))
    }
    section.notes.append(
        "A RequestOperation subclass that completes in execute(): start, the typed result, the exactly-once "
            + "completion and finish, with no URLSession. Section 2's extra cost at concurrency 1 is mostly not this, but the "
            + "queue waking a worker thread to start each request after the previous one's network wait.")
    return section
}
#endif
