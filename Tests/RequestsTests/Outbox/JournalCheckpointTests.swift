import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The checkpoint file (`journal.state`): what it records, what it costs, and what opening a journal file that holds
/// less than it says reports (issue #47: a journal emptied, deleted, replaced or shortened is never taken for a new
/// one). And no false alarm: not after a close, a crash, a compaction, or a compaction whose rename is not durable.
final class JournalCheckpointTests: XCTestCase {
    private let folder = URL(fileURLWithPath: "/memory/journal")
    private var journalPath: String { folder.appendingPathComponent("journal").path }
    private var statePath: String { folder.appendingPathComponent("journal.state").path }

    /// A journal of 20 records, one call each, closed (no zeros written ahead: the file is its content).
    @discardableResult
    private func storeTwenty(in memory: MemoryFileSystem) throws -> Data {
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: memory)
        for number in 1...20 { try journal.append([samplePayload(number)]) }
        journal.close()
        return try XCTUnwrap(memory.contents(of: "journal"))
    }

    /// Opens the journal and returns it with what it reported.
    private func open(_ fileSystem: JournalFileSystem, options: Journal.Options = .exactSize) throws -> (Journal, [JournalEvent]) {
        let log = JournalEventLog()
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem, events: log.handler)
        return (journal, log.events)
    }

    /// The checkpoint as the memory disk holds it.
    private func stored(_ memory: MemoryFileSystem) -> JournalStoredCheckpoint {
        JournalCheckpoint.read(memory.contents(of: "journal.state") ?? Data())
    }

    /// The valid checkpoint the memory disk holds; throws (failing the test) if there is none.
    private func state(_ memory: MemoryFileSystem) throws -> JournalCheckpointState {
        guard case let .valid(state, _) = stored(memory) else { throw NoValidCheckpoint(found: stored(memory)) }
        return state
    }

    private struct NoValidCheckpoint: Error {
        var found: JournalStoredCheckpoint
    }

    /// The identity in the header of `bytes`, a journal file.
    private func identity(_ bytes: Data?) -> JournalFileIdentity? {
        guard let bytes else { return nil }
        guard case let .valid(floor, _, fileID) = bytes.withUnsafeBytes({ JournalFormat.parseFileHeader($0) }) else { return nil }
        return JournalFileIdentity(floor: floor, fileID: fileID)
    }

    /// The ends of the whole records of `bytes`, a journal file, in order.
    private func recordEnds(_ bytes: Data) -> [Int] {
        bytes.withUnsafeBytes { raw in
            var ends: [Int] = []
            var offset = JournalFormat.fileHeaderSize
            while let header = JournalFormat.parseRecord(raw, at: offset) {
                offset += header.size
                ends.append(offset)
            }
            return ends
        }
    }

    private func randomBytes(_ count: Int, seed: UInt64) -> Data {
        var generator = SplitMix64(seed: seed)
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    // MARK: - What it records, and what it costs

    func testEachGroupCommitWritesTheCheckpointOnceAndDoesNotSyncIt() throws {
        let memory = MemoryFileSystem()
        let fileSystem = FaultyFileSystem(memory)
        let (journal, events) = try open(fileSystem)
        XCTAssertEqual(events, [])
        let opened = try state(memory)
        XCTAssertEqual(opened.file, .init(identity: identity(memory.contents(of: "journal")), length: 32))
        XCTAssertNotEqual(opened.file.identity?.fileID, 0, "a new file gets a random file id")
        XCTAssertEqual(opened.replacement, nil)
        XCTAssertEqual(opened.liveRecords, 0)
        XCTAssertEqual(opened.highestID, 0)

        let (checkpointCalls, syncs) = (fileSystem.count(.checkpoint), fileSystem.count(.syncData))
        XCTAssertEqual(try journal.append([samplePayload(1), samplePayload(2)]), [1, 2])
        XCTAssertEqual(fileSystem.count(.checkpoint), checkpointCalls + 1, "one write of the checkpoint per group commit")
        XCTAssertEqual(fileSystem.count(.syncData), syncs + 1, "the journal's own sync, and none for the checkpoint")
        var after = try state(memory)
        XCTAssertEqual(after.file.length, UInt64(try XCTUnwrap(memory.contents(of: "journal")).count))
        XCTAssertEqual(after.liveRecords, 2)
        XCTAssertEqual(after.highestID, 2)
        XCTAssertGreaterThan(after.sequence, opened.sequence)

        try journal.remove([1])
        after = try state(memory)
        XCTAssertEqual(after.liveRecords, 1)
        XCTAssertEqual(after.highestID, 2)
        XCTAssertEqual(after.file.length, UInt64(try XCTUnwrap(memory.contents(of: "journal")).count))
        XCTAssertEqual(fileSystem.count(.checkpoint), checkpointCalls + 2)
        XCTAssertEqual(fileSystem.count(.syncData), syncs + 2)
        XCTAssertEqual(memory.contents(of: "journal.state")?.count, JournalCheckpoint.fileSize)
        journal.close()
    }

    func testASlotReadsBackAsWrittenAndAnythingElseIsRefused() throws {
        let identity = JournalFileIdentity(floor: 7, fileID: 0xDEAD_BEEF)
        let states = [
            JournalCheckpointState(file: .init(identity: identity, length: 1234), liveRecords: 5, highestID: 9),
            JournalCheckpointState(file: .init(identity: nil, length: 99), liveRecords: 0, highestID: 0),
            JournalCheckpointState(
                file: .init(identity: identity, length: 500), replacement: .init(identity: JournalFileIdentity(floor: 10, fileID: 3), length: 80),
                liveRecords: 2, highestID: 9),
        ]
        for (number, state) in states.enumerated() {
            let slot = JournalCheckpoint.encode(state, sequence: UInt64(40 + number))
            XCTAssertEqual(slot.count, JournalCheckpoint.slotSize)
            var expected = state
            expected.sequence = UInt64(40 + number)
            XCTAssertEqual(slot.withUnsafeBytes { JournalCheckpoint.decode($0) }, expected)
            // A reserved field set, with its checksum right, is not a slot this version wrote.
            for reserved in [52, 76, 92] {
                var bytes = slot
                bytes[reserved] = 1
                let crc = bytes.prefix(88).withUnsafeBytes { CRC32C.checksum($0) }
                withUnsafeBytes(of: crc.littleEndian) { bytes.replaceSubrange(88..<92, with: $0) }
                XCTAssertNil(bytes.withUnsafeBytes { JournalCheckpoint.decode($0) }, "reserved byte \(reserved)")
            }
        }
        // A highest id no journal reaches (it would overflow the next ids) is refused too.
        let huge = JournalCheckpoint.encode(
            JournalCheckpointState(file: .init(identity: identity, length: 32), liveRecords: 0, highestID: .max - 1), sequence: 1)
        XCTAssertNil(huge.withUnsafeBytes { JournalCheckpoint.decode($0) })
    }

    /// Group commits write the slot that is not the synced one: a torn write of it leaves the synced one, an older
    /// but true checkpoint.
    func testWritesGoToTheSlotThatIsNotSyncedAndATornOneFallsBackToTheOther() throws {
        let memory = MemoryFileSystem()
        try storeTwenty(in: memory)
        guard case let .valid(newest, slot) = stored(memory) else { return XCTFail("\(stored(memory))") }
        XCTAssertEqual(newest.liveRecords, 20)
        XCTAssertEqual(slot, 1, "slot 0 is the one synced at open")
        var bytes = try XCTUnwrap(memory.contents(of: "journal.state"))
        bytes[Int(JournalCheckpoint.slotOffsets[1]) + 30] ^= 0x40
        memory.setContents(of: "journal.state", to: bytes)
        guard case let .valid(older, 0) = stored(memory) else { return XCTFail("\(stored(memory))") }
        XCTAssertEqual(older.liveRecords, 0, "the state at open")

        let (journal, events) = try open(memory)
        XCTAssertEqual(events, [], "an older checkpoint is a lower bound: no alarm")
        XCTAssertEqual(journal.liveCount, 20)
        journal.close()
        // Both slots damaged: how far the journal got is unknown, and said so once.
        memory.setContents(of: "journal.state", to: randomBytes(JournalCheckpoint.fileSize, seed: 1))
        XCTAssertEqual(stored(memory), .damaged)
        let (again, damaged) = try open(memory)
        XCTAssertEqual(damaged, [.lost(file: statePath, kind: .checkpointDamaged, recordsAtCheckpoint: nil, recordsFound: 20)])
        XCTAssertEqual(again.liveCount, 20)
        again.close()
        XCTAssertEqual(try open(memory).1, [])
    }

    // MARK: - A journal file that lost what the checkpoint knew

    func testAJournalFileMissingEmptiedReplacedOrShortenedIsReportedOnce() throws {
        let other = MemoryFileSystem()
        let foreign = try Journal(directory: folder, options: .exactSize, fileSystem: other)
        try foreign.append([samplePayload(100), samplePayload(101), samplePayload(102)])
        foreign.close()
        let foreignFile = try XCTUnwrap(other.contents(of: "journal"))

        struct Case {
            var name: String
            var damage: (MemoryFileSystem, Data) throws -> Void
            var expected: (Data) -> [JournalEvent]
            var found: Int
        }
        let journalPath = self.journalPath
        let ends = recordEnds(try storeTwenty(in: MemoryFileSystem()))
        XCTAssertEqual(ends.count, 20)
        let half = ends[19] / 2
        let wholeBeforeHalf = ends.filter { $0 <= half }
        XCTAssertTrue(wholeBeforeHalf.count > 5 && wholeBeforeHalf.last != half, "the cut falls in the middle of a record")
        let cases: [Case] = [
            Case(
                name: "deleted", damage: { memory, _ in try memory.removeFile("journal", in: MemoryFileSystem.folder) },
                expected: { _ in [.lost(file: journalPath, kind: .missing, recordsAtCheckpoint: 20, recordsFound: 0)] }, found: 0),
            Case(
                name: "emptied", damage: { memory, _ in memory.setContents(of: "journal", to: Data()) },
                expected: { _ in [.lost(file: journalPath, kind: .emptied, recordsAtCheckpoint: 20, recordsFound: 0)] }, found: 0),
            Case(
                name: "random bytes of the same size",
                damage: { memory, file in memory.setContents(of: "journal", to: self.randomBytes(file.count, seed: 7)) },
                expected: { file in
                    // Not one damaged record ("skipped 1"), but the file: then rewritten with a header of its own.
                    [
                        .lost(file: journalPath, kind: .replaced, recordsAtCheckpoint: 20, recordsFound: 0),
                        .compacted(bytesBefore: UInt64(file.count), bytesAfter: 32),
                    ]
                }, found: 0),
            Case(
                name: "zeros of the same size", damage: { memory, file in memory.setContents(of: "journal", to: Data(count: file.count)) },
                expected: { file in
                    [
                        .lost(file: journalPath, kind: .replaced, recordsAtCheckpoint: 20, recordsFound: 0),
                        .compacted(bytesBefore: UInt64(file.count), bytesAfter: 32),
                    ]
                }, found: 0),
            Case(
                name: "another journal's file", damage: { memory, _ in memory.setContents(of: "journal", to: foreignFile) },
                expected: { _ in [.lost(file: journalPath, kind: .replaced, recordsAtCheckpoint: 20, recordsFound: 3)] }, found: 3),
            Case(
                name: "cut in half", damage: { memory, file in memory.setContents(of: "journal", to: file.prefix(half)) },
                expected: { _ in
                    [
                        .lost(file: journalPath, kind: .shortened, recordsAtCheckpoint: 20, recordsFound: wholeBeforeHalf.count),
                        .discardedTornTail(file: journalPath, offset: UInt64(wholeBeforeHalf.last ?? 0)),
                    ]
                }, found: wholeBeforeHalf.count),
            Case(
                name: "cut to 10 bytes", damage: { memory, file in memory.setContents(of: "journal", to: file.prefix(10)) },
                expected: { _ in
                    [
                        .lost(file: journalPath, kind: .shortened, recordsAtCheckpoint: 20, recordsFound: 0),
                        .discardedTornTail(file: journalPath, offset: 0),
                    ]
                }, found: 0),
            Case(
                name: "cut after its 12th record", damage: { memory, file in memory.setContents(of: "journal", to: file.prefix(ends[11])) },
                expected: { _ in [.lost(file: journalPath, kind: .shortened, recordsAtCheckpoint: 20, recordsFound: 12)] }, found: 12),
        ]
        for item in cases {
            let memory = MemoryFileSystem()
            let file = try storeTwenty(in: memory)
            try item.damage(memory, file)
            let (journal, events) = try open(memory)
            XCTAssertEqual(events, item.expected(file), item.name)
            XCTAssertEqual(journal.liveCount, item.found, item.name)
            XCTAssertEqual(try journal.append([Data("after".utf8)]), [21], "\(item.name): no id given before is given again")
            journal.close()
            let (again, reported) = try open(memory)
            XCTAssertEqual(reported, [], "\(item.name): reported once")
            XCTAssertEqual(again.liveCount, item.found + 1, item.name)
            again.close()
        }
    }

    /// An older copy of the same file put back (a restored backup): the same identity, but shorter.
    func testAnOlderCopyOfTheSameFileIsShortened() throws {
        let memory = MemoryFileSystem()
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: memory)
        for number in 1...10 { try journal.append([samplePayload(number)]) }
        let older = try XCTUnwrap(memory.contents(of: "journal"))
        for number in 11...20 { try journal.append([samplePayload(number)]) }
        journal.close()
        memory.setContents(of: "journal", to: older)
        let (reopened, events) = try open(memory)
        XCTAssertEqual(events, [.lost(file: journalPath, kind: .shortened, recordsAtCheckpoint: 20, recordsFound: 10)])
        XCTAssertEqual(reopened.recovered.map(\.id), Array(1...10))
        XCTAssertEqual(try reopened.append([Data()]), [21])
    }

    /// The file's length is what the checkpoint knew, but its last record was overwritten with an earlier one of the
    /// same size: the ids found stop below the checkpoint's highest.
    func testIdsThatStopBelowTheCheckpointsHighestAreShortened() throws {
        let memory = MemoryFileSystem()
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: memory)
        for number in 1...20 { try journal.append([Data(repeating: UInt8(number), count: 16)]) }
        journal.close()
        var bytes = try XCTUnwrap(memory.contents(of: "journal"))
        let size = JournalFormat.recordHeaderSize + 16
        XCTAssertEqual(bytes.count, 32 + 20 * size)
        bytes.replaceSubrange(32 + 19 * size..<32 + 20 * size, with: bytes[32 + 18 * size..<32 + 19 * size])
        memory.setContents(of: "journal", to: bytes)
        let (reopened, events) = try open(memory)
        XCTAssertEqual(events, [.lost(file: journalPath, kind: .shortened, recordsAtCheckpoint: 20, recordsFound: 19)])
        XCTAssertEqual(reopened.recovered.map(\.id), Array(1...19))
        XCTAssertEqual(try reopened.append([Data()]), [21])
    }

    /// The ids the checkpoint knew were given stay given, even when the only file that recorded them (a compacted
    /// file's header) is damaged.
    func testADamagedHeaderLosesNoIdTheCheckpointKnew() throws {
        let memory = MemoryFileSystem()
        var options = Journal.Options.exactSize
        options.compactionMinimum = 100
        let log = JournalEventLog()
        let journal = try Journal(directory: folder, options: options, fileSystem: memory, events: log.handler)
        for number in 1...5 { try journal.append([samplePayload(number, size: 40)]) }
        try journal.remove(Array(1...5))
        guard case .compacted? = log.events.last else { return XCTFail("\(log.events)") }
        journal.close()
        var bytes = try XCTUnwrap(memory.contents(of: "journal"))
        XCTAssertEqual(bytes.count, 32, "a header alone, whose floor holds the ids given")
        bytes[16] ^= 0x01
        memory.setContents(of: "journal", to: bytes)
        let (reopened, events) = try open(memory, options: options)
        XCTAssertEqual(events, [.skippedCorruptRecord(file: journalPath, offset: 0), .compacted(bytesBefore: 32, bytesAfter: 32)])
        XCTAssertEqual(try reopened.append([Data()]), [6], "not 1: the checkpoint's highest id")
    }

    // MARK: - Without a checkpoint, or with one that cannot be read

    func testAFolderWithoutACheckpointIsAnEarlierVersionsAndGetsOne() throws {
        let memory = MemoryFileSystem()
        try storeTwenty(in: memory)
        for removed in [nil, Data(), Data(count: JournalCheckpoint.fileSize)] {
            if let removed { memory.setContents(of: "journal.state", to: removed) } else { try memory.removeFile("journal.state", in: MemoryFileSystem.folder) }
            XCTAssertEqual(stored(memory), .none)
            let (journal, events) = try open(memory)
            XCTAssertEqual(events, [], "no alarm: a journal written before checkpoints (\(String(describing: removed?.count)))")
            XCTAssertEqual(journal.liveCount, 20)
            journal.close()
            XCTAssertEqual(try state(memory).liveRecords, 20, "it has one now")
        }
        // So that a journal lost from now on is reported.
        try memory.removeFile("journal", in: MemoryFileSystem.folder)
        XCTAssertEqual(try open(memory).1, [.lost(file: journalPath, kind: .missing, recordsAtCheckpoint: 20, recordsFound: 0)])
    }

    func testWithoutACheckpointAFileThatIsNoJournalIsStillReplaced() throws {
        let memory = MemoryFileSystem()
        memory.setContents(of: "journal", to: randomBytes(100, seed: 3))
        XCTAssertEqual(
            try open(memory).1,
            [.lost(file: journalPath, kind: .replaced, recordsAtCheckpoint: nil, recordsFound: 0), .compacted(bytesBefore: 100, bytesAfter: 32)])
        // But zeros are what a crash leaves of a new file, and a start of the magic is a torn header: no alarm.
        for bytes in [Data(count: 100), Data("RQJO".utf8)] {
            let fresh = MemoryFileSystem()
            fresh.setContents(of: "journal", to: bytes)
            let expected: [JournalEvent] =
                bytes.count < 32
                ? [.discardedTornTail(file: journalPath, offset: 0)]
                : [
                    .skippedCorruptRecord(file: journalPath, offset: 0), .compacted(bytesBefore: 100, bytesAfter: 32),
                ]
            XCTAssertEqual(try open(fresh).1, expected)
        }
    }

    func testADamagedCheckpointAndALostJournalReportTheJournal() throws {
        let memory = MemoryFileSystem()
        try storeTwenty(in: memory)
        memory.setContents(of: "journal.state", to: randomBytes(JournalCheckpoint.fileSize, seed: 5))
        memory.setContents(of: "journal", to: Data())
        XCTAssertEqual(try open(memory).1, [.lost(file: journalPath, kind: .emptied, recordsAtCheckpoint: nil, recordsFound: 0)])
    }

    // MARK: - No false alarm

    func testACrashAfterTwentyCallsIsNoLossInAnyCrashMode() throws {
        for mode in MemoryFileSystem.CrashMode.allCases {
            let memory = MemoryFileSystem()
            let journal = try Journal(directory: folder, fileSystem: memory)
            for number in 1...20 { try journal.append([samplePayload(number)]) }
            try journal.remove([3])
            memory.crash(mode)
            let (reopened, events) = try open(memory, options: Journal.Options())
            XCTAssertEqual(events, [], "\(mode)")
            XCTAssertEqual(reopened.recovered.map(\.id), Array(1...20).filter { $0 != 3 }, "\(mode)")
            reopened.close()
            withExtendedLifetime(journal) {}
        }
    }

    func testACompactionNamesBothFilesBeforeItsRenameAndTheNewOneAfter() throws {
        let memory = MemoryFileSystem()
        let fileSystem = FaultyFileSystem(memory)
        var options = Journal.Options.exactSize
        options.compactionMinimum = 100
        let log = JournalEventLog()
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem, events: log.handler)
        for number in 1...20 { try journal.append([samplePayload(number)]) }
        let old = try XCTUnwrap(memory.contents(of: "journal"))
        let atRename = CheckpointAtRename()
        fileSystem.setFault { call, _, _ in
            if call == .rename {
                atRename.keep(
                    JournalCheckpoint.read(memory.contents(of: "journal.state") ?? Data()), new: memory.contents(of: "journal.compacting"))
            }
            return nil
        }
        try journal.remove(Array(1...18))
        guard case .compacted? = log.events.last else { return XCTFail("\(log.events)") }
        let (pending, newFile) = try XCTUnwrap(atRename.kept)
        guard case let .valid(before, _) = pending else { return XCTFail("\(pending)") }
        let removal = try XCTUnwrap(memory.contents(of: "journal"))
        XCTAssertEqual(before.file, .init(identity: identity(old), length: UInt64(old.count) + 18 * 28), "the old file, with the removals")
        XCTAssertEqual(before.replacement, .init(identity: identity(newFile), length: UInt64(newFile?.count ?? 0)))
        XCTAssertEqual(before.replacement?.identity?.floor, 21)
        XCTAssertEqual(newFile, removal, "the new file is the one renamed")
        let after = try state(memory)
        XCTAssertEqual(after.file, .init(identity: identity(removal), length: UInt64(removal.count)))
        XCTAssertEqual(after.replacement, nil)
        XCTAssertEqual(after.liveRecords, 2)
        XCTAssertEqual(after.highestID, 20)
        journal.close()
        let (reopened, events) = try open(memory)
        XCTAssertEqual(events, [])
        XCTAssertEqual(reopened.recovered.map(\.id), [19, 20])
        // And a loss after the compaction is judged against the new file.
        reopened.close()
        memory.setContents(of: "journal", to: removal.prefix(removal.count - 1))
        XCTAssertEqual(
            try open(memory).1,
            [
                .lost(file: journalPath, kind: .shortened, recordsAtCheckpoint: 2, recordsFound: 1),
                .discardedTornTail(file: journalPath, offset: UInt64(removal.count - 28 - samplePayload(20).count)),
            ])
    }

    /// The compaction's folder sync fails: until a later sync makes the rename durable, a crash may leave either
    /// file under the name, and neither is a loss.
    func testACompactionWhoseRenameIsNotDurableIsNoFalseAlarm() throws {
        for (name, durableRename, thenAppend) in [("old file", false, false), ("new file", true, false), ("after a later commit", true, true), ("commit lost", false, true)] {
            let memory = MemoryFileSystem()
            let fileSystem = FaultyFileSystem(memory)
            var options = Journal.Options.exactSize
            options.compactionMinimum = 100
            let log = JournalEventLog()
            let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem, events: log.handler)
            for number in 1...20 { try journal.append([samplePayload(number)]) }
            let failing = fileSystem.count(.syncDirectory) + 1
            fileSystem.setFault { call, number, _ in call == .syncDirectory && number == failing ? .fail(errno: EIO, writtenFirst: 0) : nil }
            try journal.remove(Array(1...18))
            guard case .compacted? = log.events.last else { return XCTFail("\(name): \(log.events)") }
            guard case let .valid(pending, _) = stored(memory) else { return XCTFail("\(name): \(stored(memory))") }
            XCTAssertNotNil(pending.replacement, "\(name): the checkpoint still names both files")
            if thenAppend {
                // The next leader syncs the folder first; its checkpoint (not synced) then names the new file alone.
                XCTAssertEqual(try journal.append([samplePayload(21)]), [21])
                guard case let .valid(next, _) = stored(memory) else { return XCTFail("\(name): \(stored(memory))") }
                XCTAssertNil(next.replacement, name)
            }
            if durableRename, !thenAppend { try memory.syncDirectory(MemoryFileSystem.folder) }
            memory.crash(durableRename ? .keepUnsynced : .loseUnsynced)
            let (reopened, events) = try open(memory)
            XCTAssertEqual(events, [], name)
            XCTAssertEqual(reopened.recovered.map(\.id), thenAppend ? [19, 20, 21] : [19, 20], name)
            reopened.close()
            withExtendedLifetime(journal) {}
        }
    }

    func testACheckpointThatCannotBeWrittenStopsACompactionNotTheJournal() throws {
        let memory = MemoryFileSystem()
        let fileSystem = FaultyFileSystem(memory)
        var options = Journal.Options.exactSize
        options.compactionMinimum = 100
        let log = JournalEventLog()
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem, events: log.handler)
        for number in 1...20 { try journal.append([samplePayload(number)]) }
        let file = memory.contents(of: "journal")
        fileSystem.setFault { call, _, _ in call == .checkpoint ? .fail(errno: EIO, writtenFirst: 0) : nil }
        try journal.remove(Array(1...18))
        XCTAssertEqual(log.events, [], "no compaction: without the checkpoint naming both files, its rename could look like a loss")
        XCTAssertEqual(memory.fileNames, ["journal", "journal.lock", "journal.state"], "its file was removed")
        XCTAssertEqual(memory.contents(of: "journal")?.prefix(32), file?.prefix(32), "the journal file was not replaced")
        XCTAssertEqual(try journal.append([samplePayload(21)]), [21], "the journal goes on")
        fileSystem.setFault(nil)
        journal.close()
        let (reopened, events) = try open(memory)
        XCTAssertEqual(events, [], "the older checkpoint is still true")
        XCTAssertEqual(reopened.recovered.map(\.id), [19, 20, 21])
    }

    func testACheckpointThatCannotBeWrittenAtOpenFailsTheOpen() throws {
        let memory = MemoryFileSystem()
        try storeTwenty(in: memory)
        let fileSystem = FaultyFileSystem(memory)
        // Its size, its read and the sync of what it holds succeed; its write fails.
        fileSystem.setFault { call, number, _ in call == .checkpoint && number == 4 ? .fail(errno: EIO, writtenFirst: 0) : nil }
        XCTAssertThrowsError(try Journal(directory: folder, fileSystem: fileSystem)) {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: EIO, operation: "checkpoint"))
        }
        XCTAssertEqual(fileSystem.count(.checkpoint), 4)
        let (journal, events) = try open(memory)
        XCTAssertEqual(events, [])
        XCTAssertEqual(journal.liveCount, 20)
    }

    // MARK: - On the real file system: checked like every file

    func testTheCheckpointFileIsCheckedLikeEveryFile() throws {
        let fm = FileManager.default
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder)
        try journal.append([samplePayload(1)])
        journal.close()
        let state = folder.appendingPathComponent("journal.state")
        XCTAssertEqual((try fm.attributesOfItem(atPath: state.path)[.posixPermissions] as? Int).map { $0 & 0o777 }, 0o600)
        let saved = try Data(contentsOf: state)
        XCTAssertEqual(saved.count, JournalCheckpoint.fileSize)

        // A link is never followed, and what it points to is not touched.
        let victim = folder.deletingLastPathComponent().appendingPathComponent("victim")
        try Data("keep me".utf8).write(to: victim)
        try fm.removeItem(at: state)
        try fm.createSymbolicLink(at: state, withDestinationURL: victim)
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .isSymbolicLink(state)) }
        XCTAssertEqual(try Data(contentsOf: victim), Data("keep me".utf8))
        // A folder in its place is refused.
        try fm.removeItem(at: state)
        try fm.createDirectory(at: state, withIntermediateDirectories: false)
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertNotNil($0 as? JournalError) }
        try fm.removeItem(at: state)

        // Bytes added after the slots are not read, and cut off; a mode of others' reading is set back.
        try (saved + randomBytes(100_000, seed: 9)).write(to: state)
        XCTAssertEqual(chmod(state.path, 0o644), 0)
        let log = JournalEventLog()
        let reopened = try Journal(directory: folder, events: log.handler)
        XCTAssertEqual(log.events, [])
        XCTAssertEqual(reopened.liveCount, 1)
        reopened.close()
        XCTAssertEqual(try Data(contentsOf: state).count, JournalCheckpoint.fileSize)
        XCTAssertEqual((try fm.attributesOfItem(atPath: state.path)[.posixPermissions] as? Int).map { $0 & 0o777 }, 0o600)
    }

    /// Every byte of a checkpoint flipped, one at a time: never a trap, never a wrong alarm. A flip in the newer slot
    /// falls back to the older one (no event); a flip elsewhere changes nothing.
    func testEveryBitFlipOfTheCheckpointIsHarmless() throws {
        let memory = MemoryFileSystem()
        try storeTwenty(in: memory)
        let original = try XCTUnwrap(memory.contents(of: "journal.state"))
        let journal = try XCTUnwrap(memory.contents(of: "journal"))
        for byte in 0..<original.count {
            var bytes = original
            bytes[byte] ^= 0x08
            let fresh = MemoryFileSystem()
            fresh.setContents(of: "journal", to: journal)
            fresh.setContents(of: "journal.state", to: bytes)
            let (reopened, events) = try open(fresh)
            XCTAssertEqual(events, [], "byte \(byte)")
            XCTAssertEqual(reopened.liveCount, 20, "byte \(byte)")
            reopened.close()
        }
    }
}

/// What a compaction's checkpoint held when its rename was made, and the new file then.
private final class CheckpointAtRename: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: (JournalStoredCheckpoint, Data?)?
    var kept: (JournalStoredCheckpoint, Data?)? { lock.withLock { stored } }
    func keep(_ checkpoint: JournalStoredCheckpoint, new: Data?) { lock.withLock { stored = (checkpoint, new) } }
}
