#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// Journals damaged in many ways, reopened through the public API: never a crash, a hang or an untyped error; every
/// entry whose record is undamaged comes back, once, with its payload and id; nothing is invented.
final class OutboxDamagedJournalTests: XCTestCase {
    private func open(_ folder: URL) throws -> Outbox {
        var options = testOutboxOptions
        options.startsSuspended = true
        return try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self], options: options)
    }

    private struct Stored {
        var entries: [OutboxEntry]
        var bytes: Data
        var ranges: [Range<Int>]
    }

    private func store(_ count: Int, in folder: URL) throws -> Stored {
        let outbox = try open(folder)
        let entries = try (0..<count).map { try outbox.enqueue(PostNote(path: "p", text: "entry-\($0)-" + String(repeating: "y", count: $0 * 7))) }
        outbox.close()
        let file = try Data(contentsOf: folder.appendingPathComponent("journal"))
        var ranges: [Range<Int>] = []
        var offset = 32
        // The records, then the zeros kept as the journal's reserve (left out: damage is tried on the records).
        while offset + 28 <= file.count, file[offset] != 0 {
            var length = 0
            for index in 0..<4 { length |= Int(file[offset + 16 + index]) << (8 * index) }
            ranges.append(offset..<offset + 28 + length)
            offset += 28 + length
        }
        XCTAssertEqual(ranges.count, count)
        XCTAssertTrue(file[offset...].allSatisfy { $0 == 0 }, "only zeros after the records")
        return Stored(entries: entries, bytes: file.prefix(offset), ranges: ranges)
    }

    /// Writes `damaged` as the journal, reopens twice; every entry in `mustKeep` must be back, nothing invented or doubled.
    private func check(_ damaged: Data, _ stored: Stored, mustKeep: [Int], folder: URL, _ label: String) {
        let journal = folder.appendingPathComponent("journal")
        try? FileManager.default.removeItem(at: folder.appendingPathComponent("journal.compacting"))
        XCTAssertNoThrow(try damaged.write(to: journal), label)
        var first: [String]?
        for round in 0..<2 {
            do {
                let outbox = try open(folder)
                defer { outbox.close() }
                let keys = outbox.pendingEntries.map(\.idempotencyKey)
                XCTAssertEqual(Set(keys).count, keys.count, "\(label): doubled")
                for entry in outbox.pendingEntries {
                    guard let original = stored.entries.first(where: { $0.idempotencyKey == entry.idempotencyKey }) else {
                        XCTFail("\(label): invented \(entry)")
                        continue
                    }
                    XCTAssertEqual(original.encodedRequest, entry.encodedRequest, label)
                    XCTAssertEqual(original.id, entry.id, label)
                }
                for index in mustKeep where !keys.contains(stored.entries[index].idempotencyKey) {
                    XCTFail("\(label): lost entry \(index) (round \(round))")
                }
                if let first { XCTAssertEqual(first, keys, "\(label): second open differs") } else { first = keys }
            } catch let error as OutboxError {
                XCTFail("\(label): \(error)")
            } catch {
                XCTFail("\(label): untyped \(error)")
            }
        }
    }

    private func undamaged(_ stored: Stored, _ hit: Range<Int>) -> [Int] {
        stored.ranges.indices.filter { !stored.ranges[$0].overlaps(hit) }
    }

    func testRandomBytesAnywhereLoseOnlyTheRecordsTheyHit() throws {
        let folder = makeOutboxFolder(self)
        let stored = try store(8, in: folder)
        var generator = SystemRandomNumberGenerator()
        for trial in 0..<300 {
            var bytes = stored.bytes
            let offset = Int.random(in: 0..<bytes.count, using: &generator)
            let length = min(Int.random(in: 1...16, using: &generator), bytes.count - offset)
            for index in offset..<offset + length { bytes[index] = UInt8.random(in: 0...255, using: &generator) }
            let hit = bytes == stored.bytes ? 0..<0 : offset..<offset + length
            check(bytes, stored, mustKeep: undamaged(stored, hit), folder: folder, "random \(trial) at \(offset)+\(length)")
        }
    }

    func testTruncationAtEveryOffsetKeepsEveryWholeRecord() throws {
        let folder = makeOutboxFolder(self)
        let stored = try store(5, in: folder)
        for cut in 0...stored.bytes.count {
            let keep = stored.ranges.indices.filter { stored.ranges[$0].upperBound <= cut && cut >= 32 }
            check(stored.bytes.prefix(cut), stored, mustKeep: keep, folder: folder, "cut \(cut)")
        }
    }

    func testDuplicatedRecordsGiveEachEntryOnce() throws {
        let folder = makeOutboxFolder(self)
        let stored = try store(5, in: folder)
        for source in stored.ranges.indices {
            for place in 0...stored.ranges.count {
                var bytes = stored.bytes
                let at = place == stored.ranges.count ? bytes.count : stored.ranges[place].lowerBound
                bytes.insert(contentsOf: stored.bytes[stored.ranges[source]], at: at)
                check(bytes, stored, mustKeep: Array(stored.ranges.indices), folder: folder, "dup \(source) at \(place)")
            }
        }
        check(stored.bytes + stored.bytes.dropFirst(32), stored, mustKeep: Array(stored.ranges.indices), folder: folder, "all twice")
    }

    private func forgedHeader(id: UInt64, length: UInt32, kind: UInt8 = 1) -> Data {
        var header = Data("RQJR".utf8) + [kind, 0, 0, 0]
        withUnsafeBytes(of: id.littleEndian) { header.append(contentsOf: $0) }
        withUnsafeBytes(of: length.littleEndian) { header.append(contentsOf: $0) }
        header.append(contentsOf: [0, 0, 0, 0])
        let crc = header.withUnsafeBytes { CRC32C.checksum($0) }
        withUnsafeBytes(of: crc.littleEndian) { header.append(contentsOf: $0) }
        return header
    }

    func testAHugeLengthFieldWithAValidChecksumLosesOnlyItsRecord() throws {
        let folder = makeOutboxFolder(self)
        let stored = try store(5, in: folder)
        for target in stored.ranges.indices {
            var bytes = stored.bytes
            let range = stored.ranges[target]
            bytes.replaceSubrange(range.lowerBound..<range.lowerBound + 28, with: forgedHeader(id: stored.entries[target].id, length: .max))
            check(bytes, stored, mustKeep: undamaged(stored, range), folder: folder, "huge length in \(target)")
            var inserted = stored.bytes
            inserted.insert(contentsOf: forgedHeader(id: 99, length: 0xFFFF_FFF0), at: range.lowerBound)
            check(inserted, stored, mustKeep: Array(stored.ranges.indices), folder: folder, "huge header before \(target)")
        }
    }

    func testHeadersOnlyEmptyAndGarbageFilesOpenEmpty() throws {
        let folder = makeOutboxFolder(self)
        let stored = try store(3, in: folder)
        check(stored.bytes.prefix(32), stored, mustKeep: [], folder: folder, "file header only")
        check(Data(), stored, mustKeep: [], folder: folder, "empty")
        check(Data(repeating: 0, count: 100_000), stored, mustKeep: [], folder: folder, "zeros")
        check(Data((0..<100_000).map { _ in UInt8.random(in: 0...255) }), stored, mustKeep: [], folder: folder, "noise")
        var headers = stored.bytes.prefix(32)
        for index in 0..<2000 { headers += forgedHeader(id: UInt64(index), length: 28) }
        check(headers, stored, mustKeep: [], folder: folder, "record headers claiming the next header")
    }
}

