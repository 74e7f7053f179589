#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// What a ``HARRecorder`` records of a download that is resumed: the attempt that broke, with the bytes it kept and its
/// error, then the one that asked for the rest (`Range`) and got a `206`, with that response's own bytes.
final class DownloadHARTests: XCTestCase {
    func testAResumedDownloadRecordsItsRangeAndThe206() throws {
        let path = "/resumable/har-\(UUID().uuidString)"
        let seen = SeenRequests()
        TestServer.shared.resource(path) { request in
            seen.append(request)
            return LoopbackResource(length: resourceLength, cutAfter: seen.all.count == 1 ? 400_000 : nil)
        }
        let queue = OperationQueue()
        let recorder = HARRecorder(maximumBodyBytes: 100)
        queue.requestPolicies.monitors = [recorder]
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("download-har-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let results = Recorder<Result<URL, Error>>()
        let request = FileDownload(url: TestServer.shared.url(path), destination: folder.appendingPathComponent("file.bin"), ownRetryPolicy: quickRetry)
        queue.addRequest(request, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(try results.values.first?.get())
        XCTAssertEqual(seen.ranges, [nil, "bytes=400000-"])

        let file = try XCTUnwrap(try JSONSerialization.jsonObject(with: recorder.harData()) as? [String: Any])
        let entries = try XCTUnwrap((file["log"] as? [String: Any])?["entries"] as? [[String: Any]])
        XCTAssertEqual(entries.count, 2)
        guard entries.count == 2 else { return }
        let requests = entries.compactMap { $0["request"] as? [String: Any] }
        let ranges = requests.map { request in
            ((request["headers"] as? [[String: Any]]) ?? []).first { ($0["name"] as? String)?.lowercased() == "range" }?["value"] as? String
        }
        XCTAssertEqual(ranges, [nil, "bytes=400000-"])
        let responses = entries.compactMap { $0["response"] as? [String: Any] }
        XCTAssertEqual(responses.map { $0["status"] as? Int }, [200, 206])
        let contents = responses.compactMap { $0["content"] as? [String: Any] }
        // Each response's own bytes: the 206's start at 400,000, not at the start of the file it was appended to.
        let resource = LoopbackResource.content(length: resourceLength)
        XCTAssertEqual(contents[1]["text"] as? String, resource.subdata(in: 400_000..<400_100).base64EncodedString())
        XCTAssertEqual(contents[1]["size"] as? Int, resourceLength - 400_000)
        // The attempt that broke: the bytes it kept on disk to resume from (the first 100 of them), and its error.
        XCTAssertEqual(contents[0]["text"] as? String, resource.subdata(in: 0..<100).base64EncodedString())
        XCTAssertEqual(contents[0]["size"] as? Int, 400_000)
        XCTAssertNotNil(responses[0]["_error"] as? String)
    }
}
