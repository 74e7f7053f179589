import Foundation
import Requests
import XCTest

/// `AsyncOperation` and `RequestOperation` used directly, as a subclass author would.
final class OperationBaseTests: XCTestCase {
    /// Finishes on another thread after a short wait.
    private final class Sleeper: AsyncOperation, @unchecked Sendable {
        let executions = Recorder<Bool>()
        override func execute() {
            executions.append(true)
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.01) {
                self.finish()
                self.finish()  // idempotent
            }
        }
    }

    func testAsyncSubclassFinishesOnAnotherThreadAndDependentsWait() {
        let queue = OperationQueue()
        let sleeper = Sleeper()
        let sawFinished = Recorder<Bool>()
        let dependent = BlockOperation { sawFinished.append(sleeper.isFinished) }
        dependent.addDependency(sleeper)
        queue.addOperations([sleeper, dependent], waitUntilFinished: true)
        XCTAssertEqual(sleeper.executions.count, 1)
        XCTAssertEqual(sawFinished.values, [true])
        XCTAssertFalse(sleeper.isExecuting)
    }

    func testSecondStartDoesNothing() {
        let sleeper = Sleeper()
        sleeper.start()
        sleeper.start()
        waitUntil("finished") { sleeper.isFinished }
        XCTAssertEqual(sleeper.executions.count, 1)
    }

    func testFinishBeforeStartIsDeferredUntilStart() {
        // Given an operation told to finish before anything started it
        let sleeper = Sleeper()
        sleeper.finish()
        // Then it is not finished yet, and start() finishes it without executing
        XCTAssertFalse(sleeper.isFinished)
        sleeper.start()
        XCTAssertTrue(sleeper.isFinished)
        XCTAssertEqual(sleeper.executions.count, 0)
    }

    func testRequestOperationSubclassThatForgetsExecuteStillCompletes() {
        final class Forgetful: RequestOperation<Int, Error>, @unchecked Sendable {}
        let results = Recorder<Result<Int, Error>>()
        let operation = Forgetful(completionQueue: nil, mapError: { $0 }, completion: { results.append($0) })
        OperationQueue().addOperations([operation], waitUntilFinished: true)
        XCTAssertEqual(results.count, 1)
        guard case .misuse? = results.values.first?.failure as? RequestQueueError else {
            return XCTFail("expected misuse, got \(results.values)")
        }
    }

    func testRequestOperationSubclassCompletesOnceWhateverComesFirst() {
        /// Completes from another thread, racing a cancellation.
        final class Racer: RequestOperation<Int, Error>, @unchecked Sendable {
            override func execute() {
                DispatchQueue.global().async { self.complete(with: .success(1)) }
            }
        }
        let counts = Recorder<Bool>()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        let operations = (0..<2_000).map { _ in
            Racer(completionQueue: nil, mapError: { $0 }, completion: { counts.append($0.failure == nil) })
        }
        queue.addOperations(operations, waitUntilFinished: false)
        DispatchQueue.concurrentPerform(iterations: 4) { lane in
            for index in stride(from: lane, to: operations.count, by: 8) { operations[index].cancel() }
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(counts.count, 2_000)
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
        // A cancelled operation reports isCancelled exactly when its result is the cancellation.
        for operation in operations {
            XCTAssertEqual(operation.isCancelled, operation.result?.failure?.isRequestCancellation ?? false)
        }
    }
}
