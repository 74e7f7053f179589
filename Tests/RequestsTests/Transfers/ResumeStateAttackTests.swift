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

/// A test case for resumed downloads: a temporary directory of its own (see `OwnTemporaryDirectoryTestCase`), a
/// route serving a resource per request, and a state kept from a first download cut at 300,000 bytes.
class ResumeTestCase: OwnTemporaryDirectoryTestCase {
    let server = TestServer.shared

    /// Serves `resource(n)` for the n-th request (from 0).
    func serve(_ resource: @escaping @Sendable (Int, LoopbackRequest) -> LoopbackResource) -> (URL, SeenRequests) {
        let path = "/resume-case/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.resource(path) { request in
            seen.append(request)
            return resource(seen.all.count - 1, request)
        }
        return (server.url(path), seen)
    }

    /// A state for the first 300,000 bytes (request 0 is cut there).
    func keptState(url: URL) throws -> ResumeState {
        let queue = OperationQueue()
        let results = Recorder<ResumeState?>()
        queue.addRequest(FileDownload(url: url), resumingFrom: nil, session: testSession) { results.append($1) }
        queue.waitUntilAllOperationsAreFinished()
        return try XCTUnwrap(results.values.first ?? nil)
    }
}

/// An outside attack on stored resume states (2026-11-26, issue #32), kept as regression tests: each test asserts the safe
/// behaviour; a comment over a test says what the attack achieved before the fix.
final class ResumeStateAttackTests: ResumeTestCase {
    private func victim(_ name: String, bytes: Int = 500_000) throws -> URL {
        let url = root.appendingPathComponent(name)
        try Data(repeating: 0x56, count: bytes).write(to: url)  // "VVVV…"
        return url
    }

    // MARK: - Two downloads resuming one state

