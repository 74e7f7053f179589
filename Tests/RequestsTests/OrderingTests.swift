#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// The completion handler has returned before the operation finishes, so dependents see its effects,
/// and it runs on the documented queue.
final class OrderingTests: XCTestCase {
    private let server = TestServer.shared

    func testDependentOnAnotherQueueSeesTheCompletionsEffects() {
        // Given request operations whose completion handlers take a while to write their result
        let network = OperationQueue()
        network.maxConcurrentOperationCount = 8
        let ui = OperationQueue()
        let seenByDependents = Recorder<Bool>()
        for _ in 0..<100 {
            let written = Box<Bool>()
            let request = network.addRequest(SendNoContent(url: server.url("/status/204")), session: testSession) { _ in
                Thread.sleep(forTimeInterval: 0.002)
                written.value = true
            }
            // When a dependent on another queue runs
            let dependent = BlockOperation { seenByDependents.append(written.value == true) }
            dependent.addDependency(request)
            ui.addOperation(dependent)
        }
        network.waitUntilAllOperationsAreFinished()
        ui.waitUntilAllOperationsAreFinished()
        // Then every dependent saw what its completion handler wrote
        XCTAssertEqual(seenByDependents.count, 100)
        XCTAssertEqual(seenByDependents.values.filter { $0 }.count, 100)
    }

    func testMainQueueDependentSeesTheCompletionAndReadsTheTypedResult() {
        // Given a request and a UI step on OperationQueue.main that depends on it
        let queue = OperationQueue()
        let written = Box<String>()
        let request = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession) { result in
            Thread.sleep(forTimeInterval: 0.01)
            written.value = try? result.get().name
        }
        let done = expectation(description: "UI step")
        let ui = BlockOperation {
            // Then the completion's effect and the typed result are both visible
            XCTAssertTrue(Thread.isMainThread)
            XCTAssertEqual(written.value, "Pancakes")
            XCTAssertEqual(try? request.result?.get().name, "Pancakes")
            done.fulfill()
        }
        ui.addDependency(request)
        OperationQueue.main.addOperation(ui)
        wait(for: [done], timeout: 10)
    }

    func testCompletionRunsOnTheGivenQueue() {
        let key = DispatchSpecificKey<String>()
        let callbackQueue = DispatchQueue(label: "callbacks")
        callbackQueue.setSpecific(key: key, value: "callbacks")
        let done = expectation(description: "completion")
        OperationQueue().addRequest(GetData(url: server.url("/json")), session: testSession, completionQueue: callbackQueue) { _ in
            XCTAssertEqual(DispatchQueue.getSpecific(key: key), "callbacks")
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
    }

    func testTheMainQueueNeverProcessesAResponse() {
        // Given the main queue as the completion queue
        let processedOnMain = Box<Bool>()
        let request = HookedProcessing(url: server.url("/json")) { processedOnMain.value = Thread.isMainThread }
        let done = expectation(description: "completion")
        OperationQueue().addRequest(request, session: testSession, completionQueue: .main) { _ in
            // Then the completion runs there, and the processing ran elsewhere
            XCTAssertTrue(Thread.isMainThread)
            XCTAssertEqual(processedOnMain.value, false)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
    }

    func testCompletionRunsOnTheUnderlyingQueueWhenNoneIsGiven() {
        let key = DispatchSpecificKey<String>()
        let underlying = DispatchQueue(label: "underlying")  // kept alive here: OperationQueue holds it unowned
        underlying.setSpecific(key: key, value: "underlying")
        let queue = OperationQueue()
        queue.underlyingQueue = underlying
        let done = expectation(description: "completion")
        queue.addRequest(GetData(url: server.url("/json")), session: testSession) { _ in
            XCTAssertEqual(DispatchQueue.getSpecific(key: key), "underlying")
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        withExtendedLifetime(underlying) {}
    }

    func testWithoutAQueueTheCompletionRunsOffTheSessionsDelegateQueue() {
        // The body is processed off the session's serial delegate queue, so that a slow one delays no other
        // request; the completion runs where it was processed.
        let done = expectation(description: "completion")
        OperationQueue().addRequest(GetData(url: server.url("/json")), session: testSession) { _ in
            XCTAssertFalse(OperationQueue.current === testSession.delegateQueue)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
    }

    func testCancellationWithoutAQueueIsNotDeliveredInsideCancel() {
        // Given a queued request with no completion queue, and a queue to cancel it from
        let queue = OperationQueue()
        queue.isSuspended = true
        let key = DispatchSpecificKey<String>()
        let cancelling = DispatchQueue(label: "cancelling")
        cancelling.setSpecific(key: key, value: "cancelling")
        let ranOnCancellingQueue = Recorder<Bool>()
        let done = expectation(description: "completion")
        let operation = queue.addRequest(GetData(url: server.url("/json")), session: testSession) { _ in
            ranOnCancellingQueue.append(DispatchQueue.getSpecific(key: key) != nil)
            done.fulfill()
        }
        // When it is cancelled
        cancelling.sync { operation.cancel() }
        wait(for: [done], timeout: 10)
        // Then the handler did not run on the cancelling call stack
        XCTAssertEqual(ranOnCancellingQueue.values, [false])
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }

    func testDefaultSessionIsShared() {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = queue.addRequest(GetData(url: server.url("/json"))) { _ in }
        XCTAssertTrue((operation as? DataRequestOperation<GetData>)?.session === URLSession.shared)
        operation.cancel()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }

    func testEachKindRunsAsItsOwnOperationClass() {
        let queue = OperationQueue()
        queue.isSuspended = true
        let data = queue.addRequest(GetData(url: server.url("/json"))) { _ in }
        let decodable = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json"))) { _ in }
        let noContent = queue.addRequest(SendNoContent(url: server.url("/status/204"))) { _ in }
        XCTAssertTrue(type(of: data) == DataRequestOperation<GetData>.self)
        XCTAssertTrue(decodable is DecodableRequestOperation<GetDecodable<ServedRecipe>>)
        XCTAssertTrue(noContent is NoContentRequestOperation<SendNoContent>)
        queue.cancelAllOperations()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }
}

/// A GET whose `processResponse` calls `hook` first.
private struct HookedProcessing: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    let hook: @Sendable () -> Void
    var identifier: String { "hooked" }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }

    func processData(_ data: Data) throws -> Data {
        hook()
        return data
    }
}
