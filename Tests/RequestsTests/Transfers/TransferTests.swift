#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// GET `url` into a file.
struct Download: DownloadRequest {
    let url: URL
    var destination: URL?
    var downloadOptions: DownloadOptions = .createIntermediateDirectories
    var ownRetryPolicy: RetryPolicy?
    /// Released with the request, for lifetime checks.
    var tracker: Sentinel?
    var identifier: String { url.absoluteString }
    var retryPolicy: RetryPolicy? { ownRetryPolicy }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// POST `uploadBody` to `url`; the response is the sink's JSON report.
struct Upload: UploadRequest {
    typealias Success = Data
    let url: URL
    let uploadBody: UploadBody
    /// Released with the request, for lifetime checks.
    var tracker: Sentinel?
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// What the sink reports.
struct SinkReport: Decodable, Equatable {
    let bytes: Int
    let crc32: String
}

/// The temporary files a download can leave: Foundation's `<UUID>.tmp` and Requests' staged files (in the
/// temporary directory, and in Requests' private folder there, where its partial files are).
func transferLeftovers() -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())) ?? []
    let own = (try? PrivateFolder.requestsFolder()).flatMap { try? FileManager.default.contentsOfDirectory(atPath: $0.path) } ?? []
    return Set(
        (names + own).filter { name in
            name.hasPrefix("Requests-download-") || (name.hasSuffix(".tmp") && UUID(uuidString: String(name.dropLast(4))) != nil)
        })
}

final class DownloadTests: XCTestCase {
    private let server = TestServer.shared
    private var before: Set<String> = []
    private var folder: URL!

    override func setUp() {
        super.setUp()
        before = transferLeftovers()
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("downloads-\(UUID().uuidString)")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(at: folder)
        super.tearDown()
    }

    private func assertNoLeftovers(file: StaticString = #filePath, line: UInt = #line) {
        waitUntil("no temporary download file is left", file: file, line: line) {
            transferLeftovers().subtracting(self.before).isEmpty
        }
    }

