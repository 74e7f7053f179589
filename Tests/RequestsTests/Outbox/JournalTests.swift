import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal on the real file system: what it keeps across reopening, its ids, its folder's privacy, its lock.
final class JournalTests: XCTestCase {
    func testCRC32CMatchesTheCheckValues() {
        XCTAssertEqual(CRC32C.checksum(Data("123456789".utf8)), 0xE306_9283)
        XCTAssertEqual(CRC32C.checksum(Data()), 0)
        // RFC 3720, B.4.
        XCTAssertEqual(CRC32C.checksum(Data(count: 32)), 0x8A91_36AA)
        XCTAssertEqual(CRC32C.checksum(Data(repeating: 0xFF, count: 32)), 0x62A8_AB43)
        XCTAssertEqual(CRC32C.checksum(Data((0..<32).map { UInt8($0) })), 0x46DD_794E)
        XCTAssertEqual(CRC32C.checksum(Data((0..<32).map { UInt8(31 - $0) })), 0x113F_DB5C)
        // Continuing over pieces of every length gives the checksum of the whole (the 8-byte loop and the tail).
        let bytes = Data((0..<100).map { UInt8(truncatingIfNeeded: $0 * 37) })
        for split in 0...bytes.count {
            XCTAssertEqual(CRC32C.checksum(bytes.suffix(from: split), continuing: CRC32C.checksum(bytes.prefix(split))), CRC32C.checksum(bytes))
        }
    }

    func testRecordsSurviveReopeningWithTheirIdsAndLatestPayloads() throws {
        let folder = makeJournalFolder(self)
        var journal: Journal? = try Journal(directory: folder)
        let first = try XCTUnwrap(journal).append([samplePayload(1), samplePayload(2), samplePayload(3)])
        let second = try XCTUnwrap(journal).append([samplePayload(4)])
        XCTAssertEqual(first + second, [1, 2, 3, 4])
        try journal?.update(2, payload: Data("two, updated".utf8))
        try journal?.remove([3, 99])
        XCTAssertEqual(journal?.liveCount, 3)
        XCTAssertThrowsError(try journal?.update(3, payload: Data())) { XCTAssertEqual($0 as? JournalError, .unknownRecord(3)) }
        journal?.close()
        journal = nil

        let reopened = try Journal(directory: folder)
        XCTAssertEqual(
            reopened.recovered,
            [JournalRecord(id: 1, payload: samplePayload(1)), JournalRecord(id: 2, payload: Data("two, updated".utf8)), JournalRecord(id: 4, payload: samplePayload(4))])
        XCTAssertEqual(reopened.liveCount, 3)
        XCTAssertEqual(try reopened.append([Data()]), [5], "ids keep growing after a reopen")
        reopened.releaseRecovered()
        XCTAssertEqual(reopened.recovered, [])
    }

