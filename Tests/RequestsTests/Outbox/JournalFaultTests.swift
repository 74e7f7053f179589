import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Failed system calls on the real file system (a full disk, a failed sync), injected at a chosen call: the call
/// throws, nothing of it remains, and the journal works again once the calls succeed. Also group commit itself:
/// queued calls share one write and one sync, and share its failure.
final class JournalFaultTests: XCTestCase {
    private func open(_ folder: URL, _ fileSystem: FaultyFileSystem, compactionMinimum: UInt64 = .max, events: JournalEventLog? = nil) throws -> Journal {
        var options = Journal.Options()
        options.compactionMinimum = compactionMinimum
        // These tests read the file's size as its content's: no zeros written ahead.
        options.preallocation = 0
        return try Journal(directory: folder, options: options, fileSystem: fileSystem, events: events?.handler)
    }

    private func fileSize(_ folder: URL) throws -> Int {
        try XCTUnwrap(FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("journal").path)[.size] as? Int)
    }

    func testAFullDiskInTheMiddleOfAWriteLeavesNothingAndTheNextAppendWorks() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        try journal.append([samplePayload(1)])
        let before = try fileSize(folder)
        let failing = fileSystem.count(.write) + 1
        fileSystem.setFault { call, number, _ in call == .write && number == failing ? .fail(errno: ENOSPC, writtenFirst: 40) : nil }
        XCTAssertThrowsError(try journal.append([samplePayload(2, size: 100), samplePayload(3)])) {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: ENOSPC, operation: "write"))
        }
        XCTAssertEqual(try fileSize(folder), before, "the 40 bytes written were cut off")
        XCTAssertEqual(journal.liveCount, 1)
        // Space is back.
        XCTAssertEqual(try journal.append([samplePayload(4)]), [4], "the failed call's ids are not given again")
        journal.close()
        let reopened = try Journal(directory: folder)
        XCTAssertEqual(reopened.recovered, [JournalRecord(id: 1, payload: samplePayload(1)), JournalRecord(id: 4, payload: samplePayload(4))])
    }

    func testAFailedSyncAfterACompleteWriteLeavesNothing() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        try journal.append([samplePayload(1)])
        let before = try fileSize(folder)
        let failing = fileSystem.count(.syncData) + 1
        fileSystem.setFault { call, number, _ in call == .syncData && number == failing ? .fail(errno: EIO, writtenFirst: 0) : nil }
        XCTAssertThrowsError(try journal.update(1, payload: samplePayload(10))) {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: EIO, operation: "syncData"))
        }
        XCTAssertEqual(try fileSize(folder), before, "the complete but unsynced record was cut off")
        try journal.remove([1])
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered, [])
    }

    func testWhenEvenTheCutOffFailsItIsRetriedBeforeTheNextWriteAndAtClose() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        try journal.append([samplePayload(1)])
        let before = try fileSize(folder)
        let failingSync = fileSystem.count(.syncData) + 1
        let failingTruncate = fileSystem.count(.truncate) + 1
        fileSystem.setFault { call, number, _ in
            switch call {
            case .syncData where number == failingSync: return .fail(errno: EIO, writtenFirst: 0)
            case .truncate where number == failingTruncate: return .fail(errno: EIO, writtenFirst: 0)
            default: return nil
            }
        }
        XCTAssertThrowsError(try journal.append([samplePayload(2)]))
        XCTAssertGreaterThan(try fileSize(folder), before, "the record is still in the file: its cut-off failed")
        XCTAssertEqual(try journal.append([samplePayload(3)]), [3])
        XCTAssertEqual(try Data(contentsOf: folder.appendingPathComponent("journal")).count, before + JournalFormat.recordHeaderSize + samplePayload(3).count)
        // And at close: a failed call whose cut-off failed, then nothing more but close.
        let secondSync = fileSystem.count(.syncData) + 1
        let secondTruncate = fileSystem.count(.truncate) + 1
        fileSystem.setFault { call, number, _ in
            (call == .syncData && number == secondSync) || (call == .truncate && number == secondTruncate) ? .fail(errno: EIO, writtenFirst: 0) : nil
        }
        XCTAssertThrowsError(try journal.append([samplePayload(4)]))
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), [1, 3])
    }

    func testQueuedCallsShareOneWriteAndOneSyncAndAllGetItsError() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        let firstWrite = fileSystem.count(.write) + 1
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        fileSystem.setFault { call, number, _ in
            guard call == .write else { return nil }
            if number == firstWrite {
                // The leader's write waits here while the other calls queue.
                entered.signal()
                release.wait()
            }
            return number == firstWrite + 2 ? .fail(errno: ENOSPC, writtenFirst: 10) : nil
        }
        let results = JournalCallResults()
        let done = DispatchGroup()
        func start(_ number: Int, count: Int) {
            done.enter()
            Thread.detachNewThread {
                let payloads = (0..<count).map { samplePayload(number * 100 + $0) }
                results.store(number, Result { try journal.append(payloads) })
                done.leave()
            }
        }
        start(0, count: 1)
        entered.wait()
        for number in 1...7 { start(number, count: 3) }
        waitUntil("seven calls queued") { journal.queuedCallCount == 7 }
        let (writes, syncs) = (fileSystem.count(.write), fileSystem.count(.syncData))
        release.signal()
        done.wait()
        XCTAssertEqual(fileSystem.count(.write), writes + 1, "the seven queued calls were one write")
        XCTAssertEqual(fileSystem.count(.syncData), syncs + 2, "the leader's sync and the group's")
        XCTAssertEqual(try results.get(0).get(), [1])
        let groupIDs = try (1...7).flatMap { try results.get($0).get() }
        XCTAssertEqual(groupIDs.sorted(), Array(2...22), "ids in queue order, none shared")
        XCTAssertEqual(journal.liveCount, 22)

        // The next group fails as a whole: every call in it gets the error; the one after it works.
        let enteredAgain = DispatchSemaphore(value: 0)
        let releaseAgain = DispatchSemaphore(value: 0)
        fileSystem.setFault { call, number, _ in
            guard call == .write else { return nil }
            if number == firstWrite + 2 {
                enteredAgain.signal()
                releaseAgain.wait()
            }
            return number == firstWrite + 3 ? .fail(errno: ENOSPC, writtenFirst: 100) : nil
        }
        start(8, count: 2)
        enteredAgain.wait()
        for number in 9...11 { start(number, count: 2) }
        waitUntil("three calls queued") { journal.queuedCallCount == 3 }
        releaseAgain.signal()
        done.wait()
        XCTAssertEqual(try results.get(8).get(), [23, 24])
        for number in 9...11 {
            XCTAssertThrowsError(try results.get(number).get()) { XCTAssertEqual($0 as? JournalError, .writeFailed(errno: ENOSPC, operation: "write")) }
        }
        XCTAssertEqual(journal.liveCount, 24)
        XCTAssertEqual(try journal.append([samplePayload(5)]).count, 1)
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.count, 25)
    }

    func testManyPayloadsOfOneCallAreOneWriteAndOneSync() throws {
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(makeJournalFolder(self), fileSystem)
        let (writes, syncs) = (fileSystem.count(.write), fileSystem.count(.syncData))
        XCTAssertEqual(try journal.append((0..<100).map { samplePayload($0) }), Array(1...100))
        XCTAssertEqual(fileSystem.count(.write), writes + 1)
        XCTAssertEqual(fileSystem.count(.syncData), syncs + 1)
    }

    func testAFailedCompactionKeepsTheJournalAsItWasAndIsTriedAgainLater() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let log = JournalEventLog()
        let journal = try open(folder, fileSystem, compactionMinimum: 1000, events: log)
        let ids = try journal.append((0..<40).map { samplePayload($0, size: 20) })
        let compactionOpen = fileSystem.count(.openFile) + 1
        // The first compaction's file fills the disk at its first write.
        let failingWrite = fileSystem.count(.write) + 2
        fileSystem.setFault { call, number, _ in call == .write && number == failingWrite ? .fail(errno: ENOSPC, writtenFirst: 5) : nil }
        try journal.remove(Array(ids.prefix(30)))
        XCTAssertEqual(fileSystem.count(.openFile), compactionOpen, "a compaction was tried")
        XCTAssertEqual(log.events, [], "and failed")
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder.appendingPathComponent("journal.compacting").path), "its file was removed")
        XCTAssertEqual(journal.liveCount, 10)
        // Not retried at every call: only once the file grew by the minimum.
        try journal.append([samplePayload(100)])
        XCTAssertEqual(fileSystem.count(.openFile), compactionOpen)
        try journal.append([samplePayload(101, size: 1000)])
        try journal.remove([ids[30]])
        guard case .compacted? = log.events.last else { return XCTFail("compacted again once there was room: \(log.events)") }
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), Array(ids.suffix(9)) + [41, 42])
    }

    func testAFailedFolderSyncAfterACompactionIsRetriedBeforeAnythingIsWritten() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem, compactionMinimum: 10)
        let ids = try journal.append((0..<10).map { samplePayload($0) })
        let failing = fileSystem.count(.syncDirectory) + 1
        fileSystem.setFault { call, number, _ in call == .syncDirectory && number <= failing + 1 ? .fail(errno: EIO, writtenFirst: 0) : nil }
        try journal.remove(Array(ids.prefix(8)))
        XCTAssertEqual(fileSystem.count(.syncDirectory), failing, "the compaction's folder sync failed")
        let writes = fileSystem.count(.write)
        XCTAssertThrowsError(try journal.append([samplePayload(20)]), "its retry fails too: nothing may be written") {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: EIO, operation: "syncDirectory"))
        }
        XCTAssertEqual(fileSystem.count(.write), writes)
        XCTAssertEqual(try journal.append([samplePayload(21)]), [12])
        XCTAssertEqual(fileSystem.count(.syncDirectory), failing + 2)
    }

    func testAFailureWhileOpeningThrowsAndLeavesTheFolderUsable() throws {
        let folder = makeJournalFolder(self)
        try Journal(directory: folder).append([samplePayload(1)])
        for call in [FaultyFileSystem.Call.openFile, .lock, .removeFile, .size, .read] {
            let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
            fileSystem.setFault { made, _, _ in made == call ? .fail(errno: EIO, writtenFirst: 0) : nil }
            XCTAssertThrowsError(try open(folder, fileSystem), "\(call)") { XCTAssertEqual($0 as? JournalError, .writeFailed(errno: EIO, operation: call.rawValue)) }
        }
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), [1], "no lock was left held")
        // A new journal's header, and a torn tail's cut-off.
        let fresh = makeJournalFolder(self, "fresh")
        for call in [FaultyFileSystem.Call.truncate, .write, .syncData, .syncDirectory] {
            let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
            fileSystem.setFault { made, _, _ in made == call ? .fail(errno: ENOSPC, writtenFirst: 0) : nil }
            XCTAssertThrowsError(try open(fresh, fileSystem), "\(call)") { XCTAssertEqual($0 as? JournalError, .writeFailed(errno: ENOSPC, operation: call.rawValue)) }
        }
        let journal = try Journal(directory: fresh)
        XCTAssertEqual(try journal.append([samplePayload(1)]), [1])
        journal.close()
        let torn = try FileHandle(forWritingTo: fresh.appendingPathComponent("journal"))
        try torn.seekToEnd()
        try torn.write(contentsOf: Data("RQJR torn".utf8))
        try torn.close()
        for call in [FaultyFileSystem.Call.truncate, .syncData] {
            let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
            fileSystem.setFault { made, _, _ in made == call ? .fail(errno: EIO, writtenFirst: 0) : nil }
            XCTAssertThrowsError(try open(fresh, fileSystem), "\(call)") { XCTAssertEqual($0 as? JournalError, .writeFailed(errno: EIO, operation: call.rawValue)) }
        }
        XCTAssertEqual(try Journal(directory: fresh).recovered.map(\.id), [1])
    }
}

/// Results of calls made on other threads.
final class JournalCallResults: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [Int: Result<[UInt64], Error>] = [:]
    func store(_ number: Int, _ result: Result<[UInt64], Error>) { lock.withLock { results[number] = result } }
    func get(_ number: Int) throws -> Result<[UInt64], Error> { try XCTUnwrap(lock.withLock { results[number] }) }
}
