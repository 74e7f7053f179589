#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest
#if canImport(Glibc)
import Glibc
#endif

final class NoticeRecorder: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var recorded: [RequestNotice] = []
    func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice) { lock.withLock { recorded.append(notice) } }
    var notices: [RequestNotice] { lock.withLock { recorded } }
}

/// A download whose makeURLRequest fails while `fails` is set.
struct FailingDownload: DownloadRequest {
    let url: URL
    var fails = true
    var identifier: String { url.absoluteString + "-failing" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        if fails { completion(.failure(URLError(.badURL))) } else { completion(.success(URLRequest(url: url))) }
    }
}

/// A second outside attack (2026-11-26, issue #32) on resume claims, kept as regression tests: can a claim outlive its download, so that a later, legitimate resume of the same
/// state in the same process is refused ("another download is continuing the same partial file")?
final class ResumeClaimTests: ResumeTestCase {
    /// Resumes `state` and returns the refusals monitors saw, the result and the Range header the server saw last.
    private func resume<T: DownloadRequest>(_ request: T, _ state: ResumeState, seen: SeenRequests) -> ([RequestNotice], Result<URL, T.Failure>?, String?) {
        let queue = OperationQueue()
        let notices = NoticeRecorder()
        var p = RequestPolicies()
        p.monitors = [notices]
        queue.requestPolicies = p
        let results = Recorder<Result<URL, T.Failure>>()
        queue.addRequest(request, resumingFrom: state, session: testSession) { r, _ in results.append(r) }
        queue.waitUntilAllOperationsAreFinished()
        return (notices.notices, results.values.first, seen.all.last?.headers["range"])
    }

    func testACancelBeforeStartReleasesTheClaim() throws {
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        let queue = OperationQueue()
        queue.isSuspended = true
        let first = Recorder<ResumeState?>()
        let op = queue.addRequest(FileDownload(url: url, destination: root.appendingPathComponent("a.bin")), resumingFrom: state, session: testSession) {
            first.append($1)
        }
        op.cancel(producingResumeState: true)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        let again = first.values.first.flatMap { $0 } ?? state
        let (notices, result, range) = resume(FileDownload(url: url, destination: root.appendingPathComponent("b.bin")), again, seen: seen)
        XCTAssertTrue(notices.isEmpty, "refused: \(notices)")
        XCTAssertEqual(range, "bytes=300000-")
        XCTAssertNotNil(try? result?.get())
    }

    func testAFailureBeforeSendingReleasesTheClaim() throws {
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        let (_, failed, _) = resume(FailingDownload(url: url), state, seen: seen)
        XCTAssertNotNil(failed.flatMap { try? $0.get() } == nil ? true : nil)
        let (notices, result, range) = resume(FileDownload(url: url, destination: root.appendingPathComponent("c.bin")), state, seen: seen)
        XCTAssertTrue(notices.isEmpty, "refused: \(notices)")
        XCTAssertEqual(range, "bytes=300000-")
        XCTAssertNotNil(try? result?.get())
    }

    func testAnAsyncDownloadCancelledBeforeItStartsReleasesTheClaim() async throws {
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        let queue = OperationQueue()
        queue.isSuspended = true
        let request = FileDownload(url: url, destination: root.appendingPathComponent("d.bin"))
        let task = Task.detached { await queue.download(request, resumingFrom: state, session: testSession) }
        try await Task.sleep(nanoseconds: 100_000_000)
        task.cancel()
        queue.isSuspended = false
        let (_, kept) = await task.value
        let (notices, result, range) = resume(FileDownload(url: url, destination: root.appendingPathComponent("e.bin")), kept ?? state, seen: seen)
        XCTAssertTrue(notices.isEmpty, "refused: \(notices)")
        XCTAssertEqual(range, "bytes=300000-")
        XCTAssertNotNil(try? result?.get())
    }

    /// Resume across file systems: the destination on tmpfs (/dev/shm) while the partial file is under /tmp.
    func testAResumedDownloadLandsOnAnotherFileSystem() throws {
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        try XCTSkipUnless(FileManager.default.isWritableFile(atPath: "/dev/shm"), "no /dev/shm here")
        let destination = URL(fileURLWithPath: "/dev/shm/resume-claims-\(UUID().uuidString).bin")
        defer { unlink(destination.path) }
        let (notices, result, range) = resume(FileDownload(url: url, destination: destination), state, seen: seen)
        XCTAssertTrue(notices.isEmpty)
        XCTAssertEqual(range, "bytes=300000-")
        XCTAssertEqual(try result?.get(), destination)
        XCTAssertEqual(try Data(contentsOf: destination), LoopbackResource.content(length: resourceLength))
    }
}
