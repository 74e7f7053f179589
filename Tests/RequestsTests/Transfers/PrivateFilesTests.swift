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

/// What `lstat` says of a path.
private struct Node: Equatable {
    let kind: mode_t
    let mode: mode_t
    let owner: uid_t

    init?(_ url: URL) {
        var info = stat()
        guard lstat(url.path, &info) == 0 else { return nil }
        (kind, mode, owner) = (info.st_mode & mode_t(S_IFMT), info.st_mode & 0o7777, info.st_uid)
    }

    var isFolder: Bool { kind == mode_t(S_IFDIR) }
    var isLink: Bool { kind == mode_t(S_IFLNK) }
    var isFile: Bool { kind == mode_t(S_IFREG) }
}

/// Records the notices and sends of the requests it sees, in order.
private final class NoticeLog: RequestEventMonitor, @unchecked Sendable {
    let events = Recorder<String>()
    func requestWillSend(_ attempt: RequestAttempt) { events.append("send \(attempt.number)") }
    func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice) {
        if case let .resumeStateRefused(reason) = notice { events.append("refused: \(reason)") }
    }
}

/// Partial and finished downloads are private to this user: files 0600 in folders 0700, and a shared temporary
/// directory where another user got to Requests' folder name first is not written through.
final class PrivateFilesTests: OwnTemporaryDirectoryTestCase {
    private let server = TestServer.shared
    private let uid = getuid()
    /// The test's own folder: a temporary directory for the library (`TMPDIR`), victims, destinations.

    /// Where the library's per-user folder is, by its name.
    private var sharedFolder: URL { temporary.appendingPathComponent("Requests-\(uid)", isDirectory: true) }

    private func serve(cutFirstAt cut: Int? = nil) -> (URL, SeenRequests) {
        let path = "/private/\(UUID().uuidString)"
        let seen = SeenRequests()
        server.resource(path) { request in
            seen.append(request)
            return LoopbackResource(length: resourceLength, cutAfter: seen.all.count == 1 ? cut : nil)
        }
        return (server.url(path), seen)
    }

    private func download(
        _ request: FileDownload, resumingFrom state: ResumeState?, policies: RequestPolicies = RequestPolicies()
    ) -> (Result<URL, Error>, ResumeState?) {
        let queue = OperationQueue()
        queue.requestPolicies = policies
        let results = Recorder<(Result<URL, Error>, ResumeState?)>()
        queue.addRequest(request, resumingFrom: state, session: testSession) { results.append(($0, $1)) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1, "exactly one completion")
        return results.values.first ?? (.failure(RequestQueueError.misuse("no completion")), nil)
    }

    /// A state for the first 300,000 bytes of a download that failed there.
    private func keptState(file: StaticString = #filePath, line: UInt = #line) throws -> ResumeState {
        let (url, _) = serve(cutFirstAt: 300_000)
        let (_, state) = download(FileDownload(url: url), resumingFrom: nil)
        return try XCTUnwrap(state, file: file, line: line)
    }

    private func assertWhole(_ url: URL?, file: StaticString = #filePath, line: UInt = #line) {
        let data = url.flatMap { FileManager.default.contents(atPath: $0.path) }
        XCTAssertTrue(data == LoopbackResource.content(length: resourceLength), "the whole resource", file: file, line: line)
    }

    /// `url` is a file of this user, 0600, in a real folder of this user, 0700, that is not `notIn`.
    private func assertPrivate(_ url: URL?, notIn other: URL? = nil, file: StaticString = #filePath, line: UInt = #line) {
        guard let url else { return XCTFail("no file", file: file, line: line) }
        let node = Node(url)
        XCTAssertEqual(node?.isFile, true, "\(url.path) is a regular file", file: file, line: line)
        XCTAssertEqual(node?.mode, 0o600, "\(url.path) is 0600", file: file, line: line)
        XCTAssertEqual(node?.owner, uid, file: file, line: line)
        let folder = url.deletingLastPathComponent()
        let parent = Node(folder)
        XCTAssertEqual(parent?.isFolder, true, "\(folder.path) is a real folder", file: file, line: line)
        XCTAssertEqual(parent?.mode, 0o700, "\(folder.path) is 0700", file: file, line: line)
        XCTAssertEqual(parent?.owner, uid, file: file, line: line)
        if let other {
            XCTAssertNotEqual(folder.resolvingSymlinksInPath().path, other.resolvingSymlinksInPath().path, file: file, line: line)
        }
    }

    // MARK: - Modes

