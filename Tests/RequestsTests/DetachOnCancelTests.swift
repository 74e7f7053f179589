#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// On Linux an unfinished dependency keeps an unretained pointer to each operation that depends on it, and
/// `Operation.cancel()` lets a waiting operation finish (and be freed) first: without detaching on cancel,
/// the dependency's finish touches freed memory and the process crashes. Each test cancels and drops a
/// dependent while its dependency still runs, reuses the freed memory, then lets the dependency finish.
final class DetachOnCancelTests: XCTestCase {
    private let server = TestServer.shared

    /// Reuses freed memory, so a dangling pointer points at something else.
    private func churnMemory() {
        var objects: [NSObject] = []
        for _ in 0..<20_000 { objects.append(NSObject()) }
        XCTAssertEqual(objects.count, 20_000)
    }

    func testCancelledRequestWaitingOnADependency() {
        let queue = OperationQueue()
        let slow = queue.addRequest(GetData(url: server.url("/bytes/8?delay=300&detach=plain")), session: testSession)
        let results = Recorder<Result<Data, Error>>()
        do {
            let waiting = DataRequestOperation(request: GetData(url: server.url("/bytes/8")), session: testSession) { results.append($0) }
            waiting.addDependency(slow)
            queue.addOperation(waiting)
            waiting.cancel()
            XCTAssertTrue(waiting.dependencies.isEmpty, "a cancelled operation detaches from unfinished dependencies")
        }
        usleep(100_000)
        churnMemory()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(slow.result?.success)
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
    }

    func testCancelledSharedCaller() {
        let queue = OperationQueue()
        let request = GetData(url: server.url("/bytes/8?delay=300&detach=shared"))
        let staying = Recorder<Result<Data, Error>>()
        do {
            let leaving = queue.addSharedRequest(request, session: testSession)
            queue.addSharedRequest(request, session: testSession) { staying.append($0) }
            leaving.cancel()
        }
        usleep(100_000)
        churnMemory()
        queue.waitUntilAllOperationsAreFinished()
        waitUntil("the staying caller completes") { staying.count == 1 }
        XCTAssertNotNil(staying.values.first?.success)
    }

    func testCancelledChainBranch() {
        let queue = OperationQueue()
        let first = queue.addRequest(GetData(url: server.url("/bytes/8?delay=300&detach=chain")), session: testSession)
        let kept = queue.addRequest(after: first, session: testSession) { _ in GetData(url: self.server.url("/bytes/4")) }
        do {
            let branch = queue.addRequest(after: first, session: testSession) { _ in GetData(url: self.server.url("/bytes/4")) }
            branch.cancel()
        }
        usleep(100_000)
        churnMemory()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(try kept.result?.get().count, 4)
    }

    func testCancelledUIStep() {
        let queue = OperationQueue()
        let request = queue.addRequest(GetData(url: server.url("/bytes/8?delay=300&detach=step")), session: testSession)
        let ran = Recorder<Bool>()
        do {
            let step = request.whenFinished(on: queue) { _ in ran.append(true) }
            step.cancel()
        }
        usleep(100_000)
        churnMemory()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.count, 0, "a cancelled step does not run")
        XCTAssertNotNil(request.result?.success)
    }

    func testCancelledAsyncRequestWaitingOnADependency() async {
        let queue = OperationQueue()
        let server = self.server
        let slow = queue.addRequest(GetData(url: server.url("/bytes/8?delay=300&detach=async")), session: testSession)
        let handle = UncheckedSendable(queue)
        let task = Task { try await handle.value.response(for: GetData(url: server.url("/bytes/8")), session: testSession, after: [slow]) }
        try? await Task.sleep(nanoseconds: 50_000_000)
        task.cancel()
        let result = await task.result
        try? await Task.sleep(nanoseconds: 100_000_000)
        churnMemory()
        while queue.operationCount > 0 { try? await Task.sleep(nanoseconds: 10_000_000) }
        XCTAssertTrue(result.failure?.isRequestCancellation ?? false)
        XCTAssertNotNil(slow.result?.success)
    }
}
