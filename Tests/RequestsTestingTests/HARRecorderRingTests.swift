#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// ``HARRecorder`` keeps the exchanges and builds the entries when the file is written: the newest
/// `maximumEntries` stay in order across its ring, with or without bodies cut at the limit, and reading while
/// requests are recorded is safe.
final class HARRecorderRingTests: XCTestCase {
    private func urls(_ recorder: HARRecorder) throws -> [String] {
        let file = try XCTUnwrap(try JSONSerialization.jsonObject(with: recorder.harData()) as? [String: Any])
        let entries = try XCTUnwrap((file["log"] as? [String: Any])?["entries"] as? [[String: Any]])
        return entries.compactMap { ($0["request"] as? [String: Any])?["url"] as? String }.map { URL(string: $0)?.path ?? $0 }
    }

    func testTheNewestEntriesStayInOrderAcrossTheRing() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        for index in 0..<7 {
            // /n/4's body is cut at the limit: that exchange becomes an entry at once, the others when written.
            server.route("/n/\(index)") { _ in .text(index == 4 ? String(repeating: "x", count: 100) : "n\(index)") }
        }
        let recorder = HARRecorder(maximumBodyBytes: 10, maximumEntries: 3)
        let session = URLSession(configuration: .ephemeral)
        func fetch(_ indices: Range<Int>) {
            _ = outcomes(indices.map { FetchData(url: server.url("/n/\($0)")) }, session: session, monitors: [recorder])
        }

        fetch(0..<2)
        XCTAssertEqual(try urls(recorder), ["/n/0", "/n/1"])
        fetch(2..<7)
        XCTAssertEqual(recorder.entryCount, 3)
        XCTAssertEqual(try urls(recorder), ["/n/4", "/n/5", "/n/6"])
        let file = String(decoding: try recorder.harData(), as: UTF8.self)
        XCTAssertTrue(file.contains("truncated: 10 of 100 bytes kept"), file)

        recorder.removeAll()
        XCTAssertEqual(try urls(recorder), [])
        fetch(0..<2)
        XCTAssertEqual(try urls(recorder), ["/n/0", "/n/1"])
        fetch(2..<4)
        XCTAssertEqual(try urls(recorder), ["/n/1", "/n/2", "/n/3"])

        let none = HARRecorder(maximumEntries: 0)
        _ = outcomes([FetchData(url: server.url("/n/0"))], session: session, monitors: [none])
        XCTAssertEqual(none.entryCount, 0)
        XCTAssertEqual(try urls(none), [])
    }

    func testEntriesCanBeReadWhileRequestsAreRecorded() throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        server.route("/json") { _ in .json(#"{"ok":true}"#) }
        let recorder = HARRecorder(maximumEntries: 16)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        queue.requestPolicies.monitors = [recorder]
        let session = URLSession(configuration: .ephemeral)
        let group = DispatchGroup()
        for index in 0..<200 {
            group.enter()
            queue.addRequest(FetchData(url: server.url("/json?i=\(index)")), session: session) { _ in group.leave() }
        }
        let reading = DispatchQueue(label: "reading")
        let reads = Recorder<Int>()
        let stop = Recorder<Bool>()
        let reader = DispatchGroup()
        reading.async(group: reader) {
            while stop.values.isEmpty {
                if let data = try? recorder.harData() { reads.append(data.count) }
                _ = recorder.entryCount
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        stop.append(true)
        XCTAssertEqual(reader.wait(timeout: .now() + 30), .success)
        XCTAssertFalse(reads.values.isEmpty)
        XCTAssertEqual(recorder.entryCount, 16)
        XCTAssertEqual(try urls(recorder).count, 16)
    }
}

extension HARRecorderRingTests {
    func testTheTimestampIsWhatISO8601DateFormatterWrites() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        // 0.2 ms past a whole millisecond: a formatter that rounds and one that truncates write the same.
        var seconds = [0, 951_782_400.5, 1_798_761_599.999, 4_102_444_800.123, -86_400.25, 1_709_164_800.001]
        seconds += (0..<2000).map { _ in Double(Int64.random(in: -2_000_000_000_000...8_000_000_000_000)) / 1000 }
        let dates = seconds.map { Date(timeIntervalSince1970: $0 + 0.0002) }
        for date in dates {
            XCTAssertEqual(HARTimestamp.string(date), formatter.string(from: date), "\(date.timeIntervalSince1970)")
        }
    }
}