    /// Download A resumes a state and is receiving its 206 slowly; download B resumes the *same* state (a double tap,
    /// two windows, a restored state used twice). B's server answers 200, so B "replaces" the partial file: it unlinks
    /// the file A is writing. A's server behaved perfectly, yet A fails.
    func testASecondResumeOfAStateInUseNeverRemovesTheFirstsFile() throws {
        let (url, seen) = serve { n, _ in
            switch n {
            case 0: return LoopbackResource(length: resourceLength, cutAfter: 300_000)
            case 1: return LoopbackResource(length: resourceLength, chunkSize: 16 * 1024, intervalMilliseconds: 40)  // A: slow 206
            default: return LoopbackResource(length: resourceLength, rangeHandling: .ignore)  // B: 200, whole
            }
        }
        let state = try keptState(url: url)
        let queue = OperationQueue()
        let a = Recorder<Result<URL, Error>>()
        let b = Recorder<Result<URL, Error>>()
        queue.addRequest(FileDownload(url: url, destination: root.appendingPathComponent("A.bin")), resumingFrom: state, session: testSession) { r, _ in a.append(r) }
        waitUntil("A is receiving") { seen.all.count >= 2 }
        queue.addRequest(FileDownload(url: url, destination: root.appendingPathComponent("B.bin")), resumingFrom: state, session: testSession) { r, _ in b.append(r) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertNotNil(b.values.first?.success, "B")
        // What should hold: A, whose server sent exactly the right 206, succeeds with the whole resource.
        XCTAssertNotNil(a.values.first?.success, "A failed because B removed the partial file A was writing: \(String(describing: a.values))")
    }

    /// Same, B's server honours the range too: B truncates the shared file under A (prepareTransfer's `resumable`
    /// truncates by path), finishes first and renames it to B's destination; A keeps writing into B's delivered file
    /// through its open descriptor, then fails.
    func testTwoResumesOfOneStateAtOnceBothSucceed() throws {
        let (url, seen) = serve { n, _ in
            switch n {
            case 0: return LoopbackResource(length: resourceLength, cutAfter: 300_000)
            case 1: return LoopbackResource(length: resourceLength, chunkSize: 16 * 1024, intervalMilliseconds: 40)
            default: return LoopbackResource(length: resourceLength)
            }
        }
        let state = try keptState(url: url)
        let queue = OperationQueue()
        let a = Recorder<Result<URL, Error>>()
        let b = Recorder<Result<URL, Error>>()
        let bDestination = root.appendingPathComponent("B.bin")
        queue.addRequest(FileDownload(url: url, destination: root.appendingPathComponent("A.bin")), resumingFrom: state, session: testSession) { r, _ in a.append(r) }
        waitUntil("A is receiving") { seen.all.count >= 2 }
        queue.addRequest(FileDownload(url: url, destination: bDestination), resumingFrom: state, session: testSession) { r, _ in b.append(r) }
        waitUntil("B done") { b.count == 1 }
        let bMTimeAtDelivery = (try? FileManager.default.attributesOfItem(atPath: bDestination.path)[.modificationDate]) as? Date
        queue.waitUntilAllOperationsAreFinished()
        let bMTimeLater = (try? FileManager.default.attributesOfItem(atPath: bDestination.path)[.modificationDate]) as? Date
        XCTAssertEqual(bMTimeAtDelivery, bMTimeLater, "B's delivered file was written to after B's completion (by A's descriptor)")
        XCTAssertNotNil(a.values.first?.success, "A failed: \(String(describing: a.values))")
    }

    // MARK: - Links

    /// The state passes the check when it is added; the file is replaced by a symbolic link before the operation
    /// starts (queue suspended, or waiting on a dependency, or between a failed attempt and its retry). The resume
    /// path opens it with FileHandle(forWritingTo:) (follows links), truncates it and appends to it.
    func testAPartialFileReplacedByALinkAfterTheCheckIsNotFollowed() throws {
        let (url, _) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        let target = try victim("victim-symlink.txt")
        let queue = OperationQueue()
        queue.isSuspended = true
        let results = Recorder<Result<URL, Error>>()
        queue.addRequest(FileDownload(url: url, destination: root.appendingPathComponent("out.bin")), resumingFrom: state, session: testSession) { r, _ in results.append(r) }
        // Replace the partial file by a link, after the check.
        let partial = try PrivateFolder.requestsFolder().appendingPathComponent(state.partialFile.lastPathComponent)
        XCTAssertEqual(unlink(partial.path), 0)
        XCTAssertEqual(symlink(target.path, partial.path), 0)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        let after = try Data(contentsOf: target)
        XCTAssertEqual(after, Data(repeating: 0x56, count: 500_000), "a file the library did not create was truncated / written through a link")
    }

    /// A hard link to another file of this user, under a name the library gives, passes every check (regular file,
    /// this user's): resuming truncates the linked file and appends the server's bytes to it.
    func testAHardLinkWithAPartialFileNameIsNotWrittenTo() throws {
        let (url, _) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        let target = try victim("victim-hardlink.txt")
        let partial = try PrivateFolder.requestsFolder().appendingPathComponent(state.partialFile.lastPathComponent)
        XCTAssertEqual(unlink(partial.path), 0)
        XCTAssertEqual(link(target.path, partial.path), 0)
        let queue = OperationQueue()
        let results = Recorder<Result<URL, Error>>()
        queue.addRequest(FileDownload(url: url, destination: root.appendingPathComponent("out.bin")), resumingFrom: state, session: testSession) { r, _ in results.append(r) }
        queue.waitUntilAllOperationsAreFinished()
        let after = try Data(contentsOf: target)
        XCTAssertEqual(after, Data(repeating: 0x56, count: 500_000), "the hard-linked file was modified")
    }

    // MARK: - Odd states (expected to hold)

    func testOddCountsAndNamesNeverCrashOrTouchOtherFiles() throws {
        let (url, _) = serve { n, _ in LoopbackResource(length: resourceLength, cutAfter: n == 0 ? 300_000 : nil) }
        let state = try keptState(url: url)
        let outside = try victim("Requests-download-\(UUID().uuidString)")
        let name = state.partialFile.lastPathComponent
        let counts: [(Int64, Int64?)] = [(.max, nil), (.max, .max), (.min, nil), (0, nil), (-1, 5), (300_000, 1), (300_000, 300_000), (1, .max), (.max, .min)]
        var states = counts.map { ResumeState(url: url, validator: state.validator, bytesReceived: $0.0, expectedLength: $0.1, partialFile: state.partialFile, destination: nil) }
        for weird in ["../\(name)", "\(name)/", "\(name)\u{0}/etc/passwd", String(repeating: "é", count: 5000), "\(name.lowercased())", outside.path, "/", "..", ""] {
            states.append(
                ResumeState(
                    url: url, validator: state.validator, bytesReceived: 300_000, expectedLength: nil,
                    partialFile: URL(fileURLWithPath: weird.hasPrefix("/") ? weird : temporary.path + "/" + weird), destination: nil))
        }
        states.append(ResumeState(url: url, validator: state.validator, bytesReceived: 300_000, expectedLength: nil, partialFile: outside, destination: nil))
        for weird in states {
            weird.discard()
            let queue = OperationQueue()
            let results = Recorder<Result<URL, Error>>()
            queue.addRequest(FileDownload(url: url), resumingFrom: weird, session: testSession) { r, _ in results.append(r) }
            queue.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(results.count, 1)
            if let file = results.values.first?.success { try? FileManager.default.removeItem(at: file) }
        }
        XCTAssertEqual(try Data(contentsOf: outside), Data(repeating: 0x56, count: 500_000))
    }
}