    func testPartialAndDefaultLocationDownloadsAre0600InA0700FolderOfThisUser() throws {
        // Given a download that failed part-way: its partial file is in the per-user folder, private
        let state = try keptState()
        XCTAssertEqual(state.partialFile.deletingLastPathComponent().standardizedFileURL.path, sharedFolder.standardizedFileURL.path)
        assertPrivate(state.partialFile)

        // When it is resumed to the default location: the finished file is private too, in a folder of its own
        let (url, _) = serve()
        let (result, _) = download(FileDownload(url: url), resumingFrom: state)
        let finished = try result.get()
        assertWhole(finished)
        assertPrivate(finished)
        XCTAssertTrue(finished.deletingLastPathComponent().lastPathComponent.hasPrefix("Requests-Downloads-"))
    }

    func testADownloadToTheCallersDestinationIs0600AndItsFolderIsLeftAsItWas() throws {
        let folder = root.appendingPathComponent("mine", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        XCTAssertEqual(chmod(folder.path, 0o755), 0)
        let (url, _) = serve()

        let (result, _) = download(FileDownload(url: url, destination: folder.appendingPathComponent("file.bin")), resumingFrom: nil)

        let finished = try result.get()
        assertWhole(finished)
        XCTAssertEqual(Node(finished)?.mode, 0o600)
        XCTAssertEqual(Node(folder)?.mode, 0o755, "the caller's folder is not changed")
    }

    func testAFileCopiedToAnotherFileSystemIs0600Too() throws {
        // Given a destination on another file system than the temporary directory (a copy, not a rename)
        var here = stat(), there = stat()
        let other = URL(fileURLWithPath: "/dev/shm", isDirectory: true)
        guard stat(temporary.path, &here) == 0, stat(other.path, &there) == 0, here.st_dev != there.st_dev, access(other.path, W_OK) == 0 else {
            throw XCTSkip("no writable folder on another file system")
        }
        let folder = other.appendingPathComponent("private-files-\(UUID().uuidString)", isDirectory: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (url, _) = serve()

        let (result, _) = download(FileDownload(url: url, destination: folder.appendingPathComponent("file.bin")), resumingFrom: nil)

        let finished = try result.get()
        assertWhole(finished)
        XCTAssertEqual(Node(finished)?.mode, 0o600)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: sharedFolder.path), [], "the partial file went")
    }

    // MARK: - The per-user folder's name taken first

    func testAFolderOfOursWithALooserModeIsTightenedAndUsedWithItsContentsKept() throws {
        // Given the per-user folder made earlier with mode 0755, holding a file
        try FileManager.default.createDirectory(at: sharedFolder, withIntermediateDirectories: true)
        XCTAssertEqual(chmod(sharedFolder.path, 0o755), 0)
        let other = sharedFolder.appendingPathComponent("other.txt")
        try Data("kept".utf8).write(to: other)

        // When a download keeps a partial file
        let state = try keptState()

        // Then the folder was tightened to 0700 and used, and what it held is still there
        XCTAssertEqual(state.partialFile.deletingLastPathComponent().standardizedFileURL.path, sharedFolder.standardizedFileURL.path)
        assertPrivate(state.partialFile)
        XCTAssertEqual(FileManager.default.contents(atPath: other.path), Data("kept".utf8))
        state.discard()
    }

