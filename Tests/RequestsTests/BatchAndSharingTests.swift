#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// The `/echo` route's answer, enough to tell which request it was.
private struct Echo: Decodable { let query: [String: String] }

final class BatchTests: XCTestCase {
    private let server = TestServer.shared

    func testThousandRequestsAtConcurrencyEightGiveResultsInInputOrderWithProgress() {
        // Given 1,000 requests on a queue that runs 8 at a time
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        let requests = (0..<1_000).map { GetDecodable<Echo>(url: server.url("/echo?i=\($0)")) }
        let done = expectation(description: "batch completion")
        let delivered = Recorder<[Result<Echo, Error>]>()
        // When they run as a batch
        let batch = queue.addBatch(requests, session: testSession) { result in
            delivered.append((try? result.get()) ?? [])
            done.fulfill()
        }
        XCTAssertEqual(batch.progress.totalUnitCount, 1_000)
        wait(for: [done], timeout: 120)
        queue.waitUntilAllOperationsAreFinished()
        // Then all 1,000 results arrive in input order, and progress counted each one
        let results = delivered.values.first ?? []
        XCTAssertEqual(results.count, 1_000)
        XCTAssertEqual(results.map { try? $0.get().query["i"] }, (0..<1_000).map { String($0) })
        XCTAssertEqual(batch.progress.completedUnitCount, 1_000)
        XCTAssertEqual(batch.progress.fractionCompleted, 1.0, accuracy: 0.000_1)
        XCTAssertEqual(try batch.result?.get().count, 1_000)
    }

    func testProgressMovesAsRequestsComplete() {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.isSuspended = true
        let batch = queue.addBatch((0..<4).map { GetData(url: server.url("/json?p=\($0)")) }, session: testSession)
        let seen = Recorder<Int64>()
        let sampler = DispatchQueue(label: "sampler")
        let stop = Box<Bool>()
        sampler.async {
            while stop.value != true {
                seen.append(batch.progress.completedUnitCount)
                usleep(100)
            }
        }
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        stop.value = true
        sampler.sync {}
        let samples = seen.values
        XCTAssertEqual(samples, samples.sorted(), "progress never goes back")
        XCTAssertEqual(batch.progress.completedUnitCount, 4)
        XCTAssertGreaterThan(Set(samples).count, 2, "progress was seen between start and end")
    }

    func testOtherOperationsCanDependOnTheBatch() {
        let queue = OperationQueue()
        let batch = queue.addBatch((0..<10).map { GetData(url: server.url("/bytes/\($0 + 1)")) }, session: testSession)
        let sizes = Recorder<[Int]>()
        let dependent = BlockOperation { sizes.append((try? batch.result?.get())?.map { (try? $0.get())?.count ?? -1 } ?? []) }
        dependent.addDependency(batch)
        OperationQueue().addOperations([dependent], waitUntilFinished: true)
        XCTAssertEqual(sizes.values.first, Array(1...10))
    }

    func testFailFastCancelsTheRestOnTheFirstFailure() {
        // Given 20 requests where one fails at once and the others take 2 s each
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 4
        let requests = (0..<20).map { index in
            GetData(url: server.url(index == 2 ? "/status/500" : "/delay/2000?i=\(index)"))
        }
        // When they run as a fail-fast batch
        let batch = queue.addBatch(requests, session: testSession, failFast: true)
        queue.waitUntilAllOperationsAreFinished()
        // Then the failure is reported and the others were cancelled rather than waited for
        let results = (try? batch.result?.get()) ?? []
        XCTAssertEqual(results.count, 20)
        XCTAssertEqual((results[2].failure as? RequestQueueError)?.statusCode, 500)
        let cancelled = results.filter { $0.failure?.isRequestCancellation ?? false }.count
        XCTAssertGreaterThanOrEqual(cancelled, 15, "\(results)")
    }

    func testWithoutFailFastEveryRequestRuns() {
        let queue = OperationQueue()
        let requests = (0..<6).map { GetData(url: server.url($0 == 1 ? "/status/500" : "/json?i=\($0)")) }
        let batch = queue.addBatch(requests, session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        let results = (try? batch.result?.get()) ?? []
        XCTAssertEqual(results.filter { $0.success != nil }.count, 5)
    }

    func testProgressStaysExactWhenCompletionsArriveOnManyThreads() {
        // Given batches whose requests are cancelled together, so completions run on many threads at once
        for _ in 0..<10 {
            let queue = OperationQueue()
            queue.isSuspended = true
            let batch = queue.addBatch((0..<300).map { GetData(url: server.url("/json?progress=\($0)")) }, session: testSession)
            // When the batch is cancelled
            batch.cancel()
            queue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
            // Then progress counted every request exactly once
            XCTAssertEqual(batch.progress.completedUnitCount, 300)
            XCTAssertEqual(batch.progress.fractionCompleted, 1.0, accuracy: 0.000_1)
        }
    }

    func testCancellingTheBatchCancelsEveryRequest() {
        // Given a batch of requests the server holds for 60 s, two in flight
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let before = server.requestCount(path: "/delay/60000")
        let batch = queue.addBatch((0..<10).map { GetData(url: server.url("/delay/60000?i=\($0)")) }, session: testSession)
        waitUntil("requests are in flight") { self.server.requestCount(path: "/delay/60000") > before }
        // When the batch is cancelled
        batch.cancel()
        // Then every request is cancelled: the queue empties without waiting for the server
        waitUntil("every operation finishes") { queue.operationCount == 0 }
        XCTAssertTrue(batch.result?.failure?.isRequestCancellation ?? false)
    }
}

final class SharedRequestTests: XCTestCase {
    private let server = TestServer.shared

