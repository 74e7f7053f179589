#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// A request that is a class, so a test can hold it weakly.
private final class ClassRequest: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    let identifier: String
    init(url: URL, identifier: String = UUID().uuidString) {
        self.url = url
        self.identifier = identifier
    }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// An object captured by a completion handler.
private final class Captured: @unchecked Sendable {}

final class LifetimeTests: XCTestCase {
    private let server = TestServer.shared

    /// Runs one request that nobody but the queue retains, optionally cancelling it in flight,
    /// and checks that the operation, the request, the handler's captures and the task are all released.
    private func assertEverythingReleased(path: String, cancelInFlight: Bool, file: StaticString = #filePath, line: UInt = #line) {
        weak var weakOperation: DataRequestOperation<ClassRequest>?
        weak var weakRequest: ClassRequest?
        weak var weakCaptured: Captured?
        let tasks = Recorder<Weak<AnyObject>>()
        let done = expectation(description: "completion")
        let queue = OperationQueue()
        // Suspended until the task observer is in place.
        queue.isSuspended = true
        do {
            let request = ClassRequest(url: server.url(path))
            let captured = Captured()
            weakRequest = request
            weakCaptured = captured
            let operation =
                queue.addRequest(request, session: testSession) { _ in
                    withExtendedLifetime(captured) {}
                    done.fulfill()
                } as? DataRequestOperation<ClassRequest>
            operation?.observeTasks { tasks.append(Weak($0)) }
            weakOperation = operation
        }
        queue.isSuspended = false
        if cancelInFlight {
            waitUntil("the task exists", file: file, line: line) { weakOperation?.currentTask != nil }
            weakOperation?.cancel()
        }
        wait(for: [done], timeout: 10)
        queue.waitUntilAllOperationsAreFinished()
        waitUntil("the operation is released", file: file, line: line) { weakOperation == nil }
        XCTAssertNil(weakRequest, "request retained", file: file, line: line)
        XCTAssertNil(weakCaptured, "completion handler retained", file: file, line: line)
        XCTAssertGreaterThanOrEqual(tasks.count, 1, "tasks observed", file: file, line: line)
        waitUntil("every task is released", file: file, line: line) { tasks.values.allSatisfy { $0.object == nil } }
    }

    func testSuccessfulOperationRetainedOnlyByItsQueueCompletesAndReleasesEverything() {
        assertEverythingReleased(path: "/json", cancelInFlight: false)
    }

    func testFailedOperationReleasesEverything() {
        assertEverythingReleased(path: "/status/500", cancelInFlight: false)
    }

    func testCancelledOperationReleasesEverything() {
        assertEverythingReleased(path: "/delay/30000", cancelInFlight: true)
    }

    func testFinishedOperationHoldsNoTask() {
        let queue = OperationQueue()
        let operation = queue.addRequest(ClassRequest(url: server.url("/json")), session: testSession) { _ in } as? DataRequestOperation<ClassRequest>
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNil(operation?.currentTask)
        XCTAssertNotNil(operation?.result)
        XCTAssertEqual(operation?.response?.statusCode, 200)
    }
}

final class LookupTests: XCTestCase {
    private let server = TestServer.shared

    func testRequestCurrentlyExecutingFindsOnlyUnfinishedOperationsOfThatTypeAndQueue() {
        // Given a request in flight
        let queue = OperationQueue()
        let request = GetData(url: server.url("/delay/300?lookup"))
        let operation = queue.addRequest(request, session: testSession) { _ in }
        // Then it is found by identifier, on its queue only, for its type only
        XCTAssertTrue(queue.requestCurrentlyExecuting(request) === operation)
        XCTAssertTrue(queue.requestCurrentlyExecuting(GetData(url: request.url, method: "POST")) === operation, "identity is the identifier")
        XCTAssertNil(OperationQueue().requestCurrentlyExecuting(request))
        XCTAssertNil(queue.requestCurrentlyExecuting(GetDecodable<ServedRecipe>(url: request.url)))
        // When it finishes, Then it is no longer found
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNil(queue.requestCurrentlyExecuting(request))
    }

    func testQueuedAndCancelledOperations() {
        let queue = OperationQueue()
        queue.isSuspended = true
        let first = GetData(url: server.url("/json?lookup=1"))
        let firstOperation = queue.addRequest(first, session: testSession) { _ in }
        let secondOperation = queue.addRequest(first, session: testSession) { _ in }
        XCTAssertTrue(queue.requestCurrentlyExecuting(first) === firstOperation, "the oldest one")
        firstOperation.cancel()
        waitUntil("the cancellation is delivered") { queue.requestCurrentlyExecuting(first) === secondOperation }
        secondOperation.cancel()
        waitUntil("both are delivered") { queue.requestCurrentlyExecuting(first) == nil }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }

    func testOperationsOfTwoTypesUnderOneIdentifierAreFoundByType() {
        // Given a suspended queue with a data request, then a decodable request and another data request, all under one identifier
        let queue = OperationQueue()
        queue.isSuspended = true
        let url = server.url("/json?lookup=types")
        let data = GetData(url: url)
        let decodable = GetDecodable<ServedRecipe>(url: url)
        let firstData = queue.addRequest(data, session: testSession) { _ in }
        let decoding = queue.addRequest(decodable, session: testSession) { _ in }
        let secondData = queue.addRequest(data, session: testSession) { _ in }
        // Then each type finds its own oldest operation
        XCTAssertTrue(queue.requestCurrentlyExecuting(data) === firstData)
        XCTAssertTrue(queue.requestCurrentlyExecuting(decodable) === decoding)
        // When the first data request and the decodable one are cancelled
        firstData.cancel()
        decoding.cancel()
        // Then the next data request is found, and no decodable one; the identifier stays in use until the last goes
        waitUntil("the cancellations are delivered") {
            queue.requestCurrentlyExecuting(data) === secondData && queue.requestCurrentlyExecuting(decodable) == nil
        }
        XCTAssertFalse(queue.isRequestFinished(identifier: url.absoluteString), "in use by the second data request")
        secondData.cancel()
        waitUntil("all are delivered") { queue.requestCurrentlyExecuting(data) == nil }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }
}
