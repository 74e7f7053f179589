#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

final class AsyncAwaitTests: XCTestCase {
    private var server: LoopbackServer { TestServer.shared }

    @MainActor
    func testResponseFromAMainActorSwift6Client() async throws {
        let queue = OperationQueue()
        let recipe = try await queue.response(for: GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession)
        XCTAssertEqual(recipe.name, "Pancakes")
    }

    func testFailureIsThrown() async {
        do {
            _ = try await OperationQueue().response(for: GetData(url: server.url("/status/503")), session: testSession)
            XCTFail("expected a throw")
        } catch {
            XCTAssertEqual((error as? RequestQueueError)?.statusCode, 503)
        }
    }

    func testItRunsAsAnOperationOfTheQueue() async throws {
        // Given a suspended queue
        let queue = OperationQueue()
        queue.isSuspended = true
        let path = TestServer.freshPath()
        let server = self.server
        let handle = UncheckedSendable(queue)
        let task = Task { try await handle.value.response(for: GetData(url: server.url(path)), session: testSession) }
        // Then nothing is sent while it is suspended
        try await Task.sleep(nanoseconds: 200_000_000)
        XCTAssertEqual(server.requestCount(path: path), 0)
        XCTAssertEqual(queue.operationCount, 1)
        // When it resumes, Then the request runs
        queue.isSuspended = false
        let body = try await task.value
        XCTAssertFalse(body.isEmpty)
    }

    func testItWaitsForDependencies() async throws {
        let gate = BlockOperation {}
        let finishedGate = Recorder<Bool>()
        let server = self.server
        let gateHandle = UncheckedSendable(gate)
        let task = Task { () -> Bool in
            let queue = OperationQueue()
            _ = try await queue.response(for: GetData(url: server.url("/json")), session: testSession, after: [gateHandle.value])
            return gateHandle.value.isFinished
        }
        try await Task.sleep(nanoseconds: 100_000_000)
        finishedGate.append(gate.isFinished)
        OperationQueue().addOperation(gate)
        let gateWasFinished = try await task.value
        XCTAssertEqual(finishedGate.values, [false])
        XCTAssertTrue(gateWasFinished)
    }

    func testTaskCancellationCancelsTheOperationPromptlyAndOnce() async throws {
        // Given a request the server holds for 60 s
        let queue = OperationQueue()
        let path = "/delay/60000"
        let before = server.requestCount(path: path)
        let server = self.server
        let handle = UncheckedSendable(queue)
        let task = Task { try await handle.value.response(for: GetData(url: server.url("\(path)?async")), session: testSession) }
        while server.requestCount(path: path) == before { try await Task.sleep(nanoseconds: 10_000_000) }
        // When the Task is cancelled
        task.cancel()
        // Then it throws the cancellation well before the server answers (a second resume would trap)
        do {
            _ = try await task.value
            XCTFail("expected a throw")
        } catch {
            XCTAssertTrue(error.isRequestCancellation, "\(error)")
        }
        while queue.operationCount > 0 { try await Task.sleep(nanoseconds: 10_000_000) }
    }

    func testAlreadyCancelledTaskDoesNotSend() async {
        // Given Tasks that are cancelled before they ask for a response
        let queue = OperationQueue()
        let path = TestServer.freshPath()
        let server = self.server
        let handle = UncheckedSendable(queue)
        for _ in 0..<200 {
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await handle.value.response(for: GetData(url: server.url(path)), session: testSession)
            }
            // Then each throws the cancellation
            let result = await task.result
            XCTAssertTrue(result.failure?.isRequestCancellation ?? false)
        }
        // And nothing reached the server
        XCTAssertEqual(server.requestCount(path: path), 0)
    }
}
