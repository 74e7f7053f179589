#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import RequestsTesting
import XCTest

/// GET `url` as a download into `destination`.
private struct ResumedDownload: DownloadRequest {
    typealias Failure = Error
    let url: URL
    let destination: URL?
    var identifier: String { "resumed \(url.absoluteString)" }
    var downloadOptions: DownloadOptions { [.createIntermediateDirectories, .replaceExistingFile] }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// A download whose connection breaks and that resumes with a range, recorded from the loopback server, then replayed
/// with the server stopped: the same requests (the second with its `Range`), and the same file.
final class HARDownloadRoundTripTests: XCTestCase {
    func testAResumedDownloadReplaysToTheSameFile() throws {
        let length = 300_000
        let server = try LoopbackServer()
        let served = Recorder<String?>()
        server.resource("/big") { request in
            served.append(request.headers["range"])
            return LoopbackResource(length: length, cutAfter: served.values.count == 1 ? 120_000 : nil)
        }
        let har = FileManager.default.temporaryDirectory.appendingPathComponent("resumed-\(UUID().uuidString).har")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("resumed-\(UUID().uuidString)")
        defer { [har, folder].forEach { try? FileManager.default.removeItem(at: $0) } }

        /// Downloads `/big` on `session` with a retry after a lost connection; the file's bytes, and each attempt's
        /// request's `Range`.
        func download(on session: URLSession, monitors: [any RequestEventMonitor], name: String) throws -> (Data, [String?]) {
            let queue = OperationQueue()
            let ranges = RangeLog()
            queue.requestPolicies.monitors = monitors + [ranges]
            queue.requestPolicies.retryPolicy = RetryPolicy(maxAttempts: 3, baseDelay: 0.01, jitter: 0)
            let result = Recorder<Result<URL, Error>>()
            queue.addRequest(ResumedDownload(url: server.url("/big"), destination: folder.appendingPathComponent(name)), session: session) {
                result.append($0)
            }
            queue.waitUntilAllOperationsAreFinished()
            return (try Data(contentsOf: try XCTUnwrap(result.values.first).get()), ranges.values)
        }

        let recording = try HARReplay(file: har, mode: .all)
        let (live, liveRanges) = try download(on: recording.session, monitors: recording.monitors, name: "live.bin")
        try recording.finish()
        server.stop()
        XCTAssertEqual(live, LoopbackResource.content(length: length))
        XCTAssertEqual(served.values, [nil, "bytes=120000-"], "the connection broke once, and the download resumed")

        let replay = try HARReplay(file: har, mode: .replayOnly)
        let (replayed, replayedRanges) = try download(on: replay.session, monitors: [], name: "replayed.bin")
        XCTAssertEqual(replayed, live, "the same file from the recording")
        XCTAssertEqual(replayedRanges, liveRanges, "the same attempts: the whole, then the rest from where it broke")
        try replay.finish()
    }
}

/// Each attempt's `Range` header, in order.
private final class RangeLog: RequestEventMonitor, @unchecked Sendable {
    private let log = Recorder<String?>()
    var values: [String?] { log.values }
    func requestWillSend(_ attempt: RequestAttempt) {
        log.append(attempt.urlRequest.value(forHTTPHeaderField: "Range"))
    }
}