    private func run(_ download: Download) -> (Result<URL, Error>?, RequestOperation<URL, Error>) {
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        let operation = queue.addRequest(download, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion exactly once")
        return (results.values.first, operation)
    }

    func testADownloadIsMovedToItsDestinationWithItsBytes() throws {
        // Given a destination in folders that do not exist yet
        let destination = folder.appendingPathComponent("a/b/bytes.bin")
        // When a million bytes are downloaded
        let (result, operation) = run(Download(url: server.url("/bytes/1000000"), destination: destination))
        // Then the file is there with the exact bytes, the progress is complete, and nothing else is left
        XCTAssertEqual(try result?.get(), destination)
        let data = try Data(contentsOf: destination)
        XCTAssertTrue(data == Data((0..<1_000_000).map { UInt8(truncatingIfNeeded: $0) }))
        XCTAssertEqual(operation.progress.completedUnitCount, 1_000_000)
        XCTAssertEqual(operation.progress.totalUnitCount, 1_000_000)
        assertNoLeftovers()
    }

    func testTheDefaultDestinationIsANewFolderWithTheSuggestedName() throws {
        let (result, _) = run(Download(url: server.url("/bytes/1000")))
        let file = try XCTUnwrap(result?.get())
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        XCTAssertEqual(try Data(contentsOf: file).count, 1000)
        XCTAssertTrue(file.deletingLastPathComponent().lastPathComponent.hasPrefix("Requests-Downloads-"))
        assertNoLeftovers()
    }

    func testA404FailsWithItsPayloadAndLeavesNoFile() {
        let destination = folder.appendingPathComponent("missing.bin")
        let (result, _) = run(Download(url: server.url("/status/404"), destination: destination))
        let error = result?.failure as? RequestQueueError
        XCTAssertEqual(error?.statusCode, 404)
        XCTAssertEqual(error?.responseBody.map { String(decoding: $0, as: UTF8.self) }, #"{"status":404,"error":"Not Found"}"#)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        assertNoLeftovers()
    }

    func testTheServerClosingMidBodyFailsAndLeavesNoFile() {
        // Given a 4 MB body of which the server sends half
        let path = "/transfers/\(UUID().uuidString)"
        server.route(path) { _ in LoopbackResponse(body: Data(count: 4_000_000), fault: .closeMidBody) }
        let destination = folder.appendingPathComponent("cut.bin")
        let (result, _) = run(Download(url: server.url(path), destination: destination))
        XCTAssertNotNil(result?.failure)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        assertNoLeftovers()
    }

    func testCancellingMidTransferCompletesAtOnceAndLeavesNoFile() {
        // Given a 20 MB download trickling in
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        let destination = folder.appendingPathComponent("cancelled.bin")
        let operation = queue.addRequest(
            Download(url: server.url("/trickle/20000000?chunk=65536&interval=5"), destination: destination), session: testSession
        ) { results.append($0) }
        waitUntil("some bytes have arrived") { operation.progress.completedUnitCount > 500_000 }
        // When it is cancelled
        operation.cancel()
        waitUntil("the completion") { results.count == 1 }
        // Then it completed with the cancellation, and no file is left, neither ours nor Foundation's partial one
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        assertNoLeftovers()
    }

    func testCancellingDownloadsRunningSideBySideLeavesNoFile() {
        // Given six downloads running at once, so that their partial files must be told apart
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        let operations = (0..<6).map { index in
            queue.addRequest(
                Download(url: server.url("/trickle/20000000?chunk=65536&interval=\(2 + index)"), destination: folder.appendingPathComponent("\(index).bin")),
                session: testSession
            ) { results.append($0) }
        }
        waitUntil("all have received bytes") { operations.allSatisfy { $0.progress.completedUnitCount > 300_000 } }
        // When all are cancelled
        operations.forEach { $0.cancel() }
        waitUntil("the completions") { results.count == 6 }
        // Then none left a file
        XCTAssertTrue(results.values.allSatisfy { $0.failure?.isRequestCancellation == true }, "\(results.values)")
        assertNoLeftovers()
    }

    func testProgressMovesWithTheRealByteCounts() {
        // Given a 10 MB download that arrives in 64 KiB steps
        let queue = OperationQueue()
        let operation = queue.addRequest(
            Download(url: server.url("/trickle/10000000?chunk=65536&interval=3"), destination: folder.appendingPathComponent("p.bin")),
            session: testSession
        )
        // When its progress is watched
        var seen: Set<Int64> = []
        while !operation.isFinished {
            seen.insert(operation.progress.completedUnitCount)
            usleep(1000)
        }
        // Then it went through many intermediate values, with the length as its total
        let intermediate = seen.filter { $0 > 0 && $0 < 10_000_000 }
        XCTAssertGreaterThanOrEqual(intermediate.count, 10, "intermediate values: \(intermediate.count)")
        XCTAssertEqual(operation.progress.totalUnitCount, 10_000_000)
        XCTAssertEqual(operation.progress.fractionCompleted, 1)
        assertNoLeftovers()
    }

    func testCancellingTheProgressCancelsTheOperation() {
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        let operation = queue.addRequest(
            Download(url: server.url("/trickle/20000000?chunk=65536&interval=5"), destination: folder.appendingPathComponent("c.bin")),
            session: testSession
        ) { results.append($0) }
        waitUntil("some bytes have arrived") { operation.progress.completedUnitCount > 0 }
        operation.progress.cancel()
        waitUntil("the completion") { results.count == 1 }
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        XCTAssertTrue(operation.isCancelled)
        queue.waitUntilAllOperationsAreFinished()
        assertNoLeftovers()
    }

    func testProgressComposesUnderAParent() {
        // Given two downloads under one parent progress
        let parent = Progress(totalUnitCount: 2)
        let queue = OperationQueue()
        let operations = (0..<2).map { index in
            queue.addRequest(
                Download(url: server.url("/trickle/3000000?chunk=65536&interval=3"), destination: folder.appendingPathComponent("\(index).bin")),
                session: testSession
            )
        }
        operations.forEach { parent.addChild($0.progress, withPendingUnitCount: 1) }
        // When they run
        var fractions: Set<Double> = []
        while !operations.allSatisfy(\.isFinished) {
            fractions.insert(parent.fractionCompleted)
            usleep(1000)
        }
        // Then the parent moved through intermediate values to completion
        XCTAssertGreaterThan(fractions.filter { $0 > 0 && $0 < 1 }.count, 2)
        XCTAssertEqual(parent.fractionCompleted, 1, accuracy: 1e-9)
    }

    func testAnExistingFileIsKeptUnlessReplacing() throws {
        let destination = folder.appendingPathComponent("existing.bin")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try Data("old".utf8).write(to: destination)
        let (kept, _) = run(Download(url: server.url("/bytes/100"), destination: destination))
        XCTAssertEqual((kept?.failure as? CocoaError)?.code, .fileWriteFileExists)
        XCTAssertEqual(try Data(contentsOf: destination), Data("old".utf8))
        let (replaced, _) = run(Download(url: server.url("/bytes/100"), destination: destination, downloadOptions: [.replaceExistingFile]))
        XCTAssertEqual(try replaced?.get(), destination)
        XCTAssertEqual(try Data(contentsOf: destination).count, 100)
        assertNoLeftovers()
    }

    func testARetriedDownloadDiscardsTheFailedAttemptsFile() throws {
        let path = "/transfers/\(UUID().uuidString)"
        server.script(path, [LoopbackResponse(status: 503, body: Data(count: 50_000)), LoopbackResponse(body: Data(repeating: 7, count: 70_000))])
        let destination = folder.appendingPathComponent("retried.bin")
        let parent = Progress(totalUnitCount: 1)
        let queue = OperationQueue()
        let operation = queue.addRequest(
            Download(url: server.url(path), destination: destination, ownRetryPolicy: RetryPolicy(baseDelay: 0.01, jitter: 0)), session: testSession)
        parent.addChild(operation.progress, withPendingUnitCount: 1)
        queue.waitUntilAllOperationsAreFinished()
        let result = operation.result
        // The failed attempt's bytes are not counted twice in the parent
        XCTAssertEqual(parent.completedUnitCount, 1)
        XCTAssertEqual(parent.fractionCompleted, 1, accuracy: 1e-9)
        XCTAssertEqual(try result?.get(), destination)
        XCTAssertEqual(try Data(contentsOf: destination), Data(repeating: 7, count: 70_000))
        XCTAssertEqual(server.requestCount(path: path), 2)
        assertNoLeftovers()
    }
}

final class UploadTests: XCTestCase {
    private let server = TestServer.shared

    private func run(_ upload: Upload) -> (Result<Data, Error>?, RequestOperation<Data, Error>) {
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(upload, session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.count, 1, "completion exactly once")
        return (results.values.first, operation)
    }

    /// `count` seeded random bytes, made eight at a time (a closure per byte took tens of seconds for 20 MB under
    /// ThreadSanitizer on a busy machine).
    private func randomData(_ count: Int) -> Data {
        var generator = SplitMix64(seed: UInt64(count))
        var words = [UInt64](repeating: 0, count: (count + 7) / 8)
        for index in words.indices { words[index] = generator.next() }
        return words.withUnsafeBytes { Data($0.prefix(count)) }
    }

    private func report(_ data: Data) -> SinkReport {
        SinkReport(bytes: data.count, crc32: String(BodyDigest(data).crc32, radix: 16).leftPadded(to: 8))
    }

    func testAnUploadFromDataArrivesWholeWithItsLength() throws {
        let body = randomData(5_000_000)
        let (result, operation) = run(Upload(url: server.url("/sink/data"), uploadBody: .data(body)))
        let received = try JSONDecoder().decode(SinkReport.self, from: XCTUnwrap(result?.get()))
        XCTAssertEqual(received, report(body))
        XCTAssertEqual(operation.progress.totalUnitCount, 5_000_000)
        XCTAssertEqual(operation.progress.completedUnitCount, 5_000_000)
    }

    func testAnUploadFromAFileIsStreamedWithProgress() throws {
        // Given a 10 MB file and a sink that reads slowly
        let body = randomData(10_000_000)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("upload-\(UUID().uuidString).bin")
        try body.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let queue = OperationQueue()
        let operation = queue.addRequest(Upload(url: server.url("/sink/file?pause=2"), uploadBody: .file(file)), session: testSession)
        // When its progress is watched
        var seen: Set<Int64> = []
        while !operation.isFinished {
            seen.insert(operation.progress.completedUnitCount)
            usleep(1000)
        }
        // Then the sink got every byte, and the progress moved with the bytes sent, out of the file's size
        let received = try JSONDecoder().decode(SinkReport.self, from: XCTUnwrap(operation.result?.get()))
        XCTAssertEqual(received, report(body))
        XCTAssertGreaterThanOrEqual(seen.filter { $0 > 0 && $0 < 10_000_000 }.count, 10)
        XCTAssertEqual(operation.progress.totalUnitCount, 10_000_000)
    }

    func testAnUploadAnswered404OrCutShortFails() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("upload-\(UUID().uuidString).bin")
        try randomData(1_000_000).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let (notFound, _) = run(Upload(url: server.url("/status/404"), uploadBody: .file(file)))
        XCTAssertEqual((notFound?.failure as? RequestQueueError)?.statusCode, 404, "\(String(describing: notFound))")
        let (cut, _) = run(Upload(url: server.url("/fault/close-mid-body"), uploadBody: .file(file)))
        // A body cut short is a lost connection, as on Apple platforms (libcurl says −1).
        XCTAssertEqual((cut?.failure as? URLError)?.code, .networkConnectionLost, "\(String(describing: cut))")
    }

    func testAMissingFileFailsBeforeAnythingIsSent() {
        let (path, requests) = recordedRoute()
        let missing = URL(fileURLWithPath: "/nonexistent/\(UUID().uuidString)")
        let (result, _) = run(Upload(url: server.url(path), uploadBody: .file(missing)))
        XCTAssertEqual(result?.failure as? RequestBuildingError, .unreadableFile(missing))
        XCTAssertEqual(requests.count, 0)
    }

    func testCancellingAnUploadMidTransferCompletesAtOnce() throws {
        let body = randomData(20_000_000)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("upload-\(UUID().uuidString).bin")
        try body.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let queue = OperationQueue()
        let results = Recorder<Result<Data, Error>>()
        let operation = queue.addRequest(Upload(url: server.url("/sink/cancel?pause=5"), uploadBody: .file(file)), session: testSession) {
            results.append($0)
        }
        waitUntil("some bytes are sent") { operation.progress.completedUnitCount > 0 }
        operation.cancel()
        waitUntil("the completion") { results.count == 1 }
        XCTAssertTrue(results.values.first?.failure?.isRequestCancellation ?? false)
        queue.waitUntilAllOperationsAreFinished()
    }

    func testAMultipartUploadReportsProgress() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("photo-\(UUID().uuidString).png")
        try randomData(300_000).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let (result, operation) = run(Upload(url: server.url("/sink/multipart"), uploadBody: .multipart(MultipartFormData(fields: ["a": "b"], files: ["photo": file]))))
        let received = try JSONDecoder().decode(SinkReport.self, from: XCTUnwrap(result?.get()))
        XCTAssertGreaterThan(received.bytes, 300_000)
        XCTAssertEqual(operation.progress.completedUnitCount, Int64(received.bytes))
    }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        String(repeating: "0", count: max(0, length - count)) + self
    }
}

