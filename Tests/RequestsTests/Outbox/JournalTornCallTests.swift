import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// A crash can persist a call's pages in any order: in the space written ahead, a record that never reached the disk
/// reads as zeros while a later one of the same call is intact. The call exists only as a whole, so recovery must
/// not take the intact rest of it for a call of its own.
final class JournalTornCallTests: XCTestCase {
    /// Opens a journal, runs `calls`, and returns a copy of its file as a crash would leave it (never closed).
    private func crashedFile(_ calls: (Journal) throws -> Void) throws -> (folder: URL, file: URL) {
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder)
        try calls(journal)
        let copy = try crashCopy(ofJournalIn: folder)
        journal.close()
        return (copy, copy.appendingPathComponent("journal"))
    }

    private func zero(_ file: URL, _ range: Range<Int>) throws {
        var bytes = try Data(contentsOf: file)
        bytes.replaceSubrange(range, with: Data(count: range.count))
        try bytes.write(to: file)
    }

    private func recordSize(_ payload: Data) -> Int { JournalFormat.recordHeaderSize + payload.count }

    func testTheIntactEndOfACallWhoseStartIsLostIsNotRecovered() throws {
        let (one, two, three) = (samplePayload(1), samplePayload(2, size: 5000), samplePayload(3))
        let (folder, file) = try crashedFile { journal in
            try journal.append([one])
            try journal.append([two, three])
        }
        let callStart = JournalFormat.fileHeaderSize + recordSize(one)
        try zero(file, callStart..<callStart + recordSize(two))
        let log = JournalEventLog()
        let reopened = try Journal(directory: folder, events: log.handler)
        XCTAssertEqual(reopened.recovered.map(\.id), [1], "record 3 alone is not a call")
        XCTAssertEqual(log.events.first, .skippedCorruptRecord(file: file.path, offset: UInt64(callStart)))
        reopened.close()
    }

    func testACallWhoseMiddleIsLostIsDroppedWholeAndTheNextCallKept() throws {
        let payloads = (1...3).map { samplePayload($0, size: 3000) }
        let (folder, file) = try crashedFile { journal in
            try journal.append(payloads)
            try journal.append([samplePayload(4)])
            try journal.append([samplePayload(5), samplePayload(6)])
        }
        let middle = JournalFormat.fileHeaderSize + recordSize(payloads[0])
        try zero(file, middle..<middle + recordSize(payloads[1]))
        let reopened = try Journal(directory: folder)
        XCTAssertEqual(reopened.recovered.map(\.id), [4, 5, 6], "none of the first call; the calls after it whole")
        reopened.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), [4, 5, 6], "and the same after the rewrite")
    }

    func testARemovalCallLosingItsStartRemovesNothing() throws {
        let (folder, file) = try crashedFile { journal in
            try journal.append((1...4).map { samplePayload($0) })
            try journal.remove([1, 2, 3])
        }
        let removals = JournalFormat.fileHeaderSize + (1...4).reduce(0) { $0 + recordSize(samplePayload($1)) }
        try zero(file, removals..<removals + JournalFormat.recordHeaderSize)
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), [1, 2, 3, 4])
    }

    func testAFormatOneFileIsReadAndResumesAtAnyRecordAfterDamage() throws {
        let folder = makeJournalFolder(self)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var bytes = JournalFormat.fileHeader(floor: 1)
        bytes.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt32(1).littleEndian, toByteOffset: 8, as: UInt32.self)
            let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<24]))
            raw.storeBytes(of: checksum.littleEndian, toByteOffset: 24, as: UInt32.self)
        }
        for id in 1...3 {
            let payload = samplePayload(id)
            let header = JournalFormat.RecordHeader(
                kind: .put, continues: false, id: UInt64(id), length: payload.count, payloadCRC: CRC32C.checksum(payload), starts: false)
            JournalFormat.appendRecordHeader(header, to: &bytes)
            bytes += payload
        }
        let second = JournalFormat.fileHeaderSize + recordSize(samplePayload(1))
        bytes[second + 30] ^= 0xFF
        let file = folder.appendingPathComponent("journal")
        XCTAssertTrue(FileManager.default.createFile(atPath: file.path, contents: bytes, attributes: [.posixPermissions: 0o600]))
        let reopened = try Journal(directory: folder)
        XCTAssertEqual(reopened.recovered.map(\.id), [1, 3], "format 1 marks no call's start: any intact record is one")
        XCTAssertEqual(try reopened.append([samplePayload(4)]), [4])
    }
}