    func testIdsAreNeverReusedEvenWhenEverythingWasRemovedAndCompacted() throws {
        let folder = makeJournalFolder(self)
        var options = Journal.Options()
        options.compactionMinimum = 0
        let log = JournalEventLog()
        var journal: Journal? = try Journal(directory: folder, options: options, fileSystem: PosixJournalFileSystem(), events: log.handler)
        let ids = try XCTUnwrap(journal).append((0..<10).map { samplePayload($0) })
        try journal?.remove(ids)
        XCTAssertTrue(log.events.contains { if case .compacted = $0 { return true } else { return false } }, "\(log.events)")
        let size = try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("journal").path)[.size] as? Int
        XCTAssertEqual(size, JournalFormat.fileHeaderSize + Int(options.reserve), "only the header is left, and the reserve of zeros")
        journal = nil
        let reopened = try Journal(directory: folder)
        XCTAssertEqual(reopened.recovered, [])
        XCTAssertEqual(try reopened.append([Data()]), [11])
    }

    func testTheEventHandlerMayCallTheJournal() throws {
        var options = Journal.Options()
        options.compactionMinimum = 0
        let box = JournalBox()
        let appended = expectation(description: "the handler appended")
        let journal = try Journal(directory: makeJournalFolder(self), options: options, fileSystem: PosixJournalFileSystem()) { event in
            guard case .compacted = event, let journal = box.journal else { return }
            XCTAssertEqual(journal.liveCount, 0)
            if (try? journal.append([samplePayload(9)])) != nil { appended.fulfill() }
        }
        box.journal = journal
        try journal.remove(try journal.append([samplePayload(1)]))
        wait(for: [appended], timeout: 10)
        XCTAssertEqual(journal.liveCount, 1)
    }

    func testCallsAfterCloseThrowClosedAndTheFolderCanBeOpenedAgain() throws {
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder)
        try journal.append([samplePayload(1)])
        journal.close()
        journal.close()
        XCTAssertThrowsError(try journal.append([samplePayload(2)])) { XCTAssertEqual($0 as? JournalError, .closed) }
        XCTAssertThrowsError(try journal.remove([1])) { XCTAssertEqual($0 as? JournalError, .closed) }
        XCTAssertThrowsError(try journal.update(1, payload: Data())) { XCTAssertEqual($0 as? JournalError, .closed) }
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), [1])
    }

    func testTooLargeARecordIsRefusedAndNothingOfItsCallIsStored() throws {
        var options = Journal.Options()
        options.maximumPayloadSize = 100
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder, options: options, fileSystem: PosixJournalFileSystem())
        XCTAssertThrowsError(try journal.append([samplePayload(1), Data(count: 101)])) {
            XCTAssertEqual($0 as? JournalError, .recordTooLarge(size: 101, limit: 100))
        }
        XCTAssertEqual(try journal.append([Data(count: 100)]), [1])
        XCTAssertEqual(journal.liveCount, 1)
        XCTAssertEqual(try journal.append([]), [])
    }

    func testTheFolderIsPrivateAndItsFilesToo() throws {
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder)
        try journal.append([samplePayload(1)])
        XCTAssertEqual(try mode(of: folder), 0o700)
        XCTAssertEqual(try mode(of: folder.appendingPathComponent("journal")), 0o600)
        XCTAssertEqual(try mode(of: folder.appendingPathComponent("journal.lock")), 0o600)
        journal.close()
        // An existing folder of this user with a looser mode is tightened; so are its files.
        XCTAssertEqual(chmod(folder.path, 0o755), 0)
        XCTAssertEqual(chmod(folder.appendingPathComponent("journal").path, 0o644), 0)
        _ = try Journal(directory: folder)
        XCTAssertEqual(try mode(of: folder), 0o700)
        XCTAssertEqual(try mode(of: folder.appendingPathComponent("journal")), 0o600)
    }

    func testASymbolicLinkIsRefusedForTheFolderAndForTheJournalFile() throws {
        let folder = makeJournalFolder(self)
        let real = folder.deletingLastPathComponent().appendingPathComponent("real")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: folder, withDestinationURL: real)
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .isSymbolicLink(folder)) }

        let other = folder.deletingLastPathComponent().appendingPathComponent("other")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        let target = other.appendingPathComponent("elsewhere")
        XCTAssertTrue(FileManager.default.createFile(atPath: target.path, contents: Data()))
        try FileManager.default.createSymbolicLink(at: other.appendingPathComponent("journal"), withDestinationURL: target)
        XCTAssertThrowsError(try Journal(directory: other)) {
            XCTAssertEqual($0 as? JournalError, .isSymbolicLink(other.appendingPathComponent("journal")))
        }
        XCTAssertEqual(try Data(contentsOf: target), Data(), "the link's target is not written")
    }

    func testAFileIsRefusedAsTheFolder() throws {
        let folder = makeJournalFolder(self)
        try FileManager.default.createDirectory(at: folder.deletingLastPathComponent(), withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.createFile(atPath: folder.path, contents: Data("x".utf8)))
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .notADirectory(folder)) }
    }

    func testAFolderOfAnotherUserIsRefused() throws {
        let folder = makeJournalFolder(self)
        if getuid() == 0 {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            XCTAssertEqual(chown(folder.path, 65534, 65534), 0)
            XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .notOwnedByUser(folder)) }
        } else {
            // The root folder belongs to root.
            let root = URL(fileURLWithPath: "/")
            XCTAssertThrowsError(try Journal(directory: root)) { XCTAssertEqual($0 as? JournalError, .notOwnedByUser(root)) }
        }
    }

    func testASecondJournalOnTheSameFolderIsRefusedUntilTheFirstCloses() throws {
        let folder = makeJournalFolder(self)
        let first = try Journal(directory: folder)
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .lockedByAnotherProcess(folder)) }
        XCTAssertEqual(try first.append([samplePayload(1)]), [1], "the refused open changed nothing")
        first.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), [1])
    }

    #if os(macOS) || os(Linux)
    func testAnotherProcessHoldingTheLockIsRefused() throws {
        let flockTool = ["/usr/bin/flock", "/bin/flock"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let flockTool else { throw XCTSkip("no flock(1) to hold the lock from another process") }
        let folder = makeJournalFolder(self)
        try Journal(directory: folder).close()
        // A child process takes the lock, says so, and holds it until its input closes.
        let child = Process()
        child.executableURL = URL(fileURLWithPath: flockTool)
        child.arguments = ["--exclusive", folder.appendingPathComponent("journal.lock").path, "sh", "-c", "echo locked; cat > /dev/null"]
        let input = Pipe()
        let output = Pipe()
        child.standardInput = input
        child.standardOutput = output
        try child.run()
        let line = output.fileHandleForReading.readData(ofLength: 7)
        XCTAssertEqual(String(decoding: line, as: UTF8.self), "locked\n")
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .lockedByAnotherProcess(folder)) }
        try input.fileHandleForWriting.close()
        child.waitUntilExit()
        XCTAssertEqual(child.terminationStatus, 0)
        XCTAssertNoThrow(try Journal(directory: folder))
    }
    #endif

    func testErrorsDescribeThemselves() {
        let url = URL(fileURLWithPath: "/tmp/x")
        let errors: [JournalError] = [
            .lockedByAnotherProcess(url), .notADirectory(url), .notOwnedByUser(url), .isSymbolicLink(url),
            .recordTooLarge(size: 2, limit: 1), .writeFailed(errno: ENOSPC, operation: "write"), .closed,
            .unsupportedVersion(url, version: 9), .unknownRecord(4),
        ]
        for error in errors { XCTAssertFalse(error.description.isEmpty) }
        XCTAssertTrue(JournalError.writeFailed(errno: ENOSPC, operation: "write").description.contains("No space left on device"))
    }

    func testTheSyncModeReachesTheFileSystemAndOpeningAndCutOffsSyncFully() throws {
        XCTAssertEqual(Journal.Options().sync, .full, "full sync unless asked otherwise")
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        var options = Journal.Options.exactSize
        options.sync = .barrier
        options.compactionMinimum = 10
        let log = JournalEventLog()
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem, events: log.handler)
        XCTAssertEqual(fileSystem.syncModes, [.full], "what opening recovered is synced fully")
        let ids = try journal.append([samplePayload(1), samplePayload(2)])
        XCTAssertEqual(fileSystem.syncModes, [.full, .barrier])
        // A removal that compacts: the group's sync and the new file's.
        try journal.remove([ids[0]])
        guard case .compacted? = log.events.last else { return XCTFail("compacted: \(log.events)") }
        XCTAssertEqual(fileSystem.syncModes, [.full, .barrier, .barrier, .barrier])
        // A failed group's cut-off is full whatever the mode: the group must not come back after a power loss.
        let failing = fileSystem.count(.syncData) + 1
        fileSystem.setFault { call, number, _ in call == .syncData && number == failing ? .fail(errno: EIO, writtenFirst: 0) : nil }
        XCTAssertThrowsError(try journal.append([samplePayload(3)]))
        XCTAssertEqual(fileSystem.syncModes.suffix(1), [.full], "the failed sync was not made; the cut-off's was, fully")
        XCTAssertEqual(try journal.append([samplePayload(4)]), [4])
        journal.close()
        // On Linux both modes are fdatasync: the real file system takes either.
        var reopenOptions = Journal.Options()
        reopenOptions.sync = .barrier
        let reopened = try Journal(directory: folder, options: reopenOptions, fileSystem: PosixJournalFileSystem())
        XCTAssertEqual(reopened.recovered, [JournalRecord(id: 2, payload: samplePayload(2)), JournalRecord(id: 4, payload: samplePayload(4))])
        XCTAssertEqual(try reopened.append([samplePayload(5)]), [5])
    }

    private func mode(of url: URL) throws -> Int {
        try XCTUnwrap(FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int)
    }
}

/// A journal set after its handler was made.
private final class JournalBox: @unchecked Sendable {
    var journal: Journal?
}
