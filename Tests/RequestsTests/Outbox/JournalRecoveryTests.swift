import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// Opening a journal whose file was torn by a crash or damaged: what is kept, what is reported, and that no bytes
/// whatsoever crash it (fuzzing in memory: every truncation, every bit flip, random bytes and random splices).
final class JournalRecoveryTests: XCTestCase {
    private let memoryFolder = URL(fileURLWithPath: "/memory/journal")
    private var noCompaction: Journal.Options {
        var options = Journal.Options()
        options.compactionMinimum = .max
        // The history's checkpoints are file sizes: no zeros written ahead.
        options.preallocation = 0
        return options
    }

    // MARK: - On the real file system

    func testATornLastRecordIsCutOffAndReported() throws {
        let folder = makeJournalFolder(self)
        let file = folder.appendingPathComponent("journal").path
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem())
        try journal.append([samplePayload(1)])
        try journal.append([samplePayload(2)])
        let intact = try fileSize(file)
        let checkpoint = try Data(contentsOf: folder.appendingPathComponent("journal.state"))
        try journal.append([samplePayload(3, size: 50)])
        journal.close()
        XCTAssertEqual(truncate(file, off_t(intact + 40)), 0, "a crash in the middle of the third record's payload")
        // The checkpoint as that crash leaves it: the third call's was never written.
        try checkpoint.write(to: folder.appendingPathComponent("journal.state"))

