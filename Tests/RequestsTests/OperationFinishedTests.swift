import Foundation
import Requests
import XCTest

/// `Operation.finished()`: an awaitable wait for any operation, started or not, finished or not, that does not block
/// the main thread, and that a cancelled Task leaves without touching the operation.
final class OperationFinishedTests: XCTestCase {
    func testAnOperationFinishedAlreadyReturnsAtOnce() async throws {
        let operation = BlockOperation {}
        operation.start()  // a synchronous operation finishes in start()
        XCTAssertTrue(operation.isFinished)
        try await operation.finished()
        XCTAssertTrue(operation.isFinished)
    }

    func testAnOperationNotStartedYetIsWaitedForUntilItsQueueHasRunIt() async throws {
        // Given an operation that is on no queue yet, and a Task that waits for it
        let order = Recorder<String>()
        let operation = BlockOperation { order.append("the operation ran") }
        let waiting = UncheckedSendable(operation)
        let waiter = Task {
            try await waiting.value.finished()
            order.append("the wait returned")
        }
        // When the operation is added to a queue later
        let queue = OperationQueue()
        queue.addOperation(operation)
        // Then the wait returns after it ran
        try await waiter.value
        XCTAssertEqual(order.values, ["the operation ran", "the wait returned"])
    }

    func testCancellingTheWaitingTaskEndsTheWaitAndLeavesTheOperationAlone() async throws {
        // Given an operation on a suspended queue, and a Task that waits for it
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = BlockOperation {}
        queue.addOperation(operation)
        let waiting = UncheckedSendable(operation)
        let waiter = Task { try await waiting.value.finished() }
        // When the Task is cancelled
        waiter.cancel()
        // Then the wait throws CancellationError, and the operation is neither cancelled nor finished
        do {
            try await waiter.value
            XCTFail("the wait returned")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        XCTAssertFalse(operation.isCancelled)
        XCTAssertFalse(operation.isFinished)
        // And it still runs, and can be waited for again
        queue.isSuspended = false
        try await operation.finished()
        XCTAssertTrue(operation.isFinished)
    }

    func testATaskCancelledBeforeItWaitsThrowsAtOnce() async {
        let operation = UncheckedSendable(BlockOperation {})
        let waiter = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await operation.value.finished()
        }
        let result = await waiter.result
        XCTAssertTrue(result.failure is CancellationError, "\(result)")
        XCTAssertFalse(operation.value.isFinished)
    }

    @MainActor
    func testAStepOnTheMainQueueIsAwaitedOnTheMainActorWithoutADeadlock() async throws {
        // Given a step on OperationQueue.main, which runs only while the main thread is free
        let ranOnMain = Box<Bool>()
        let step = BlockOperation { ranOnMain.value = Thread.isMainThread }
        OperationQueue.main.addOperation(step)
        // When the main actor waits for it (waitUntilFinished() here would never return)
        try await step.finished()
        // Then it ran
        XCTAssertTrue(step.isFinished)
        XCTAssertNotNil(ranOnMain.value)
    }

    func testManyTasksWaitForOneOperation() async throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = UncheckedSendable(BlockOperation {})
        queue.addOperation(operation.value)
        let waiters = (0..<20).map { _ in Task { try await operation.value.finished() } }
        queue.isSuspended = false
        for waiter in waiters { try await waiter.value }
        XCTAssertTrue(operation.value.isFinished)
    }
}