    func testFiftyConcurrentIdenticalRequestsMakeOneNetworkCall() {
        // Given a slow endpoint and two callers' completion queues
        let path = TestServer.freshPath()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 64
        let key = DispatchSpecificKey<Int>()
        let callbackQueues = (0..<2).map { index -> DispatchQueue in
            let queue = DispatchQueue(label: "callbacks-\(index)")
            queue.setSpecific(key: key, value: index)
            return queue
        }
        let onOwnQueue = Recorder<Bool>()
        let names = Recorder<String>()
        // When 50 identical requests are added while the first is in flight
        for index in 0..<50 {
            let request = GetDecodable<ServedRecipe>(url: server.url("\(path)?delay=300"))
            queue.addSharedRequest(request, session: testSession, completionQueue: callbackQueues[index % 2]) { result in
                onOwnQueue.append(DispatchQueue.getSpecific(key: key) == index % 2)
                names.append((try? result.get().name) ?? "failed")
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        waitUntil("all completions") { names.count == 50 }
        // Then the server saw one request, and each caller got the result on its own queue
        XCTAssertEqual(server.requestCount(path: path), 1)
        XCTAssertEqual(names.values, Array(repeating: "Pancakes", count: 50))
        XCTAssertEqual(onOwnQueue.values.filter { $0 }.count, 50)
    }

    func testCancellingOneCallerLeavesTheSharedCallForTheOthers() {
        let path = TestServer.freshPath()
        let queue = OperationQueue()
        let request = GetData(url: server.url("\(path)?delay=300"))
        let first = queue.addSharedRequest(request, session: testSession)
        let second = queue.addSharedRequest(request, session: testSession)
        let third = queue.addSharedRequest(request, session: testSession)
        second.cancel()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(first.result?.success)
        XCTAssertTrue(second.result?.failure?.isRequestCancellation ?? false)
        XCTAssertNotNil(third.result?.success)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testCancellingEveryCallerCancelsTheNetworkCall() {
        // Given three callers sharing a call the server holds for 60 s
        let queue = OperationQueue()
        let request = GetData(url: server.url("/delay/60000?shared=\(UUID().uuidString)"))
        let callers = (0..<3).map { _ in queue.addSharedRequest(request, session: testSession) }
        waitUntil("the call is in flight") { queue.requestOperation(GetData.self, identifier: request.identifier)?.isExecuting == true }
        let call = queue.requestOperation(GetData.self, identifier: request.identifier)
        // When all of them cancel
        callers.forEach { $0.cancel() }
        // Then the network call is cancelled too, without waiting for the server
        waitUntil("everything finishes") { queue.operationCount == 0 }
        XCTAssertTrue(call?.result?.failure?.isRequestCancellation ?? false)
        XCTAssertTrue(callers.allSatisfy { $0.result?.failure?.isRequestCancellation ?? false })
    }

    func testARequestAfterTheSharedCallCompletedSendsAgain() {
        let path = TestServer.freshPath()
        let queue = OperationQueue()
        let request = GetData(url: server.url(path))
        queue.addSharedRequest(request, session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        queue.addSharedRequest(request, session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(server.requestCount(path: path), 2)
    }

    func testANewCallerDoesNotJoinACallSomeoneElseCancelled() {
        let path = TestServer.freshPath()
        for round in 0..<20 {
            // Given a shared call in flight
            let queue = OperationQueue()
            let request = GetData(url: server.url("\(path)?delay=100&round=\(round)"))
            let first = queue.addSharedRequest(request, session: testSession)
            // When the network call itself is cancelled by identifier, and a new caller arrives at once
            queue.cancelRequests(identifier: request.identifier)
            let next = queue.addSharedRequest(request, session: testSession)
            queue.waitUntilAllOperationsAreFinished()
            // Then the first caller got the call's cancellation, and the new one a new call of its own
            XCTAssertTrue(first.result?.failure?.isRequestCancellation ?? false)
            XCTAssertNotNil(next.result?.success, "round \(round): \(String(describing: next.result))")
        }
    }

    func testACallersOwnCancellationGoesThroughMapError() {
        struct Wrapped: Error { let underlying: Error }
        struct Wrapping: DataRequest {
            typealias Success = Data
            typealias Failure = Error
            let url: URL
            var identifier: String { url.absoluteString }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
            func processData(_ data: Data) throws -> Data { data }
            func mapError(_ error: Error) -> Error { Wrapped(underlying: error) }
        }
        let queue = OperationQueue()
        let request = Wrapping(url: server.url("/delay/300?wrapping"))
        let staying = queue.addSharedRequest(request, session: testSession)
        let leaving = queue.addSharedRequest(request, session: testSession)
        leaving.cancel()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue((leaving.result?.failure as? Wrapped)?.underlying.isRequestCancellation ?? false, "\(String(describing: leaving.result))")
        XCTAssertNotNil(staying.result?.success)
    }

    func testTypedFailuresPassThroughUnchanged() {
        enum APIError: Error, Equatable { case status(Int), other }
        struct Typed: DataRequest {
            typealias Success = Data
            typealias Failure = APIError
            let url: URL
            var identifier: String { url.absoluteString }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
                completion(.success(URLRequest(url: url)))
            }
            func processData(_ data: Data) throws -> Data { data }
            func mapError(_ error: Error) -> APIError {
                (error as? RequestQueueError)?.statusCode.map(APIError.status) ?? .other
            }
        }
        let queue = OperationQueue()
        let request = Typed(url: server.url("/status/404?typed-shared"))
        let callers = (0..<3).map { _ in queue.addSharedRequest(request, session: testSession) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(callers.map { $0.result?.failure }, Array(repeating: .status(404), count: 3))
    }
}

final class ByIdentifierTests: XCTestCase {
    private let server = TestServer.shared

    func testObserveCancelAndAskByIdentifier() {
        // Given a request in flight
        let queue = OperationQueue()
        let request = GetDecodable<ServedRecipe>(url: server.url("/json?delay=300&by-id"))
        queue.addRequest(request, session: testSession)
        // Then it can be found, typed, and observed by identifier
        XCTAssertFalse(queue.isRequestFinished(identifier: request.identifier))
        let observed = expectation(description: "observer")
        queue.requestOperation(GetDecodable<ServedRecipe>.self, identifier: request.identifier)?.whenFinished(on: OperationQueue()) { result in
            XCTAssertEqual(try? result.get().name, "Pancakes")
            observed.fulfill()
        }
        XCTAssertNil(queue.requestOperation(GetData.self, identifier: request.identifier), "typed lookup checks the type")
        wait(for: [observed], timeout: 10)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(queue.isRequestFinished(identifier: request.identifier))
        XCTAssertNil(queue.requestOperation(GetDecodable<ServedRecipe>.self, identifier: request.identifier))
    }

    func testChainedRequestsAreFoundByTheBuiltRequestsIdentifier() {
        // Given a request built from another's result, in flight
        let queue = OperationQueue()
        let first = queue.addRequest(GetData(url: server.url("/json?chain-lookup")), session: testSession)
        let built = GetData(url: server.url("/delay/60000?chain-lookup-built"))
        let second = queue.addRequest(after: first, session: testSession) { _ in built }
        waitUntil("the built request is registered") { !queue.isRequestFinished(identifier: built.identifier) }
        // Then it is found, typed, and cancelled by that identifier
        XCTAssertTrue(queue.requestOperation(GetData.self, identifier: built.identifier) === second)
        queue.cancelRequests(identifier: built.identifier)
        waitUntil("it finishes") { second.isFinished }
        XCTAssertTrue(second.result?.failure?.isRequestCancellation ?? false)
        XCTAssertTrue(queue.isRequestFinished(identifier: built.identifier))
    }

    func testCancelByIdentifier() {
        let queue = OperationQueue()
        let slow = GetData(url: server.url("/delay/60000?by-id-cancel"))
        let other = GetData(url: server.url("/json?by-id-other"))
        let slowOperation = queue.addRequest(slow, session: testSession)
        let otherOperation = queue.addRequest(other, session: testSession)
        queue.cancelRequests(identifier: slow.identifier)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(slowOperation.result?.failure?.isRequestCancellation ?? false)
        XCTAssertNotNil(otherOperation.result?.success)
        XCTAssertTrue(queue.isRequestFinished(identifier: slow.identifier))
    }

    func testManyRequestsSharingOneIdentifier() {
        // Given 5,000 queued requests with one identifier (removal must not be quadratic)
        let queue = OperationQueue()
        queue.isSuspended = true
        let request = GetData(url: server.url("/json?same-identifier"))
        let operations = (0..<5_000).map { _ in queue.addRequest(request, session: testSession) }
        XCTAssertTrue(queue.requestCurrentlyExecuting(request) === operations[0])
        // When the oldest half is cancelled, Then the oldest remaining one is found
        operations[..<2_500].forEach { $0.cancel() }
        XCTAssertTrue(queue.requestCurrentlyExecuting(request) === operations[2_500])
        queue.cancelRequests(identifier: request.identifier)
        XCTAssertTrue(queue.isRequestFinished(identifier: request.identifier))
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }
}
