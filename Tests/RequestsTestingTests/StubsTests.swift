#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import RequestsTesting
import XCTest

/// The stub API at the URLSession level: matching, sequences, delays, errors, recording, scoping.
final class StubsTests: XCTestCase {
    func testMatchesByMethodAndPath() {
        // Given different stubs for GET and DELETE of one path, and one for any method of another
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("GET", path: "/items/1", .text("item"))
        stubs.stub("DELETE", path: "/items/1", .status(204))
        stubs.stub(path: "/other", .text("other"))
        // When each is requested
        let get = fetch("/items/1", on: session)
        let delete = fetch("/items/1", method: "DELETE", on: session)
        let other = fetch("/other", method: "PUT", on: session)
        // Then each gets its own response
        XCTAssertEqual(get?.status, 200)
        XCTAssertEqual(get?.text, "item")
        XCTAssertEqual(get?.response?.value(forHTTPHeaderField: "Content-Type"), "text/plain; charset=utf-8")
        XCTAssertEqual(delete?.status, 204)
        XCTAssertEqual(delete?.data, Data())
        XCTAssertEqual(other?.text, "other")
    }

    func testMatchesAnExactURLIncludingItsQuery() {
        // Given a stub for one exact URL
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(url: URL(string: "https://api.example.com/search?q=a")!, .text("a"))
        // When that URL and the same path with another query are requested
        let exact = fetch(URLRequest(url: URL(string: "https://api.example.com/search?q=a")!), on: session)
        let otherQuery = fetch(URLRequest(url: URL(string: "https://api.example.com/search?q=b")!), on: session)
        // Then only the exact URL matches
        XCTAssertEqual(exact?.text, "a")
        XCTAssertTrue(otherQuery?.error is StubError, "\(String(describing: otherQuery?.error))")
    }

    func testMatchesByPredicateAndTheNewestStubWins() {
        // Given a general stub, then a newer one for requests without an Authorization header
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/me", .json(#"{"name":"Ada"}"#))
        stubs.stub(where: { $0.value(forHTTPHeaderField: "Authorization") == nil }, .status(401))
        // When requested with and without the header
        var authorized = URLRequest(url: api.appendingPathComponent("me"))
        authorized.setValue("Bearer t", forHTTPHeaderField: "Authorization")
        let withToken = fetch(authorized, on: session)
        let withoutToken = fetch("/me", on: session)
        // Then the newer, more specific stub answers when it matches, and the older one otherwise
        XCTAssertEqual(withToken?.status, 200)
        XCTAssertEqual(withoutToken?.status, 401)
    }

    func testASequenceIsAnsweredInOrderAndItsLastResponseRepeats() {
        // Given a flaky endpoint: 503, then 500, then 200
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/flaky", .status(503), .status(500), .text("ok"))
        // When it is called four times
        let statuses = (0..<4).map { _ in fetch("/flaky", on: session)?.status }
        // Then the responses come in order and the last one repeats
        XCTAssertEqual(statuses, [503, 500, 200, 200])
    }

    func testAnUnmatchedRequestFailsWithAClearError() {
        // Given stubs that do not cover the request
        let (session, stubs) = URLSession.stubbed()
        stubs.stub("GET", path: "/known", .text("known"))
        // When another URL is requested
        let delivery = fetch("/unknown", method: "POST", on: session)
        // Then it fails at once with a StubError naming the method, the URL and the stubs there are
        let message = (delivery?.error as? StubError)?.message ?? ""
        XCTAssertTrue(message.contains("No stub matched POST https://api.example.com/unknown"), message)
        XCTAssertTrue(message.contains("GET /known"), message)
        XCTAssertNil(delivery?.response)
        XCTAssertEqual(stubs.unmatchedRequests.map(\.url.path), ["/unknown"])
    }

    func testErrorsAreDeliveredInsteadOfAResponse() {
        // Given stubs that fail with a timeout, no connection and an error of our own
        struct Custom: Error, Equatable {}
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/slow", .failure(URLError(.timedOut)))
        stubs.stub(path: "/offline", .failure(URLError(.notConnectedToInternet)))
        stubs.stub(path: "/custom", .failure(Custom()))
        // When they are requested
        let slow = fetch("/slow", on: session)
        let offline = fetch("/offline", on: session)
        let custom = fetch("/custom", on: session)
        // Then the task fails with those errors
        XCTAssertEqual((slow?.error as? URLError)?.code, .timedOut)
        XCTAssertEqual((offline?.error as? URLError)?.code, .notConnectedToInternet)
        XCTAssertEqual(custom?.error as? Custom, Custom())
        XCTAssertNil(slow?.response)
    }

