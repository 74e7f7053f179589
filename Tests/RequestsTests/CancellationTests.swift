#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Every path calls the completion exactly once, and a cancelled request completes with `.cancelled`.
final class CancellationTests: XCTestCase {
    private let server = TestServer.shared

    func testCancelBeforeStartCompletesOnceAndSendsNothing() {
        // Given a request waiting in a suspended queue
        let queue = OperationQueue()
        queue.isSuspended = true
        let results = Recorder<Result<Data, Error>>()
        let done = expectation(description: "completion")
        let path = TestServer.freshPath()
        let operation = queue.addRequest(GetData(url: server.url(path)), session: testSession) { result in
            results.append(result)
            done.fulfill()
        }
        // When it is cancelled
        operation.cancel()
        // Then the completion runs at once, with cancellation, even though the queue has not started it
        wait(for: [done], timeout: 10)
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        XCTAssertFalse(operation.isFinished, "an operation must not finish before its queue starts it")
        // And it finishes once the queue runs it, without a second completion or a network call
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual(server.requestCount(path: path), 0)
    }

    func testCancelWhileMakeURLRequestIsPendingCompletesAndLateCallbackIsIgnored() {
        // Given a request whose makeURLRequest has not called back yet
        let pending = Box<(Result<URLRequest, Error>) -> Void>()
        let asked = expectation(description: "makeURLRequest called")
        let request = ManualRequest(identifier: "pending") { completion in
            pending.value = completion
            asked.fulfill()
        }
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let done = expectation(description: "completion")
        let operation = queue.addRequest(request, session: testSession) { result in
            results.append(result)
            done.fulfill()
        }
        wait(for: [asked], timeout: 10)
        // When it is cancelled, and makeURLRequest calls back afterwards
        operation.cancel()
        wait(for: [done], timeout: 10)
        let before = server.requestCount(path: "/echo")
        pending.value?(.success(URLRequest(url: server.url("/echo"))))
        queue.waitUntilAllOperationsAreFinished()
        // Then there is one cancelled completion, the operation finished, and nothing was sent
        XCTAssertEqual(results.count, 1)
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(server.requestCount(path: "/echo"), before)
    }

