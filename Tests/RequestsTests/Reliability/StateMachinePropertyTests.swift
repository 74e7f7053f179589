import Foundation
import Requests
import XCTest

/// Random interleavings of start, cancel (from several threads), completion of the work (from other threads)
/// and cancellation of a dependency, over 10,000 operations. Invariants: the completion runs exactly once and
/// before the operation reports finished; every operation finishes and none stays executing; a dependent
/// starts only after the operation finished; `isCancelled` is true exactly when the result is the cancellation.
final class StateMachinePropertyTests: XCTestCase {
    /// Completes after a random pause, from a random thread, unless cancelled first.
    private final class RandomWork: RequestOperation<Int, Error>, @unchecked Sendable {
        let pauseMicroseconds: UInt32
        let completeInline: Bool

        init(seed: UInt64, completion: @escaping Completion) {
            var generator = SplitMix64(seed: seed)
            pauseMicroseconds = UInt32(generator.next() % 300)
            completeInline = generator.next() % 4 == 0
            super.init(completionQueue: nil, mapError: { $0 }, completion: completion)
        }

        override func execute() {
            if completeInline {
                complete(with: .success(1))
            } else {
                let pause = pauseMicroseconds
                DispatchQueue.global().async {
                    usleep(pause)
                    self.complete(with: .success(1))
                }
            }
        }
    }

    private final class Tally: @unchecked Sendable {
        private let lock = NSLock()
        private var completions: [Int: Int] = [:]
        private var finishedBeforeCompletion = 0
        private var dependentsTooEarly = 0

        func completed(_ index: Int, alreadyFinished: Bool) {
            lock.lock()
            completions[index, default: 0] += 1
            if alreadyFinished { finishedBeforeCompletion += 1 }
            lock.unlock()
        }

        func dependentRan(afterFinished: Bool) {
            lock.lock()
            if !afterFinished { dependentsTooEarly += 1 }
            lock.unlock()
        }

        var summary: (completions: [Int: Int], finishedBeforeCompletion: Int, dependentsTooEarly: Int) {
            lock.lock()
            defer { lock.unlock() }
            return (completions, finishedBeforeCompletion, dependentsTooEarly)
        }
    }

    func testRandomInterleavingsKeepTheInvariants() {
        let count = 10_000
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 16
        let tally = Tally()
        var generator = SplitMix64(seed: 42)
        var operations: [RandomWork] = []
        var gates: [BlockOperation] = []
        var dependents: [BlockOperation] = []
        let operationBox = Box<[RandomWork]>()

        for index in 0..<count {
            let operation = RandomWork(seed: generator.next()) { _ in
                let finished = operationBox.value?[index].isFinished ?? false
                tally.completed(index, alreadyFinished: finished)
            }
            // One in four waits on a gate that is sometimes cancelled instead of run.
            if generator.next() % 4 == 0 {
                let gate = BlockOperation { usleep(50) }
                operation.addDependency(gate)
                gates.append(gate)
            }
            // One in eight has a dependent that checks it had finished.
            if generator.next() % 8 == 0 {
                let dependent = BlockOperation { [unowned operation] in tally.dependentRan(afterFinished: operation.isFinished) }
                dependent.addDependency(operation)
                dependents.append(dependent)
            }
            operations.append(operation)
        }
        operationBox.value = operations

        queue.isSuspended = true
        queue.addOperations(operations, waitUntilFinished: false)
        queue.addOperations(dependents, waitUntilFinished: false)
        let shared = operations
        let sharedGates = UncheckedSendable(gates)
        queue.isSuspended = false

        // Four threads cancel random operations and gates while the queue runs.
        DispatchQueue.concurrentPerform(iterations: 4) { lane in
            var random = SplitMix64(seed: UInt64(100 + lane))
            for _ in 0..<(count / 8) {
                shared[Int(random.next() % UInt64(count))].cancel()
                if random.next() % 3 == 0, !sharedGates.value.isEmpty {
                    sharedGates.value[Int(random.next() % UInt64(sharedGates.value.count))].cancel()
                }
                if random.next() % 16 == 0 { usleep(UInt32(random.next() % 200)) }
            }
        }
        // The gates that were not cancelled run on another queue.
        OperationQueue().addOperations(gates, waitUntilFinished: false)
        queue.waitUntilAllOperationsAreFinished()

        let summary = tally.summary
        XCTAssertEqual(summary.completions.count, count, "every completion ran")
        XCTAssertEqual(summary.completions.values.filter { $0 != 1 }.count, 0, "no completion ran twice")
        XCTAssertEqual(summary.finishedBeforeCompletion, 0, "no operation reported finished before its completion ran")
        XCTAssertEqual(summary.dependentsTooEarly, 0, "no dependent started before the operation finished")
        XCTAssertTrue(operations.allSatisfy { $0.isFinished && !$0.isExecuting })
        for operation in operations {
            XCTAssertEqual(operation.isCancelled, operation.result?.failure?.isRequestCancellation ?? false)
        }
        let cancelled = operations.filter(\.isCancelled).count
        XCTAssertGreaterThan(cancelled, count / 20)
        XCTAssertLessThan(cancelled, count)
        operationBox.value = nil
    }
}
