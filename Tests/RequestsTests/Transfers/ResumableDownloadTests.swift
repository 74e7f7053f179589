#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// GET `url` into `destination`, with an optional integrity check and retry policy.
struct FileDownload: DownloadRequest {
    let url: URL
    var destination: URL?
    var integrity: DownloadIntegrity?
    var ownRetryPolicy: RetryPolicy?
    var identifier: String { url.absoluteString }
    var retryPolicy: RetryPolicy? { ownRetryPolicy }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// What the server saw of each request to one path.
final class SeenRequests: @unchecked Sendable {
    private let lock = NSLock()
    private var requests: [LoopbackRequest] = []
    func append(_ request: LoopbackRequest) { lock.withLock { requests.append(request) } }
    var all: [LoopbackRequest] { lock.withLock { requests } }
    var ranges: [String?] { all.map { $0.headers["range"] } }
}

/// The size of the test resource.
let resourceLength = 1_000_000

/// A retry policy that retries a dropped connection at once.
let quickRetry = RetryPolicy(maxAttempts: 3, baseDelay: 0.01, jitter: 0)

final class ResumableDownloadTests: XCTestCase {
    private let server = TestServer.shared
    private var before: Set<String> = []
    private var folder: URL!
    private let length = resourceLength

    override func setUp() {
        super.setUp()
        before = transferLeftovers()
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("resumable-\(UUID().uuidString)")
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

    /// Serves `resource(n)` for the n-th request (from 0) at a fresh path, recording the requests.
    private func serve(_ resource: @escaping @Sendable (Int, LoopbackRequest) -> LoopbackResource) -> (URL, SeenRequests) {
        let path = "/resumable/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.resource(path) { request in
            seen.append(request)
            return resource(seen.all.count - 1, request)
        }
        return (server.url(path), seen)
    }

    private func download(
        _ request: FileDownload, resumingFrom state: ResumeState?, operation: ((DownloadRequestOperation<FileDownload>) -> Void)? = nil
    ) -> (Result<URL, Error>, ResumeState?) {
        let queue = OperationQueue()
        let results = Recorder<(Result<URL, Error>, ResumeState?)>()
        let added = queue.addRequest(request, resumingFrom: state, session: testSession) { results.append(($0, $1)) }
        operation?(added)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1, "exactly one completion")
        return results.values.first ?? (.failure(RequestQueueError.misuse("no completion")), nil)
    }

    private func assertContent(of url: URL?, version: Int = 0, file: StaticString = #filePath, line: UInt = #line) {
        guard let url, let data = FileManager.default.contents(atPath: url.path) else {
            return XCTFail("no file", file: file, line: line)
        }
        XCTAssertEqual(data.count, length, file: file, line: line)
        XCTAssertTrue(data == LoopbackResource.content(length: length, version: version), "the bytes are the resource's", file: file, line: line)
    }

    // MARK: - Automatic resume