    func testALinkWithTheFolderNameIsNotFollowedAndDownloadsStillWork() throws {
        // Given a link with the per-user folder's name, to a victim folder
        let victim = root.appendingPathComponent("victim", isDirectory: true)
        try FileManager.default.createDirectory(at: victim, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: sharedFolder, withDestinationURL: victim)

        // When a download keeps a partial file, resumes from it, and another goes to the default location
        let state = try keptState()
        assertPrivate(state.partialFile, notIn: victim)
        let (url, seen) = serve()
        let (resumed, _) = download(FileDownload(url: url), resumingFrom: state)
        let (plain, _) = download(FileDownload(url: url), resumingFrom: nil)

        // Then they used a folder of their own, the resume worked there, and the victim folder is empty
        XCTAssertEqual(seen.ranges, ["bytes=300000-", nil], "resumed within the process from the folder used instead")
        assertWhole(try resumed.get())
        assertPrivate(try plain.get(), notIn: victim)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: victim.path), [], "nothing written through the link")
        XCTAssertEqual(Node(sharedFolder)?.isLink, true, "the link is left alone")
    }

    func testAFolderOfAnotherUserOrAFileWithTheNameIsAvoidedAndLeftAlone() throws {
        // Given the per-user folder's name taken by a folder open to all that belongs to someone else
        try FileManager.default.createDirectory(at: sharedFolder, withIntermediateDirectories: true)
        guard chown(sharedFolder.path, 65_534, 65_534) == 0 else { throw XCTSkip("needs root to give a folder to another user") }
        XCTAssertEqual(chmod(sharedFolder.path, 0o777), 0)

        // When a download keeps a partial file
        let state = try keptState()

        // Then it is not in that folder, which is unchanged and empty
        assertPrivate(state.partialFile, notIn: sharedFolder)
        XCTAssertEqual(Node(sharedFolder), Node(kind: mode_t(S_IFDIR), mode: 0o777, owner: 65_534))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: sharedFolder.path), [])
        state.discard()

        // And a plain file with that name is avoided too, and keeps its bytes
        try FileManager.default.removeItem(at: sharedFolder)
        try Data("mine".utf8).write(to: sharedFolder)
        let second = try keptState()
        assertPrivate(second.partialFile, notIn: sharedFolder)
        XCTAssertEqual(FileManager.default.contents(atPath: sharedFolder.path), Data("mine".utf8))
        second.discard()
    }

    // MARK: - The primitives

    func testEnsureRefusesALinkOrAFileAndCreateFileNeverOpensWhatExists() throws {
        let victim = root.appendingPathComponent("victim", isDirectory: true)
        try FileManager.default.createDirectory(at: victim, withIntermediateDirectories: true)
        XCTAssertEqual(chmod(victim.path, 0o755), 0)
        let link = root.appendingPathComponent("link")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: victim)
        XCTAssertThrowsError(try PrivateFolder.ensure(link)) { XCTAssertEqual($0 as? PrivateFolder.Refusal, .notAFolder(path: link.path)) }
        XCTAssertEqual(Node(victim)?.mode, 0o755, "the link's target is not tightened")

        let made = try PrivateFolder.ensure(root.appendingPathComponent("made", isDirectory: true))
        XCTAssertEqual(Node(made), Node(kind: mode_t(S_IFDIR), mode: 0o700, owner: uid))

        // A file with the name, and a link to a file that does not exist yet: neither is opened nor created.
        let existing = root.appendingPathComponent("existing")
        try Data("precious".utf8).write(to: existing)
        let dangling = root.appendingPathComponent("dangling")
        let target = victim.appendingPathComponent("created-through-a-link")
        try FileManager.default.createSymbolicLink(at: dangling, withDestinationURL: target)
        XCTAssertThrowsError(try PrivateFolder.ensure(existing))
        for taken in [existing, dangling] {
            XCTAssertThrowsError(try PrivateFolder.createFile(at: taken)) { XCTAssertEqual(($0 as? POSIXError)?.code, .EEXIST) }
        }
        XCTAssertEqual(FileManager.default.contents(atPath: existing.path), Data("precious".utf8))
        XCTAssertNil(Node(target), "nothing created through the link")
    }

    // MARK: - A refused state is told to monitors

    func testARefusedStateIsToldOnceBeforeTheFirstSendAndTheDownloadStartsFromZero() throws {
        let kept = try keptState()
        defer { kept.discard() }
        let victim = root.appendingPathComponent("victim.txt")
        try Data("precious".utf8).write(to: victim)
        func edited(file: URL? = nil, bytes: Int64? = nil) -> ResumeState {
            ResumeState(
                url: kept.url, validator: kept.validator, bytesReceived: bytes ?? kept.bytesReceived, expectedLength: kept.expectedLength,
                partialFile: file ?? kept.partialFile, destination: nil)
        }
        let gone = kept.partialFile.deletingLastPathComponent().appendingPathComponent("Requests-download-\(UUID().uuidString)")
        let cases: [(ResumeState, String)] = [
            (edited(bytes: 0), "counts make no sense"),
            (edited(file: victim, bytes: 8), "not a partial file of this user made by Requests"),
            (edited(file: gone), "the partial file is gone"),
        ]
        for (state, reason) in cases {
            // Given a first response cut short, so that the download takes two attempts
            let (url, seen) = serve(cutFirstAt: 100_000)
            let log = NoticeLog()
            let policies = RequestPolicies(retryPolicy: quickRetry, monitors: [log])

            let (result, _) = download(FileDownload(url: url), resumingFrom: state, policies: policies)

            // Then monitors were told once, before the first send, and the download started from zero
            XCTAssertEqual(log.events.values, ["refused: \(reason)", "send 1", "send 2"], reason)
            XCTAssertEqual(seen.ranges, [nil, "bytes=100000-"], reason)
            assertWhole(try? result.get())
        }
        XCTAssertEqual(FileManager.default.contents(atPath: victim.path), Data("precious".utf8))
        XCTAssertEqual(FileSink.size(of: kept.partialFile), kept.bytesReceived, "the real partial file is untouched")

        // And a state that passes every check is not told
        let (url, seen) = serve()
        let log = NoticeLog()
        let (result, _) = download(FileDownload(url: url), resumingFrom: kept, policies: RequestPolicies(monitors: [log]))
        XCTAssertEqual(log.events.values, ["send 1"])
        XCTAssertEqual(seen.ranges, ["bytes=300000-"])
        assertWhole(try? result.get())
    }
}

extension Node {
    fileprivate init(kind: mode_t, mode: mode_t, owner: uid_t) {
        (self.kind, self.mode, self.owner) = (kind, mode, owner)
    }
}