    func testCancelInFlightCancelsTheTaskAndCompletesWithoutWaitingForTheServer() {
        // Given a request the server will answer only after 60 seconds
        let path = "/delay/60000"
        let before = server.requestCount(path: path)
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let done = expectation(description: "completion")
        let operation = queue.addRequest(GetData(url: server.url(path)), session: testSession) { result in
            results.append(result)
            done.fulfill()
        }
        waitUntil("the server has the request") { self.server.requestCount(path: path) > before }
        let openConnections = server.openConnectionCount
        // When it is cancelled in flight
        operation.cancel()
        // Then the completion arrives long before the server's delay ends (the wait is 10 s of 60 s)
        wait(for: [done], timeout: 10)
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false, "\(results.values)")
        waitUntil("the operation finishes") { operation.isFinished }
        // And the task was cancelled: the client closed the connection the server was holding
        waitUntil("the connection is closed") { self.server.openConnectionCount < openConnections }
        XCTAssertEqual(results.count, 1)
    }

    func testMakeURLRequestCallingBackTwiceSendsOnce() {
        // Given a request that calls its completion twice
        let path = "/echo"
        let first = server.url("/echo?call=1")
        let second = server.url("/echo?call=2")
        let request = ManualRequest(identifier: "twice") { completion in
            completion(.success(URLRequest(url: first)))
            completion(.success(URLRequest(url: second)))
        }
        let before = server.requestCount(path: path)
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        // When it runs
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // Then only the first URLRequest is sent and the completion runs once
        XCTAssertEqual(server.requestCount(path: path), before + 1)
        XCTAssertEqual(results.count, 1)
        let echoed = results.values.first?.success.flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
        XCTAssertEqual((echoed?["query"] as? [String: String])?["call"], "1")
    }

    func testCancelAfterFinishDoesNothing() {
        // Given a finished request
        let queue = OperationQueue()
        let results = Recorder<Result<ServedRecipe, Error>>()
        let operation = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        // When it is cancelled
        operation.cancel()
        // Then nothing changes
        XCTAssertFalse(operation.isCancelled)
        XCTAssertEqual(results.count, 1)
        XCTAssertNotNil(operation.result?.success)
    }

    func testCancelFromInsideTheCompletionHandlerDoesNotCallItAgain() {
        let queue = OperationQueue()
        let results = Recorder<Result<ServedRecipe, Error>>()
        let operationBox = Box<Operation>()
        let gate = DispatchSemaphore(value: 0)
        let operation = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession) { result in
            gate.wait()
            operationBox.value?.cancel()
            results.append(result)
        }
        operationBox.value = operation
        gate.signal()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1)
        XCTAssertNotNil(results.values.first?.success)
        XCTAssertTrue(operation.isFinished)
        XCTAssertFalse(operation.isCancelled, "a request that delivered its result is not cancelled afterwards")
    }

    func testCancelledOperationWaitingOnADependencyCompletesOnce() {
        // Given B depends on A, and A has not finished
        let queue = OperationQueue()
        queue.isSuspended = true
        let gate = BlockOperation { Thread.sleep(forTimeInterval: 0.05) }
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(GetData(url: server.url("/json")), session: testSession) { results.append($0) }
        operation.addDependency(gate)
        queue.addOperation(gate)
        // When B is cancelled before A runs
        operation.cancel()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        // Then B completes once, with cancellation
        XCTAssertEqual(results.count, 1)
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        XCTAssertTrue(operation.isFinished)
    }

    func testRequestCancelledWhileWaitingOnADependencyIsNeverSent() {
        // Given 300 requests waiting on an operation that never finishes
        // (on Linux, Operation.cancel() lets the queue start a waiting operation at once, on another thread)
        let path = TestServer.freshPath()
        let queue = OperationQueue()
        let neverFinishes = BlockOperation {}
        let results = Recorder<Result<Data, Error>>()
        let operations = (0..<300).map { _ in
            let operation = DataRequestOperation(request: GetData(url: server.url(path)), session: testSession) { results.append($0) }
            operation.addDependency(neverFinishes)
            queue.addOperation(operation)
            return operation
        }
        // When each is cancelled
        operations.forEach { $0.cancel() }
        queue.waitUntilAllOperationsAreFinished()
        // Then each completed once, with cancellation, and none reached the server
        XCTAssertEqual(results.count, 300)
        XCTAssertTrue(results.values.allSatisfy { $0.failure?.isRequestCancellation ?? false })
        XCTAssertEqual(server.requestCount(path: path), 0)
    }

    func testCancelWhileTheTaskIsBeingCreatedSendsNothing() {
        // Given operations that the test cancels as soon as their task exists, before it is resumed
        let path = TestServer.freshPath()
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        for _ in 0..<100 {
            let operationBox = Box<Operation>()
            queue.isSuspended = true
            let operation = queue.addRequest(GetData(url: server.url(path)), session: testSession) { results.append($0) }
            (operation as? DataRequestOperation<GetData>)?.observeTasks { _ in operationBox.value?.cancel() }
            operationBox.value = operation
            // When the queue starts it and it is cancelled as its task is created
            queue.isSuspended = false
            operation.waitUntilFinished()
        }
        waitUntil("every completion") { results.count == 100 }
        // Then every request completed as cancelled, and none was sent
        XCTAssertTrue(results.values.allSatisfy { $0.failure?.isRequestCancellation ?? false })
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(server.requestCount(path: path), 0)
    }

    func testCancelAllOperationsDoesNotLetTheQueueSendWhatItHasNotReached() {
        // Given 3,000 requests, 16 in flight on a slow route and the rest queued
        let path = TestServer.freshPath()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 16
        let results = Recorder<Result<Data, Error>>()
        for index in 0..<3_000 {
            queue.addRequest(GetData(url: server.url("\(path)?delay=5000&i=\(index)")), session: testSession) { results.append($0) }
        }
        waitUntil("16 requests are in flight") { self.server.requestCount(path: path) >= 16 }
        // When all are cancelled
        queue.cancelAllOperations()
        waitUntil("every completion") { results.count == 3_000 }
        queue.waitUntilAllOperationsAreFinished()
        // Then each completed once, with cancellation, and the queue did not start (and send) the queued ones
        // while cancelAllOperations() worked through them (task.cancel() blocks; it must not block the canceller)
        XCTAssertTrue(results.values.allSatisfy { $0.failure?.isRequestCancellation ?? false })
        XCTAssertLessThan(server.requestCount(path: path), 200, "requests sent while being cancelled")
    }

    func testCancelAllOperationsCompletesEveryRequestOnce() {
        // Given 200 requests, some in flight and most queued
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let results = Recorder<Int>()
        for index in 0..<200 {
            queue.addRequest(GetData(url: server.url("/delay/20?i=\(index)")), session: testSession) { _ in results.append(index) }
        }
        // When every one is cancelled
        queue.cancelAllOperations()
        queue.waitUntilAllOperationsAreFinished()
        // Then each completion ran exactly once
        XCTAssertEqual(results.count, 200)
        XCTAssertEqual(Set(results.values).count, 200)
    }
}