    func testARetryAfterADroppedConnectionResumesInsteadOfStartingAgain() {
        // Given a resource whose first response is cut at 400,000 bytes
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 400_000 : nil) }
        let destination = folder.appendingPathComponent("file.bin")

        // When it is downloaded under a retry policy
        let (result, state) = download(FileDownload(url: url, destination: destination, ownRetryPolicy: quickRetry), resumingFrom: nil)

        // Then the retry asked for the rest only, with the validator, and the file is whole
        XCTAssertEqual(try? result.get(), destination)
        XCTAssertNil(state)
        assertContent(of: destination)
        XCTAssertEqual(seen.ranges, [nil, "bytes=400000-"])
        XCTAssertEqual(seen.all.last?.headers["if-range"], #""v0-1000000""#)
        XCTAssertEqual(seen.all.first?.headers["accept-encoding"], "identity")
        XCTAssertEqual(server.bodyBytesSent(path: url.path), length, "no byte was sent twice")
        assertNoLeftovers()
    }

    func testAWeakValidatorCannotResumeSoTheRetryStartsAgain() {
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, validator: .weakETag, cutAfter: n == 0 ? 400_000 : nil) }
        let destination = folder.appendingPathComponent("file.bin")

        let (result, state) = download(FileDownload(url: url, destination: destination, ownRetryPolicy: quickRetry), resumingFrom: nil)

        XCTAssertEqual(try? result.get(), destination)
        XCTAssertNil(state)
        assertContent(of: destination)
        XCTAssertEqual(seen.ranges, [nil, nil])
        assertNoLeftovers()
    }

    // MARK: - Resuming later

    func testAFailedDownloadKeepsItsBytesAndResumesAfterARestart() throws {
        // Given a download that fails at 300,000 bytes, with no retry policy
        let (url, seen) = serve { n, _ in
            LoopbackResource(length: resourceLength, validator: .lastModified, cutAfter: n == 0 ? 300_000 : nil, chunkSize: 50_000, intervalMilliseconds: n == 0 ? 0 : 10)
        }
        let destination = folder.appendingPathComponent("file.bin")
        let (failure, maybeState) = download(FileDownload(url: url, destination: destination), resumingFrom: nil)
        XCTAssertEqual((failure.failure as? URLError)?.code, .networkConnectionLost)
        let state = try XCTUnwrap(maybeState)
        XCTAssertEqual(state.bytesReceived, 300_000)
        XCTAssertEqual(state.expectedLength, Int64(length))
        XCTAssertEqual(state.destination, destination)
        XCTAssertEqual(state.url, url)
        guard case .lastModified = state.validator else { return XCTFail("a Last-Modified validator") }
        XCTAssertEqual(FileSink.size(of: state.partialFile), 300_000)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))

        // When the state is stored, read back as after a restart, and resumed
        let stored = try JSONEncoder().encode(state)
        let restored = try JSONDecoder().decode(ResumeState.self, from: stored)
        XCTAssertEqual(restored, state)
        let progress = Recorder<Int64>()
        let (result, after) = download(FileDownload(url: url, destination: destination), resumingFrom: restored) { operation in
            self.waitUntil("the download finished") {
                progress.append(operation.progress.completedUnitCount)
                return operation.isFinished
            }
        }

        // Then only the rest was sent, progress went on from 300,000, and the partial file is gone
        XCTAssertEqual(try? result.get(), destination)
        XCTAssertNil(after)
        assertContent(of: destination)
        XCTAssertEqual(seen.ranges, [nil, "bytes=300000-"])
        XCTAssertEqual(server.bodyBytesSent(path: url.path), length)
        let samples = Set(progress.values).sorted()
        XCTAssertGreaterThanOrEqual(samples.first { $0 > 0 } ?? 0, 300_000, "progress continues from the bytes kept: \(samples)")
        XCTAssertTrue(samples.contains { $0 > 0 && $0 < self.length }, "progress was seen on the way: \(samples)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: state.partialFile.path))
        assertNoLeftovers()
    }

    func testAChangedResourceStartsAgainFromZero() throws {
        // Given bytes of version 0 kept on disk, and a server that now has version 1
        let state = try keptState(cutAt: 500_000)
        let (url, seen) = serve { _, _ in LoopbackResource(length: resourceLength, version: 1) }
        let destination = folder.appendingPathComponent("file.bin")

        // When it is resumed, the If-Range fails and the server sends the whole new version
        let (result, after) = download(FileDownload(url: url, destination: destination), resumingFrom: state)

        XCTAssertEqual(try? result.get(), destination)
        XCTAssertNil(after)
        assertContent(of: destination, version: 1)
        XCTAssertEqual(seen.ranges, ["bytes=500000-"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: state.partialFile.path))
        assertNoLeftovers()
    }

    func testAServerThatAnswersARangeWith200StartsAgainCleanly() throws {
        let state = try keptState(cutAt: 500_000)
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength, rangeHandling: .ignore) }
        let destination = folder.appendingPathComponent("file.bin")

        let (result, _) = download(FileDownload(url: url, destination: destination), resumingFrom: state)

        XCTAssertEqual(try? result.get(), destination)
        assertContent(of: destination)
        assertNoLeftovers()
    }

    func testAWrongContentRangeOrA416StartsAgainFromZeroOnce() throws {
        for handling in [LoopbackResource.RangeHandling.wrongContentRange, .notSatisfiable] {
            let state = try keptState(cutAt: 500_000)
            let (url, seen) = serve { _, _ in LoopbackResource(length: resourceLength, rangeHandling: handling) }
            let destination = folder.appendingPathComponent("file-\(handling).bin")

            let (result, _) = download(FileDownload(url: url, destination: destination), resumingFrom: state)

            XCTAssertEqual(try? result.get(), destination, "\(handling)")
            assertContent(of: destination)
            XCTAssertEqual(seen.ranges, ["bytes=500000-", nil], "\(handling)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: state.partialFile.path))
        }
        assertNoLeftovers()
    }

    func testA206ThatIsNotTheWholeRepresentationFailsWithATypedError() {
        // Given a server that answers every request with part of a file
        let path = "/resumable/\(UUID().uuidString)"
        server.route(path) { _ in LoopbackResponse(status: 206, headers: ["Content-Range": "bytes 5-9/10", "ETag": #""x""#], body: Data("56789".utf8)) }
        let destination = folder.appendingPathComponent("file.bin")

        // When it is downloaded, the restart from zero gets the same
        let (result, state) = download(FileDownload(url: server.url(path), destination: destination), resumingFrom: nil)

        // Then it fails, with nothing at the destination
        XCTAssertEqual(result.failure as? DownloadError, .rangeMismatch(contentRange: "bytes 5-9/10", status: 206))
        XCTAssertNil(state)
        XCTAssertEqual(server.requestCount(path: path), 2)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        assertNoLeftovers()
    }

    func testAPartialFileDeletedOrTruncatedBySomeoneElse() throws {
        // Deleted: the download starts again from zero.
        let deleted = try keptState(cutAt: 500_000)
        try FileManager.default.removeItem(at: deleted.partialFile)
        let (url, seen) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let first = folder.appendingPathComponent("deleted.bin")
        XCTAssertEqual(try? download(FileDownload(url: url, destination: first), resumingFrom: deleted).0.get(), first)
        assertContent(of: first)

        // Truncated: it resumes from the bytes still there.
        let truncated = try keptState(cutAt: 500_000)
        let handle = try FileHandle(forWritingTo: truncated.partialFile)
        try handle.truncate(atOffset: 123_456)
        try handle.close()
        let second = folder.appendingPathComponent("truncated.bin")
        XCTAssertEqual(try? download(FileDownload(url: url, destination: second), resumingFrom: truncated).0.get(), second)
        assertContent(of: second)
        XCTAssertEqual(seen.ranges, [nil, "bytes=123456-"])
        assertNoLeftovers()
    }

    func testACompleteFileFetchesOnlyItsLastByteAgain() throws {
        // Given a state that says every byte arrived (the failure came after them)
        let kept = try keptState(cutAt: 500_000)
        let (url, seen) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let whole = LoopbackResource.content(length: length)
        try whole.write(to: kept.partialFile)
        let state = ResumeState(
            url: url, validator: kept.validator, bytesReceived: Int64(length), expectedLength: Int64(length),
            partialFile: kept.partialFile, destination: nil
        )
        let destination = folder.appendingPathComponent("file.bin")

        let (result, _) = download(FileDownload(url: url, destination: destination), resumingFrom: state)

        XCTAssertEqual(try? result.get(), destination)
        assertContent(of: destination)
        XCTAssertEqual(seen.ranges, ["bytes=\(length - 1)-"])
        assertNoLeftovers()
    }

    func testTheDownloadSizeLimitCountsTheKeptBytesOfAResumedAttempt() throws {
        // Given half of the resource kept, and a limit above the missing half but below the whole
        let state = try keptState(cutAt: 500_000)
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(maximumDownloadSize: 600_000))
        let results = Recorder<(Result<URL, Error>, ResumeState?)>()

        // When it is resumed
        queue.addRequest(FileDownload(url: url, destination: folder.appendingPathComponent("file.bin")), resumingFrom: state, session: testSession) {
            results.append(($0, $1))
        }
        queue.waitUntilAllOperationsAreFinished()

        // Then the 206's whole length is refused at its headers, and the kept bytes are still there to resume
        XCTAssertEqual(results.values.first?.0.failure as? TransferLimitError, .responseTooLarge(limit: 600_000))
        XCTAssertEqual(results.values.first?.1?.bytesReceived, 500_000)
        results.values.first?.1?.discard()
        assertNoLeftovers()
    }

    // MARK: - Integrity

    func testAChecksumOrLengthMismatchFailsAndLeavesNoFile() throws {
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let good = SHA256.hexDigest(LoopbackResource.content(length: length))
        let destination = folder.appendingPathComponent("file.bin")

        let (matching, _) = download(FileDownload(url: url, destination: destination, integrity: .sha256(good.uppercased())), resumingFrom: nil)
        XCTAssertEqual(try? matching.get(), destination)
        try FileManager.default.removeItem(at: destination)

        let wrong = String(repeating: "0", count: 64)
        let (mismatch, state) = download(FileDownload(url: url, destination: destination, integrity: .sha256(wrong)), resumingFrom: nil)
        XCTAssertEqual(mismatch.failure as? DownloadError, .checksumMismatch(expected: wrong, actual: good))
        XCTAssertNil(state, "corrupt bytes are not kept")
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))

        let (short, _) = download(FileDownload(url: url, destination: destination, integrity: .length(Int64(length + 1))), resumingFrom: nil)
        XCTAssertEqual(short.failure as? DownloadError, .lengthMismatch(expected: Int64(length + 1), actual: Int64(length)))
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        assertNoLeftovers()
    }

    // MARK: - Cancellation and the destination

    func testACancelThatProducesAResumeStateKeepsWhatArrived() throws {
        // Given a slow resource
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, chunkSize: 20_000, intervalMilliseconds: n == 0 ? 5 : 0) }
        let destination = folder.appendingPathComponent("file.bin")

        // When it is cancelled with its bytes kept, once some have arrived
        let (cancelled, state) = download(FileDownload(url: url, destination: destination), resumingFrom: nil) { operation in
            self.waitUntil("some bytes arrived") { operation.progress.completedUnitCount >= 100_000 }
            operation.cancel(producingResumeState: true)
        }

        // Then the completion has the cancellation and a state for the bytes on disk, which resume to the whole file
        XCTAssertTrue(cancelled.failure?.isRequestCancellation ?? false)
        let kept = try XCTUnwrap(state)
        XCTAssertGreaterThanOrEqual(kept.bytesReceived, 100_000)
        XCTAssertEqual(FileSink.size(of: kept.partialFile), kept.bytesReceived)
        let (result, _) = download(FileDownload(url: url, destination: destination), resumingFrom: kept)
        XCTAssertEqual(try? result.get(), destination)
        assertContent(of: destination)
        XCTAssertEqual(seen.ranges.last, "bytes=\(kept.bytesReceived)-")
        assertNoLeftovers()
    }

    func testTheAsyncFormHandsBackAStateWhenItsTaskIsCancelled() async throws {
        // Given a slow resource, downloaded by a Task
        let (url, seen) = serve { n, _ in LoopbackResource(length: resourceLength, chunkSize: 20_000, intervalMilliseconds: n == 0 ? 5 : 0) }
        let destination = folder.appendingPathComponent("file.bin")
        let task = Task {
            // A queue of the Task's own: Apple's SDK does not mark OperationQueue Sendable.
            await OperationQueue().download(FileDownload(url: url, destination: destination), resumingFrom: nil, session: testSession)
        }

        // When the Task is cancelled part-way
        try await Task.sleep(nanoseconds: 100_000_000)
        task.cancel()
        let (cancelled, state) = await task.value

        // Then the cancellation comes with a state, from which the async form resumes
        XCTAssertTrue(cancelled.failure?.isRequestCancellation ?? false)
        let kept = try XCTUnwrap(state)
        let (result, after) = await OperationQueue().download(FileDownload(url: url, destination: destination), resumingFrom: kept, session: testSession)
        XCTAssertEqual(try? result.get(), destination)
        XCTAssertNil(after)
        assertContent(of: destination)
        XCTAssertEqual(seen.ranges, [nil, "bytes=\(kept.bytesReceived)-"])
    }

    func testAPlainCancelKeepsNothing() {
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength, chunkSize: 20_000, intervalMilliseconds: 5) }
        let (cancelled, state) = download(FileDownload(url: url, destination: folder.appendingPathComponent("file.bin")), resumingFrom: nil) { operation in
            self.waitUntil("some bytes arrived") { operation.progress.completedUnitCount >= 100_000 }
            operation.cancel()
        }
        XCTAssertTrue(cancelled.failure?.isRequestCancellation ?? false)
        XCTAssertNil(state)
        assertNoLeftovers()
    }

    func testADestinationFolderThatDisappearedFailsWithNothingHalfWritten() throws {
        struct NoFolderCreation: DownloadRequest {
            let url: URL
            let destination: URL?
            var downloadOptions: DownloadOptions { [] }
            var identifier: String { url.absoluteString }
            func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
        }
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let gone = folder.appendingPathComponent("gone", isDirectory: true)
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        queue.addRequest(NoFolderCreation(url: url, destination: gone.appendingPathComponent("file.bin")), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1)
        XCTAssertNotNil(results.values.first?.failure)
        XCTAssertFalse(FileManager.default.fileExists(atPath: gone.path))
        assertNoLeftovers()
    }

    #if os(Linux)
    func testAFullDiskFailsWithATypedErrorAndTheBytesResumeOnceThereIsRoom() throws {
        // Given a file size limit of 256 KiB (a full disk, as write(2) sees it: EFBIG)
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let destination = folder.appendingPathComponent("file.bin")
        var saved = rlimit()
        getrlimit(Int32(RLIMIT_FSIZE.rawValue), &saved)
        signal(SIGXFSZ, SIG_IGN)
        var small = saved
        small.rlim_cur = 256 * 1024
        setrlimit(Int32(RLIMIT_FSIZE.rawValue), &small)
        let (failure, state) = download(FileDownload(url: url, destination: destination), resumingFrom: nil)
        setrlimit(Int32(RLIMIT_FSIZE.rawValue), &saved)

        // Then the download fails with the file system's error, keeps what it wrote, and resumes from it
        XCTAssertNotNil(failure.failure)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination.path))
        let kept = try XCTUnwrap(state)
        XCTAssertLessThanOrEqual(kept.bytesReceived, 256 * 1024)
        let (result, _) = download(FileDownload(url: url, destination: destination), resumingFrom: kept)
        XCTAssertEqual(try? result.get(), destination)
        assertContent(of: destination)
        assertNoLeftovers()
    }
    #endif

    // MARK: - Stress

    func testRandomCancellationsCompleteOnceAndLeaveACorrectFileOrAResumableOne() throws {
        let (url, _) = serve { _, _ in LoopbackResource(length: 200_000, chunkSize: 16_384, intervalMilliseconds: 1) }
        let queue = OperationQueue()
        let completions = Recorder<ResumeState?>()
        let successes = Recorder<URL>()
        let rounds = 1_000
        // In batches of 8, so that each cancel meets a running download, at a random moment of its life.
        for batch in stride(from: 0, to: rounds, by: 8) {
            for index in batch..<(batch + 8) {
                let destination = folder.appendingPathComponent("\(index).bin")
                let operation = queue.addRequest(FileDownload(url: url, destination: destination), resumingFrom: nil, session: testSession) { result, state in
                    if case let .success(file) = result {
                        XCTAssertNil(state)
                        successes.append(file)
                    }
                    completions.append(state)
                }
                let keep = Bool.random()
                DispatchQueue.global().asyncAfter(deadline: .now() + Double.random(in: 0...0.03)) { operation.cancel(producingResumeState: keep) }
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        XCTAssertEqual(completions.values.count, rounds)
        let states = completions.values.compactMap { $0 }
        for state in states {
            XCTAssertEqual(FileSink.size(of: state.partialFile), state.bytesReceived, "a state describes the bytes on disk")
            let bytes = try XCTUnwrap(FileManager.default.contents(atPath: state.partialFile.path))
            XCTAssertTrue(bytes == LoopbackResource.content(length: bytes.count), "and they are the resource's")
            state.discard()
        }
        for file in successes.values {
            XCTAssertTrue(FileManager.default.contents(atPath: file.path) == LoopbackResource.content(length: 200_000))
        }
        XCTAssertGreaterThan(states.count, 0, "some cancels kept bytes")
        assertNoLeftovers()
    }

    // MARK: - A stored state is untrusted input

    /// `kept` with other counts or another file, as an edited JSON file would give.
    private func edited(_ kept: ResumeState, file: URL? = nil, bytes: Int64? = nil, expected: Int64?? = nil) -> ResumeState {
        ResumeState(
            url: kept.url, validator: kept.validator, bytesReceived: bytes ?? kept.bytesReceived, expectedLength: expected ?? kept.expectedLength,
            partialFile: file ?? kept.partialFile, destination: kept.destination)
    }

    /// Downloads the default resource from `state` and checks that it started from zero (no `Range` sent) and
    /// succeeded whole.
    private func assertFreshStart(from state: ResumeState, file: StaticString = #filePath, line: UInt = #line) {
        let (url, seen) = serve { _, _ in LoopbackResource(length: resourceLength) }
        let destination = folder.appendingPathComponent("\(UUID().uuidString).bin")
        let (result, _) = download(FileDownload(url: url, destination: destination), resumingFrom: state)
        XCTAssertEqual(seen.ranges, [nil], "no range asked for", file: file, line: line)
        assertContent(of: try? result.get(), file: file, line: line)
    }

    func testAStateNamingAnotherFileOrAFolderStartsAfreshAndTouchesNothing() throws {
        let kept = try keptState(cutAt: 300_000)
        defer { kept.discard() }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let victim = folder.appendingPathComponent("victim.txt")
        try Data("precious".utf8).write(to: victim)
        let victimFolder = folder.appendingPathComponent("victim-folder")
        try FileManager.default.createDirectory(at: victimFolder, withIntermediateDirectories: true)
        try Data("inside".utf8).write(to: victimFolder.appendingPathComponent("inside.txt"))

        for target in [victim, victimFolder] {
            assertFreshStart(from: edited(kept, file: target, bytes: 8))
            edited(kept, file: target).discard()
        }
        XCTAssertEqual(FileManager.default.contents(atPath: victim.path), Data("precious".utf8))
        XCTAssertEqual(FileManager.default.contents(atPath: victimFolder.appendingPathComponent("inside.txt").path), Data("inside".utf8))
        XCTAssertEqual(FileSink.size(of: kept.partialFile), kept.bytesReceived, "the real partial file is untouched as well")
    }

    func testAStateWithCountsThatMakeNoSenseStartsAfreshWithoutTouchingItsFile() throws {
        let kept = try keptState(cutAt: 300_000)
        defer { kept.discard() }
        let bad: [(Int64, Int64?)] = [(0, nil), (-5, nil), (10, 1), (10, .min), (.min, .min), (.max, 10)]
        for (bytes, expected) in bad {
            assertFreshStart(from: edited(kept, bytes: bytes, expected: .some(expected)))
            XCTAssertEqual(FileSink.size(of: kept.partialFile), kept.bytesReceived, "bytes \(bytes), expected \(String(describing: expected)): file untouched")
        }
    }

    func testAStateNamingALinkInTheTemporaryFolderLeavesItsTargetAlone() throws {
        let kept = try keptState(cutAt: 300_000)
        defer { kept.discard() }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let victim = folder.appendingPathComponent("victim.bin")
        try Data(repeating: 7, count: 400_000).write(to: victim)
        // Named exactly as Requests names its partial files, where it keeps them.
        let link = try PrivateFolder.requestsFolder().appendingPathComponent("Requests-download-\(UUID().uuidString)")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: victim)
        defer { try? FileManager.default.removeItem(at: link) }

        assertFreshStart(from: edited(kept, file: link))
        edited(kept, file: link).discard()
        XCTAssertEqual(FileManager.default.contents(atPath: victim.path), Data(repeating: 7, count: 400_000))
        XCTAssertNotNil(try? FileManager.default.destinationOfSymbolicLink(atPath: link.path), "the link is still there")
    }

    /// A state for the first `cutAt` bytes of the default resource, from a download that failed there.
    private func keptState(cutAt offset: Int) throws -> ResumeState {
        let (url, _) = serve { _, _ in LoopbackResource(length: resourceLength, cutAfter: offset) }
        let (_, state) = download(FileDownload(url: url), resumingFrom: nil)
        let kept = try XCTUnwrap(state)
        XCTAssertEqual(kept.bytesReceived, Int64(offset))
        return kept
    }
}
