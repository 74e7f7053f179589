#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// The CI-sized soak (`requests-bench --soak` runs 100,000): 5,000 requests at concurrency 16 (a third with
/// credentials, so on the delegate session), 1 % of them to a server fault and 5 % cancelled at random moments. Every completion runs exactly once and every operation
/// finishes; CI runs it under ThreadSanitizer too. Memory is measured by the benchmark, not asserted here.
final class SoakTests: XCTestCase {
    func testFiveThousandRequestsWithFaultsAndCancellations() {
        let server = TestServer.shared
        let total = 5_000
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 16
        let calls = Recorder<Int>()
        let failures = Recorder<Error>()
        let faults = ["/fault/reset-before-headers", "/fault/close-mid-body", "/status/500", "/fault/invalid-chunked", "/fault/reset-mid-body"]
        var generator = SplitMix64(seed: 2026)
        var operations: [Operation] = []
        for index in 0..<total {
            let fault = index % 100 == 50 ? faults[(index / 100) % faults.count] : nil
            let record: @Sendable (Error?) -> Void = { error in
                calls.append(index)
                if let error { failures.append(error) }
            }
            switch index % 3 {
            case 0:
                operations.append(queue.addRequest(GetDecodable<ServedRecipe>(url: server.url(fault ?? "/json?i=\(index)")), session: testSession) { record($0.failure) })
            case 1:
                // With credentials, so that the delegate-session path is soaked too.
                var request = URLRequest(url: server.url(fault ?? "/bytes/512?i=\(index)"))
                request.setValue("Bearer soak", forHTTPHeaderField: "Authorization")
                operations.append(queue.addRequest(PrebuiltRequest(urlRequest: request), session: testSession) { record($0.failure) })
            default:
                operations.append(queue.addRequest(SendNoContent(url: server.url(fault ?? "/status/204?i=\(index)")), session: testSession) { record($0.failure) })
            }
        }
        for operation in operations where generator.next() % 100 < 5 {
            let handle = UncheckedSendable(operation)
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(generator.next() % 2_000))) { handle.value.cancel() }
        }
        queue.waitUntilAllOperationsAreFinished()
        waitUntil("every completion") { calls.count >= total }
        // Then each completion ran once, every operation finished, and only faults and cancellations failed
        let counts = Dictionary(grouping: calls.values, by: { $0 }).mapValues(\.count)
        XCTAssertEqual(counts.count, total, "never called: \(total - counts.count)")
        XCTAssertEqual(counts.values.filter { $0 > 1 }.count, 0, "called twice")
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
        let cancelled = failures.values.filter(\.isRequestCancellation).count
        XCTAssertLessThanOrEqual(failures.count - cancelled, total / 100 + 1, "only the faults fail otherwise")
        // And nothing keeps the operations alive: a sample of 100 is released once the test lets go of them
        let sample = stride(from: 0, to: total, by: total / 100).map { Weak(operations[$0]) }
        operations.removeAll()
        waitUntil("the sampled operations are released") { sample.allSatisfy { $0.object == nil } }
        print("soak (CI): \(total) requests, \(cancelled) cancelled, \(failures.count - cancelled) failed by a server fault")
    }
}