final class ProgressTests: XCTestCase {
    func testAProgressReadAfterSuccessIsComplete() {
        let queue = OperationQueue()
        let operation = queue.addRequest(GetData(url: TestServer.url("/json")), session: testSession)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(operation.progress.fractionCompleted, 1)
    }

    func testAnOperationsProgressIsNeverAdoptedByTheCurrentProgress() {
        // Given a progress that is current on this thread when the operation's progress is created
        let current = Progress(totalUnitCount: 1)
        current.becomeCurrent(withPendingUnitCount: 1)
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = queue.addRequest(GetData(url: TestServer.url("/json")), session: testSession)
        _ = operation.progress
        current.resignCurrent()
        // Then it can still be given to another parent (Foundation traps on a second parent)
        let parent = Progress(totalUnitCount: 1)
        parent.addChild(operation.progress, withPendingUnitCount: 1)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(parent.fractionCompleted, 1, accuracy: 1e-9)
    }

    func testCancellingABatchsProgressCancelsTheBatch() {
        let queue = OperationQueue()
        let batch = queue.addBatch([GetData(url: TestServer.url("/delay/5000")), GetData(url: TestServer.url("/delay/5000"))], session: testSession)
        batch.progress.cancel()
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(batch.isCancelled)
        XCTAssertTrue(batch.result?.failure?.isRequestCancellation ?? false)
    }
}