extension OutboxDamagedJournalTests {
    /// The keys of the pending entries, or `nil` when opening threw an `OutboxError`.
    private func attempt(_ folder: URL, _ label: String) -> [String]? {
        do {
            let outbox = try open(folder)
            defer { outbox.close() }
            return outbox.pendingEntries.map(\.idempotencyKey)
        } catch is OutboxError {
            return nil
        } catch {
            XCTFail("\(label): untyped \(error)")
            return nil
        }
    }

    /// Files of the folder replaced: a typed error for a link, a folder or a FIFO (nothing outside the folder touched);
    /// a leftover compaction file of garbage, or a removed lock file, repaired.
    func testFilesReplacedAreRefusedOrRepaired() throws {
        let fm = FileManager.default
        let folder = makeOutboxFolder(self)
        let stored = try store(3, in: folder)
        let keys = stored.entries.map(\.idempotencyKey)
        let journal = folder.appendingPathComponent("journal")
        let lock = folder.appendingPathComponent("journal.lock")
        let temp = folder.appendingPathComponent("journal.compacting")
        let elsewhere = makeOutboxFolder(self)
        try fm.createDirectory(at: elsewhere, withIntermediateDirectories: true)

        // The compaction temp file with garbage.
        try Data((0..<5000).map { _ in UInt8.random(in: 0...255) }).write(to: temp)
        XCTAssertEqual(attempt(folder, "garbage temp"), keys)
        XCTAssertFalse(fm.fileExists(atPath: temp.path))
        // The temp file as a directory, and as a symlink to a file elsewhere.
        try fm.createDirectory(at: temp, withIntermediateDirectories: true)
        XCTAssertNil(attempt(folder, "temp dir"), "refused (debatable: the leftover blocks the folder)")
        try? fm.removeItem(at: temp)
        let victim = elsewhere.appendingPathComponent("victim")
        try Data("keep me".utf8).write(to: victim)
        try fm.createSymbolicLink(at: temp, withDestinationURL: victim)
        XCTAssertEqual(attempt(folder, "temp symlink"), keys)
        XCTAssertEqual(try Data(contentsOf: victim), Data("keep me".utf8))
        try? fm.removeItem(at: temp)

        // The lock file removed, then a symlink.
        try fm.removeItem(at: lock)
        XCTAssertEqual(attempt(folder, "lock removed"), keys)
        try fm.removeItem(at: lock)
        let lockVictim = elsewhere.appendingPathComponent("lockvictim")
        try Data("x".utf8).write(to: lockVictim)
        try fm.createSymbolicLink(at: lock, withDestinationURL: lockVictim)
        XCTAssertNil(attempt(folder, "lock symlink"))
        XCTAssertEqual(try Data(contentsOf: lockVictim), Data("x".utf8))
        try fm.removeItem(at: lock)
        try fm.createDirectory(at: lock, withIntermediateDirectories: true)
        XCTAssertNil(attempt(folder, "lock dir"))
        try fm.removeItem(at: lock)

        // The journal replaced by a directory, then by a symlink to a copy.
        let saved = elsewhere.appendingPathComponent("journal-copy")
        try fm.moveItem(at: journal, to: saved)
        try fm.createDirectory(at: journal, withIntermediateDirectories: true)
        XCTAssertNil(attempt(folder, "journal dir"))
        try fm.removeItem(at: journal)
        try fm.createSymbolicLink(at: journal, withDestinationURL: saved)
        XCTAssertNil(attempt(folder, "journal symlink"))
        try fm.removeItem(at: journal)
        XCTAssertEqual(mkfifo(journal.path, 0o600), 0)
        XCTAssertNil(attempt(folder, "journal fifo"))
        try fm.removeItem(at: journal)
        try fm.moveItem(at: saved, to: journal)
        XCTAssertEqual(attempt(folder, "restored"), keys)
        XCTAssertEqual(Set(try fm.contentsOfDirectory(atPath: folder.path)), ["journal", "journal.lock", "journal.state"])
        XCTAssertEqual(Set(try fm.contentsOfDirectory(atPath: elsewhere.path)), ["victim", "lockvictim"])
        XCTAssertEqual(try Data(contentsOf: victim), Data("keep me".utf8))
    }
}