    func testADelayedResponseArrivesAfterItsDelay() {
        // Given a response delayed by 0.3 s
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/slow", .text("late").delayed(by: 0.3))
        // When it is requested
        let start = Date()
        let delivery = fetch("/slow", on: session)
        // Then it arrives, not before the delay
        XCTAssertNil(delivery?.error, "\(String(describing: delivery?.error))")
        XCTAssertEqual(delivery?.text, "late")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 0.3)
    }

    func testCancellingDuringADelayDeliversOnlyTheCancellation() {
        // Given a response delayed by 0.3 s, and a task that has reached the stub
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/slow", .text("late").delayed(by: 0.3))
        let deliveries = Recorder<Delivery>()
        let task = session.dataTask(with: api.appendingPathComponent("slow")) { data, response, error in
            deliveries.append(Delivery(data: data, response: response as? HTTPURLResponse, error: error))
        }
        task.resume()
        waitUntil("the stub received the request") { stubs.requests.count == 1 }
        // When the task is cancelled during the delay, and we wait until the delay is well over
        task.cancel()
        RunLoop.current.run(until: Date().addingTimeInterval(0.6))
        // Then the completion ran exactly once, with the cancellation, and the stub delivered nothing after it
        XCTAssertEqual(deliveries.values.count, 1)
        XCTAssertEqual((deliveries.values.first?.error as? URLError)?.code, .cancelled)
        XCTAssertNil(deliveries.values.first?.response)
    }

    func testCancellationRacingDelayedAnswersCompletesEveryTaskOnce() {
        // Given answers delayed by 1 ms, immediate ones and errors
        // (a delayed answer delivered from the timer's thread crashed Foundation in 6 runs of 12 of this test)
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/delayed", .text("x").delayed(by: 0.001))
        stubs.stub(path: "/now", .text("x"))
        stubs.stub(path: "/error", .failure(URLError(.timedOut)))
        let completed = Recorder<Int>()
        let group = DispatchGroup()
        // When 1,500 tasks are each cancelled after a random 0–2 ms
        for i in 0..<1_500 {
            group.enter()
            let task = session.dataTask(with: api.appendingPathComponent(["delayed", "now", "error"][i % 3])) { data, _, error in
                if error == nil { XCTAssertEqual(data, Data("x".utf8)) }
                completed.append(i)
                group.leave()
            }
            task.resume()
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0...2_000))) { task.cancel() }
        }
        // Then every task completes exactly once, and nothing arrives later
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        Thread.sleep(forTimeInterval: 0.1)
        XCTAssertEqual(completed.values.count, 1_500)
        XCTAssertEqual(Set(completed.values).count, 1_500)
    }

    func testRequestsAreRecordedAndResetForgetsThem() {
        // Given a session with an additional header, and a stub
        let stubs = Stubs()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["X-App": "tests"]
        let session = stubs.makeSession(configuration: configuration)
        stubs.stub(path: "/a", .text("a"))
        // When two requests are sent, one with its own header
        var request = URLRequest(url: api.appendingPathComponent("a"))
        request.httpMethod = "PUT"
        request.setValue("yes", forHTTPHeaderField: "X-Custom")
        _ = fetch(request, on: session)
        _ = fetch("/b", on: session)
        // Then both are recorded with method, URL, the request's headers and whether they matched
        let recorded = stubs.requests
        XCTAssertEqual(recorded.map(\.method), ["PUT", "GET"])
        XCTAssertEqual(recorded.map(\.url.absoluteString), ["https://api.example.com/a", "https://api.example.com/b"])
        XCTAssertEqual(recorded.map(\.wasMatched), [true, false])
        XCTAssertEqual(recorded.first?.header("x-custom"), "yes")
        #if canImport(FoundationNetworking)
        // On Linux the session's additional headers are added below URLProtocol, so a stub never sees them
        XCTAssertNil(recorded.first?.header("X-App"))
        #endif
        // And clearRequests forgets the record but keeps the stubs, reset forgets both
        stubs.clearRequests()
        XCTAssertEqual(stubs.requests, [])
        XCTAssertEqual(fetch("/a", on: session)?.text, "a")
        stubs.reset()
        XCTAssertEqual(stubs.requests, [])
        XCTAssertTrue(fetch("/a", on: session)?.error is StubError)
    }

    func testSessionsDoNotSeeEachOthersStubs() {
        // Given two stubbed sessions with different answers for the same URL, and a third without stubs
        let (first, firstStubs) = URLSession.stubbed()
        let (second, secondStubs) = URLSession.stubbed()
        let (third, thirdStubs) = URLSession.stubbed()
        firstStubs.stub(path: "/who", .text("first"))
        secondStubs.stub(path: "/who", .text("second"))
        // When all of them are used concurrently
        let answers = Recorder<(Int, String)>()
        DispatchQueue.concurrentPerform(iterations: 30) { i in
            let session = [first, second, third][i % 3]
            let done = DispatchSemaphore(value: 0)
            session.dataTask(with: api.appendingPathComponent("who")) { data, _, error in
                answers.append((i % 3, error == nil ? String(decoding: data ?? Data(), as: UTF8.self) : "error"))
                done.signal()
            }.resume()
            done.wait()
        }
        // Then each session got only its own stubs' answers, and each Stubs recorded only its own requests
        for (index, answer) in answers.values {
            XCTAssertEqual(answer, ["first", "second", "error"][index])
        }
        XCTAssertEqual(answers.values.count, 30)
        XCTAssertEqual([firstStubs, secondStubs, thirdStubs].map(\.requests.count), [10, 10, 10])
    }

    func testTheAsyncAPIIsStubbedToo() async throws {
        // Given a stub
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/async", .json("[1,2]", status: 201))
        // When it is requested with data(for:)
        let (data, response) = try await session.data(for: URLRequest(url: api.appendingPathComponent("async")))
        // Then the stubbed response arrives
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 201)
        XCTAssertEqual(data, Data("[1,2]".utf8))
    }

    func testAReleasedStubsFailsItsRequestsWithoutCrashing() {
        // Given a session whose Stubs has been released
        var stubs: Stubs? = Stubs()
        let session = stubs?.makeSession(configuration: .ephemeral)
        // A weak capture, not a weak constant (Swift 6.2): the package builds with the 6.0 toolchain.
        let released = { [weak stubs] in stubs }
        stubs = nil
        XCTAssertNil(released())
        // When the session is used
        guard let session else { return XCTFail("no session") }
        let done = expectation(description: "completed")
        let errors = Recorder<Error?>()
        session.dataTask(with: api) { _, _, error in
            errors.append(error)
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 10)
        // Then the request fails with a StubError that says so
        let message = ((errors.values.first ?? nil) as? StubError)?.message ?? ""
        XCTAssertTrue(message.contains("released"), message)
    }

    func testConcurrentRequestsAreAllRecordedAndEachSequenceStepIsTakenOnce() {
        // Given a sequence whose first response differs from the rest
        let (session, stubs) = URLSession.stubbed()
        stubs.stub(path: "/n", .text("first"), .text("rest"))
        // When 100 requests run concurrently
        let answers = Recorder<String>()
        DispatchQueue.concurrentPerform(iterations: 100) { _ in
            let done = DispatchSemaphore(value: 0)
            session.dataTask(with: api.appendingPathComponent("n")) { data, _, _ in
                answers.append(String(decoding: data ?? Data(), as: UTF8.self))
                done.signal()
            }.resume()
            done.wait()
        }
        // Then exactly one got the first step, and all were recorded
        XCTAssertEqual(answers.values.filter { $0 == "first" }.count, 1)
        XCTAssertEqual(answers.values.filter { $0 == "rest" }.count, 99)
        XCTAssertEqual(stubs.requests.count, 100)
    }
}

extension XCTestCase {
    /// Runs the current run loop until `condition` holds; fails after `timeout`.
    func waitUntil(_ description: String, timeout: TimeInterval = 10, file: StaticString = #filePath, line: UInt = #line, _ condition: () -> Bool) {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition() {
            guard Date() < deadline else { return XCTFail("timed out waiting until \(description)", file: file, line: line) }
            RunLoop.current.run(until: Date().addingTimeInterval(0.01))
        }
    }
}