        let log = JournalEventLog()
        let reopened = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem(), events: log.handler)
        XCTAssertEqual(reopened.recovered, [JournalRecord(id: 1, payload: samplePayload(1)), JournalRecord(id: 2, payload: samplePayload(2))])
        XCTAssertEqual(log.events, [.discardedTornTail(file: file, offset: UInt64(intact))])
        XCTAssertEqual(try fileSize(file), intact, "cut off on disk")
        XCTAssertEqual(try reopened.append([samplePayload(4)]), [3], "the torn record's id was never given")
    }

    func testACallsRecordsExistOnlyWhole() throws {
        let folder = makeJournalFolder(self)
        let file = folder.appendingPathComponent("journal").path
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem())
        try journal.append([samplePayload(1)])
        let intact = try fileSize(file)
        let checkpoint = try Data(contentsOf: folder.appendingPathComponent("journal.state"))
        try journal.append([samplePayload(2), samplePayload(3), samplePayload(4)])
        journal.close()
        XCTAssertEqual(truncate(file, off_t(try fileSize(file) - 1)), 0, "the last record of the three is torn")
        // The checkpoint as a crash during the call leaves it.
        try checkpoint.write(to: folder.appendingPathComponent("journal.state"))

        let log = JournalEventLog()
        let reopened = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem(), events: log.handler)
        XCTAssertEqual(reopened.recovered.map(\.id), [1], "none of the call's three records, though two are intact")
        XCTAssertEqual(log.events, [.discardedTornTail(file: file, offset: UInt64(intact))])
    }

    func testADamagedRecordInTheMiddleIsSkippedAndTheRestRecovered() throws {
        let folder = makeJournalFolder(self)
        let file = folder.appendingPathComponent("journal").path
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem())
        try journal.append([samplePayload(1)])
        let secondOffset = try fileSize(file)
        try journal.append([samplePayload(2)])
        try journal.append([samplePayload(3)])
        journal.close()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[secondOffset + JournalFormat.recordHeaderSize + 2] ^= 0x10
        try bytes.write(to: URL(fileURLWithPath: file))

        let log = JournalEventLog()
        let reopened = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem(), events: log.handler)
        XCTAssertEqual(reopened.recovered, [JournalRecord(id: 1, payload: samplePayload(1)), JournalRecord(id: 3, payload: samplePayload(3))])
        XCTAssertEqual(log.events.first, .skippedCorruptRecord(file: file, offset: UInt64(secondOffset)))
        // The file is rewritten without the damage at once, so that it is reported once.
        guard case .compacted? = log.events.dropFirst().first else { return XCTFail("\(log.events)") }
        reopened.close()
        let again = JournalEventLog()
        XCTAssertEqual(try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem(), events: again.handler).recovered.map(\.id), [1, 3])
        XCTAssertEqual(again.events, [])
    }

    func testADamagedHeaderLosesNoRecord() throws {
        let folder = makeJournalFolder(self)
        let file = folder.appendingPathComponent("journal").path
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem())
        try journal.append([samplePayload(1), samplePayload(2)])
        journal.close()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[17] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: file))

        let log = JournalEventLog()
        let reopened = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem(), events: log.handler)
        XCTAssertEqual(reopened.recovered.map(\.id), [1, 2])
        XCTAssertEqual(log.events.first, .skippedCorruptRecord(file: file, offset: 0))
        XCTAssertEqual(try reopened.append([Data()]), [3])
    }

    func testAFileOfAnUnknownVersionIsRefusedAndLeftAlone() throws {
        let folder = makeJournalFolder(self)
        try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem()).close()
        let url = folder.appendingPathComponent("journal")
        var header = Data(JournalFormat.fileMagic) + Data([3, 0, 0, 0]) + Data(count: 12)
        header += withUnsafeBytes(of: CRC32C.checksum(header).littleEndian) { Data($0) } + Data(count: 4) + Data("future".utf8)
        try header.write(to: url)
        XCTAssertThrowsError(try Journal(directory: folder)) { XCTAssertEqual($0 as? JournalError, .unsupportedVersion(url, version: 3)) }
        XCTAssertEqual(try Data(contentsOf: url), header)
    }

    // MARK: - Fuzzing, in memory

    /// A small journal's history: the file after each call, and the live records then.
    private struct History {
        var checkpoints: [(length: Int, live: [JournalRecord])] = []
        var file = Data()
        /// Every payload each id ever had.
        var versions: [UInt64: Set<Data>] = [:]
        /// Where the calls holding each id's records are in `file`.
        var spans: [UInt64: [Range<Int>]] = [:]
    }

    private func makeHistory() throws -> History {
        let memory = MemoryFileSystem()
        let journal = try Journal(directory: memoryFolder, options: noCompaction, fileSystem: memory)
        var history = History()
        var live: [UInt64: Data] = [:]
        func checkpoint() {
            history.checkpoints.append((memory.contents(of: "journal")?.count ?? 0, live.sorted { $0.key < $1.key }.map { JournalRecord(id: $0.key, payload: $0.value) }))
        }
        checkpoint()
        let calls: [() throws -> Void] = [
            { for (id, number) in zip(try journal.append([samplePayload(1)]), [1]) { live[id] = samplePayload(number) } },
            { for (id, number) in zip(try journal.append([samplePayload(2), samplePayload(3), samplePayload(4)]), 2...4) { live[id] = samplePayload(number) } },
            {
                try journal.update(2, payload: samplePayload(20))
                live[2] = samplePayload(20)
            },
            {
                try journal.remove([3, 1])
                live[3] = nil
                live[1] = nil
            },
            { for (id, number) in zip(try journal.append([samplePayload(5), samplePayload(6)]), 5...6) { live[id] = samplePayload(number) } },
            { for (id, number) in zip(try journal.append([samplePayload(7)]), [7]) { live[id] = samplePayload(number) } },
        ]
        for call in calls {
            try call()
            for (id, payload) in live { history.versions[id, default: []].insert(payload) }
            checkpoint()
        }
        history.file = memory.contents(of: "journal") ?? Data()
        history.file.withUnsafeBytes { bytes in
            var offset = JournalFormat.fileHeaderSize
            // A call exists only as a whole: each id's span is the whole call its record is in.
            var call: [UInt64] = []
            var callStart = offset
            while let header = JournalFormat.parseRecord(bytes, at: offset) {
                call.append(header.id)
                offset += header.size
                if !header.continues {
                    for id in call { history.spans[id, default: []].append(callStart..<offset) }
                    call = []
                    callStart = offset
                }
            }
        }
        return history
    }

    /// Opens `bytes` as a journal file: it must not crash, and a second open must find the same records and
    /// nothing to report (the first one repaired the file).
    private func open(_ bytes: Data, file: StaticString = #filePath, line: UInt = #line) throws -> (records: [JournalRecord], events: [JournalEvent]) {
        let memory = MemoryFileSystem()
        memory.setContents(of: "journal", to: bytes)
        let log = JournalEventLog()
        let first = try Journal(directory: memoryFolder, options: noCompaction, fileSystem: memory, events: log.handler)
        let records = first.recovered
        first.close()
        let again = JournalEventLog()
        let reopened = try Journal(directory: memoryFolder, options: noCompaction, fileSystem: memory, events: again.handler)
        XCTAssertEqual(reopened.recovered, records, "a second open recovers the same records", file: file, line: line)
        XCTAssertEqual(again.events, [], "a second open finds nothing to repair", file: file, line: line)
        // It still works: a new record gets an id above every recovered one.
        let id = try reopened.append([Data("after".utf8)])[0]
        XCTAssertGreaterThan(id, records.last?.id ?? 0, file: file, line: line)
        return (records, log.events)
    }

    func testATruncationAtEveryOffsetKeepsExactlyTheWholeCallsBeforeIt() throws {
        let history = try makeHistory()
        for cut in 0...history.file.count {
            let (records, events) = try open(history.file.prefix(cut))
            let checkpoint = history.checkpoints.last { $0.length <= cut } ?? (0, [])
            XCTAssertEqual(records, checkpoint.live, "cut at \(cut)")
            let expected: [JournalEvent] =
                cut == checkpoint.length || cut == 0 ? [] : [.discardedTornTail(file: memoryFolder.appendingPathComponent("journal").path, offset: UInt64(checkpoint.length))]
            XCTAssertEqual(events, expected, "cut at \(cut)")
        }
    }

    func testEveryBitFlipLosesOnlyTheCallItHitsAndInventsNothing() throws {
        let history = try makeHistory()
        let final = try XCTUnwrap(history.checkpoints.last).live
        for bit in 0..<history.file.count * 8 {
            var bytes = history.file
            bytes[bit / 8] ^= 1 << UInt8(bit % 8)
            let (records, events) = try open(bytes)
            XCTAssertFalse(events.isEmpty, "bit \(bit): the damage is reported")
            for record in records {
                XCTAssertTrue(history.versions[record.id]?.contains(record.payload) ?? false, "bit \(bit): \(record) was never written")
            }
            for record in final where !(history.spans[record.id] ?? []).contains(where: { $0.contains(bit / 8) }) {
                XCTAssertTrue(records.contains(record), "bit \(bit): \(record), which the flip did not hit, was lost")
            }
        }
    }

    func testRandomBytesAndRandomSplicesNeverCrashAndInventNothing() throws {
        let history = try makeHistory()
        var generator = SplitMix64(seed: 0x5EED)
        let header = JournalFormat.fileHeader(floor: 1)
        for round in 0..<1500 {
            var bytes: Data
            switch round % 3 {
            case 0:
                bytes = Data((0..<Int(generator.next() % 400)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
                if round % 2 == 0 { bytes = header + bytes }
            case 1:
                // Stretches of the journal overwritten with random bytes.
                bytes = history.file
                for _ in 0..<(1 + generator.next() % 4) {
                    let start = Int(generator.next() % UInt64(bytes.count))
                    let end = min(bytes.count, start + Int(generator.next() % 40))
                    bytes.replaceSubrange(start..<end, with: (start..<end).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
                }
            default:
                // Pieces of the journal cut, repeated and swapped.
                bytes = history.file
                let start = Int(generator.next() % UInt64(bytes.count))
                let end = min(bytes.count, start + Int(generator.next() % 120))
                let piece = bytes[start..<end]
                bytes.insert(contentsOf: piece, at: Int(generator.next() % UInt64(bytes.count)))
                if generator.next() % 2 == 0 { bytes.removeSubrange(start..<end) }
            }
            let (records, _) = try open(bytes)
            for record in records {
                XCTAssertTrue(history.versions[record.id]?.contains(record.payload) ?? false, "round \(round): \(record) was never written")
            }
        }
    }

    private func fileSize(_ path: String) throws -> Int {
        try XCTUnwrap(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
    }
}
