#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTesting
import XCTest

/// Stubbed responses go through the library's real validation: status codes, no-content, decoding,
/// transport errors and cancellation.
final class ValidationThroughStubsTests: XCTestCase {
    private struct Item: Decodable, Equatable { let id: Int }

    func testA404FailsWithInvalidStatusCodeCarryingTheBody() {
        // Given a 404 with an error payload
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/items/9", .json(#"{"error":"not found"}"#, status: 404))
        // When a decodable request asks for it
        let results = run(FetchDecodable<Item>(url: api.appendingPathComponent("items/9")), on: session)
        // Then it fails with invalidStatusCode, carrying the status and the body
        XCTAssertEqual(results.count, 1)
        guard case let .invalidStatusCode(status, response, body)? = results.first?.failure as? RequestQueueError else {
            return XCTFail("expected invalidStatusCode, got \(results)")
        }
        XCTAssertEqual(status, 404)
        XCTAssertEqual(response.statusCode, 404)
        XCTAssertEqual(body, Data(#"{"error":"not found"}"#.utf8))
    }

    func testTheResponseCacheWorksWithStubs() {
        // Given a stubbed catalogue with an ETag, revalidated every time (no-cache), answered 304 the second time
        let (session, stubs) = URLSession.stubbed()
        var fresh = StubResponse.json(#"{"id":1}"#)
        fresh.headers["ETag"] = #""v1""#
        fresh.headers["Cache-Control"] = "no-cache"
        var notModified = StubResponse.status(304)
        notModified.headers["ETag"] = #""v1""#
        stubs.stub(path: "/catalogue", fresh, notModified)
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(responseCache: ResponseCache(directory: nil))
        let request = FetchDecodable<Item>(url: api.appendingPathComponent("catalogue"))

        // When it is fetched twice
        let results = Recorder<Result<Item, Error>>()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()

        // Then the second carried the validator, and the 304 was answered with the stored body
        XCTAssertEqual(results.values.map { try? $0.get() }, [Item(id: 1), Item(id: 1)])
        XCTAssertEqual(stubs.requests.last?.headers.first { $0.key.lowercased() == "if-none-match" }?.value, #""v1""#)
    }

    private struct Events: StreamRequest {
        let url: URL
        var identifier: String { url.absoluteString }
        func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
        func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
            completion(.success(URLRequest(url: url)))
        }
    }

    func testAStubbedEventStreamIsDecodedAndAStubbedErrorStatusIsNot() async throws {
        // Given an event stream and a 503 stubbed
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/events", StubResponse(headers: ["Content-Type": "text/event-stream"], body: Data("id: 1\ndata: a\n\ndata: b\n\n".utf8)))
        stubs.stub(path: "/down", .json(#"{"error":"down"}"#, status: 503))
        // When each is read as a stream
        var events: [ServerSentEvent] = []
        for try await event in OperationQueue().stream(for: Events(url: api.appendingPathComponent("events")), session: session) {
            events.append(event)
        }
        // Then the events arrive, and the 503 fails with its body before any event
        XCTAssertEqual(events, [ServerSentEvent(data: "a", id: "1"), ServerSentEvent(data: "b", id: "1")])
        do {
            for try await _ in OperationQueue().stream(for: Events(url: api.appendingPathComponent("down")), session: session) {
                XCTFail("an event from a 503")
            }
            XCTFail("no failure")
        } catch {
            XCTAssertEqual((error as? RequestQueueError)?.statusCode, 503)
            XCTAssertEqual((error as? RequestQueueError)?.responseBody, Data(#"{"error":"down"}"#.utf8))
        }
    }

    private struct Fetch: DownloadRequest {
        let url: URL
        var identifier: String { url.absoluteString }
        func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
            completion(.success(URLRequest(url: url)))
        }
    }

    func testAStubbedDownloadIsWrittenToItsFile() async throws {
        // Given a stubbed file (a DownloadRequest runs as a data task, which a URLProtocol can answer)
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/file.bin", StubResponse(body: Data("file contents".utf8)))
        // When it is downloaded
        let file = try await OperationQueue().response(for: Fetch(url: api.appendingPathComponent("file.bin")), session: session)
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        // Then the file holds the stub's body
        XCTAssertEqual(try Data(contentsOf: file), Data("file contents".utf8))
    }

    func testA204SatisfiesANoContentRequest() {
        // Given a 204
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("DELETE", path: "/items/1", .status(204))
        // When a no-content request is sent
        let results = run(Delete(url: api.appendingPathComponent("items/1")), on: session)
        // Then it succeeds
        XCTAssertEqual(results.count, 1)
        XCTAssertNotNil(results.first?.success)
    }

    func testABodyFailsANoContentRequest() {
        // Given a 200 with a body
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("DELETE", path: "/items/1", .json("{}"))
        // When a no-content request is sent
        let results = run(Delete(url: api.appendingPathComponent("items/1")), on: session)
        // Then it fails with nonEmptyData
        guard case .nonEmptyData? = results.first?.failure as? RequestQueueError else {
            return XCTFail("expected nonEmptyData, got \(results)")
        }
    }

    func testInvalidJSONFailsWithADecodingError() {
        // Given a body that is not the expected JSON
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/items/1", .json(#"{"id":"not a number"}"#))
        // When a decodable request asks for it
        let results = run(FetchDecodable<Item>(url: api.appendingPathComponent("items/1")), on: session)
        // Then it fails with the DecodingError
        XCTAssertEqual(results.count, 1)
        XCTAssertTrue(results.first?.failure is DecodingError, "\(results)")
    }

    func testValidJSONDecodes() {
        // Given the expected JSON
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/items/1", .json(#"{"id":1}"#))
        // When a decodable request asks for it
        let results = run(FetchDecodable<Item>(url: api.appendingPathComponent("items/1")), on: session)
        // Then it decodes
        XCTAssertEqual(results.first?.success, Item(id: 1))
    }

    func testAURLErrorPassesThroughUnchanged() {
        // Given a stub that times out
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/items/1", .failure(URLError(.timedOut)))
        // When a request asks for it
        let results = run(FetchData(url: api.appendingPathComponent("items/1")), on: session)
        // Then the request fails with that URLError
        XCTAssertEqual(results.count, 1)
        XCTAssertEqual((results.first?.failure as? URLError)?.code, .timedOut)
    }

    func testCancellingDuringAStubDelayCompletesWithCancelledExactlyOnce() {
        // Given a request whose stubbed response is delayed by 0.3 s, and that has reached the stub
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/slow", .text("late").delayed(by: 0.3))
        let results = Recorder<Result<Data, Error>>()
        let queue = OperationQueue()
        let operation = queue.addRequest(FetchData(url: api.appendingPathComponent("slow")), session: session) {
            results.append($0)
        }
        waitUntil("the stub received the request") { stubs.requests.count == 1 }
        // When it is cancelled during the delay, and we wait until the delay is well over
        let start = Date()
        operation.cancel()
        queue.waitUntilAllOperationsAreFinished()
        let waited = Date().timeIntervalSince(start)
        RunLoop.current.run(until: Date().addingTimeInterval(0.6))
        // Then it completed at once with RequestQueueError.cancelled, exactly once
        XCTAssertLessThan(waited, 0.3)
        XCTAssertEqual(results.values.count, 1)
        guard case .cancelled? = results.values.first?.failure as? RequestQueueError else {
            return XCTFail("expected cancelled, got \(results.values)")
        }
    }

    func testAnUnmatchedRequestFailsTheRequestWithStubError() {
        // Given no stubs
        let (session, _) = URLSession.stubbed()
        // When a request is sent
        let results = run(FetchData(url: api.appendingPathComponent("missing")), on: session)
        // Then it fails with the StubError, at once
        XCTAssertEqual(results.count, 1)
        XCTAssertTrue(results.first?.failure is StubError, "\(results)")
    }
}

extension Result {
    var failure: Failure? {
        if case let .failure(error) = self { return error }
        return nil
    }

    var success: Success? {
        if case let .success(value) = self { return value }
        return nil
    }
}
