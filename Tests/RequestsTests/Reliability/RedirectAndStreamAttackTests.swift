#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// An outside attack on redirect limits (2026-11-26, issue #32), kept as regression tests: each test asserts the
/// safe behaviour; a comment over a test says what the attack achieved before the fix.
final class RedirectAndStreamAttackTests: XCTestCase {
    private let server = TestServer.shared

    private func chain(_ hops: Int, loop: Bool = false) -> (URL, () -> Int) {
        let base = "/attack-redirect/\(UUID().uuidString)"
        let paths = (0...hops).map { "\(base)/\($0)" }
        let counter = Recorder<Int>()
        for (index, path) in paths.enumerated() {
            if index == hops && !loop {
                server.route(path) { _ in
                    counter.append(1); return .json(#"{"name":"x","ingredients":[],"steps":[]}"#)
                }
            } else {
                let next = loop && index == hops ? paths[0] : paths[index + 1]
                server.route(path) { _ in
                    counter.append(1); return LoopbackResponse(status: index % 2 == 0 ? 307 : 301, headers: ["Location": next])
                }
            }
        }
        return (server.url(paths[0]), { counter.count })
    }

    private func runData(_ url: URL, _ policy: RedirectPolicy) -> Result<Data, Error>? {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(redirectPolicy: policy)
        let results = Recorder<Result<Data, Error>>()
        queue.addRequest(GetData(url: url), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "exactly one completion")
        return results.values.first
    }

    private func runStream(_ url: URL, _ policy: RedirectPolicy) -> Result<StreamSummary, Error>? {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(redirectPolicy: policy)
        let outcomes = Recorder<Result<StreamSummary, Error>>()
        let op = queue.addRequest(StreamOf(url: url, decoder: { ServerSentEventDecoder() }), session: testSession) { _ in
        } completion: {
            outcomes.append($0.mapError { $0 })
        }
        waitUntil(timeout: 20, "stream end") { op.isFinished }
        XCTAssertEqual(outcomes.count, 1)
        return outcomes.values.first
    }

    private func isTooMany(_ error: Error?, _ limit: Int) -> Bool {
        if case .tooManyRedirects(limit)? = error as? RedirectError { return true }
        return false
    }

    func testChainsAroundTheLimit() {
        for (hops, limit, succeeds) in [(16, 16, true), (17, 16, false), (21, 16, false), (30, 16, false), (0, 0, true), (1, 0, false)] {
            let (url, _) = chain(hops)
            let result = runData(url, RedirectPolicy.follow.maximumRedirects(limit))
            if succeeds {
                XCTAssertNotNil(result?.success, "\(hops)/\(limit)")
            } else {
                XCTAssertTrue(isTooMany(result?.failure, limit), "\(hops)/\(limit): \(String(describing: result))")
            }
        }
    }

    func testLoopsAndStreams() {
        let (loop, _) = chain(3, loop: true)
        XCTAssertTrue(isTooMany(runData(loop, .follow.maximumRedirects(16))?.failure, 16))
        XCTAssertTrue(isTooMany(runData(loop, .sameOrigin.maximumRedirects(16))?.failure, 16))
        let (long, _) = chain(30)
        let stream = runStream(long, .follow.maximumRedirects(16))
        XCTAssertTrue(isTooMany(stream?.failure, 16), "\(String(describing: stream))")
        let custom = RedirectPolicy.custom { next, _ in next }.maximumRedirects(16)
        XCTAssertTrue(isTooMany(runData(long, custom)?.failure, 16))
    }

    func testMisuseNothingSent() {
        for limit in [-1, Int.min, 17, Int.max] {
            let (url, count) = chain(2)
            let result = runData(url, .follow.maximumRedirects(limit))
            var policy = RedirectPolicy.refuse
            policy.maximumRedirects = limit
            let streamed = runStream(url, policy)
            XCTAssertNotNil(result?.failure as? RequestQueueError, "\(limit)")
            XCTAssertNotNil(streamed?.failure as? RequestQueueError, "\(limit)")
            XCTAssertEqual(count(), 0, "\(limit)")
        }
    }

    /// Under `.refuse` (follow none), a limit of 0 turned the documented "the 3xx is the response" into an error.
    func testRefuseWithLimitZero() {
        let (url, _) = chain(1)
        let result = runData(url, .refuse.maximumRedirects(0))
        XCTAssertFalse(isTooMany(result?.failure, 0), "\(String(describing: result))")
        XCTAssertTrue((300..<400).contains((result?.failure as? RequestQueueError)?.statusCode ?? 0), "\(String(describing: result))")
    }
}
