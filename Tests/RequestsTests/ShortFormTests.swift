#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// One-off endpoint requests and awaiting any request operation (TypicalApp.md).
final class ShortFormTests: XCTestCase {
    private var server: LoopbackServer { TestServer.shared }
    private var api: Endpoint { Endpoint(server.baseURL.absoluteString) }

    func testAnEndpointAndAResponseTypeMakeADecodableRequest() {
        // Given an endpoint and a type, and no request type declared
        let done = expectation(description: "completion")
        // When it is added
        let operation = OperationQueue().addRequest(api.get("json"), as: ServedRecipe.self, session: testSession) { result in
            // Then its body is decoded
            XCTAssertEqual(try? result.get().name, "Pancakes")
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        XCTAssertTrue(operation is DecodableRequestOperation<Endpoint.Decoding<ServedRecipe>>)
    }

    func testAOneOffRequestFailsOnABadStatusAndOnBadJSON() async {
        let queue = OperationQueue()
        do {
            _ = try await queue.response(for: api.get("status/404"), as: ServedRecipe.self, session: testSession)
            XCTFail("a 404 succeeded")
        } catch {
            XCTAssertEqual((error as? RequestQueueError)?.statusCode, 404)
        }
        do {
            _ = try await queue.response(for: api.get("json"), as: [Int].self, session: testSession)
            XCTFail("a recipe decoded as [Int]")
        } catch {
            XCTAssertTrue(error is DecodingError, "\(error)")
        }
    }

    func testNoContentSucceedsOnA204() async throws {
        let path = "/short-form/no-content"
        server.route(path) { _ in LoopbackResponse(status: 204) }
        try await OperationQueue().response(for: api.delete(path).noContent(), session: testSession)
        XCTAssertEqual(server.requestCount(path: path), 1)
    }

    func testADownloadGoesToTheDestinationGiven() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("short-form-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let destination = folder.appendingPathComponent("a/recipe.json")
        let operation = OperationQueue().addRequest(api.get("json").download(to: destination), session: testSession)
        let file = try await operation.value
        XCTAssertEqual(file, destination)
        XCTAssertEqual(try JSONDecoder().decode(ServedRecipe.self, from: Data(contentsOf: file)).name, "Pancakes")
    }

    func testValueIsTheResultForEveryWaiterAndAfterTheEnd() async throws {
        // Given an operation added with a completion handler
        let handled = Recorder<Bool>()
        let operation = OperationQueue().addRequest(api.get("json").decoding(ServedRecipe.self), session: testSession) { _ in
            handled.append(true)
        }
        // When two tasks await it, and then another after it has finished
        async let first = operation.value
        async let second = operation.value
        let (one, two) = try await (first, second)
        let late = try await operation.value
        // Then each gets the value, after the completion handler has returned
        XCTAssertEqual([one.name, two.name, late.name], ["Pancakes", "Pancakes", "Pancakes"])
        XCTAssertEqual(handled.values, [true])
    }

    func testValueThrowsTheFailure() async {
        let operation = OperationQueue().addRequest(GetData(url: server.url("/status/503")), session: testSession)
        do {
            _ = try await operation.value
            XCTFail("a 503 succeeded")
        } catch {
            XCTAssertEqual((error as? RequestQueueError)?.statusCode, 503)
        }
    }

    func testCancellingTheWaitingTaskEndsTheWaitAndNotTheOperation() async throws {
        // Given a request the server holds until told
        let path = "/short-form/held-\(UUID().uuidString)"
        let release = DispatchSemaphore(value: 0)
        server.route(path) { _ in
            release.wait()
            return .json(#"{"name":"Late","ingredients":[],"steps":[]}"#)
        }
        let operation = OperationQueue().addRequest(api.get(path).decoding(ServedRecipe.self), session: testSession)
        let handle = UncheckedSendable(operation)
        // When a task waiting for its value is cancelled
        let waiter = Task { try await handle.value.value }
        waiter.cancel()
        // Then the wait ends with CancellationError while the operation goes on
        do {
            _ = try await waiter.value
            XCTFail("the wait did not end")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        XCTAssertFalse(operation.isCancelled)
        release.signal()
        let recipe = try await operation.value
        XCTAssertEqual(recipe.name, "Late")
    }

    func testRetryableMethodsAreMethodsComparedWithoutCase() {
        let response = HTTPURLResponse(url: server.url("/"), statusCode: 503, httpVersion: nil, headerFields: nil)!
        let error = RequestQueueError.invalidStatusCode(statusCode: 503, response: response, body: Data())
        let policy = RetryPolicy(jitter: 0, retryingOnly: [.post, "patch"])
        XCTAssertEqual(policy.retryableMethods, [.post, .patch])
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "post", error: error, response: nil), 0.5)
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "PATCH", error: error, response: nil), 0.5)
        XCTAssertNil(policy.delay(afterAttempt: 1, method: "GET", error: error, response: nil))
        XCTAssertNil(RetryPolicy.default.delay(afterAttempt: 1, method: "POST", error: error, response: nil))
    }

    func testAlsoRetryingAddsMethodsToTheIdempotentOnes() {
        // The trap of issue 50: `retryableMethods: [.post]` stopped GET from being retried. `alsoRetrying:` adds.
        let response = HTTPURLResponse(url: server.url("/"), statusCode: 503, httpVersion: nil, headerFields: nil)!
        let error = RequestQueueError.invalidStatusCode(statusCode: 503, response: response, body: Data())
        let policy = RetryPolicy(jitter: 0, alsoRetrying: [.post])
        XCTAssertEqual(policy.retryableMethods, RetryPolicy.defaultRetryableMethods.union([.post]))
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "GET", error: error, response: nil), 0.5)
        XCTAssertEqual(policy.delay(afterAttempt: 1, method: "post", error: error, response: nil), 0.5)
        XCTAssertNil(policy.delay(afterAttempt: 1, method: "PATCH", error: error, response: nil))
        XCTAssertEqual(RetryPolicy().retryableMethods, RetryPolicy.defaultRetryableMethods)
        XCTAssertEqual(RetryPolicy(maxAttempts: 5).retryableMethods, RetryPolicy.defaultRetryableMethods)
        XCTAssertEqual(RetryPolicy(retryingOnly: [.get]).retryableMethods, [.get])
    }
}
