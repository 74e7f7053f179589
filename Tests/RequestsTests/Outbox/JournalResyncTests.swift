import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// Finding the next intact record after damage: the CRC-32C combination it rests on, that `RecordReader` answers
/// exactly what the direct search (kept here as a reference) answers, and that its work stays linear in the file's
/// size on a file crafted to make the direct search quadratic.
final class JournalResyncTests: XCTestCase {
    // MARK: - CRC-32C combination

    func testCombiningChecksumsGivesTheChecksumOfTheConcatenation() {
        // RFC 3720, B.4, and "123456789", cut at every point.
        let checks: [(Data, UInt32)] = [
            (Data("123456789".utf8), 0xE306_9283), (Data(count: 32), 0x8A91_36AA), (Data(repeating: 0xFF, count: 32), 0x62A8_AB43),
            (Data((0..<32).map { UInt8($0) }), 0x46DD_794E), (Data((0..<32).map { UInt8(31 - $0) }), 0x113F_DB5C),
        ]
        for (bytes, expected) in checks {
            for cut in 0...bytes.count {
                let first = CRC32C.checksum(bytes.prefix(cut))
                let second = CRC32C.checksum(bytes.suffix(from: cut))
                XCTAssertEqual(CRC32C.combine(first, second, secondLength: bytes.count - cut), expected, "cut at \(cut)")
            }
        }
        // Random pieces of every length up to 300, then large ones (zeros too: their checksum is not 0).
        var generator = SplitMix64(seed: 0xC0DE)
        let pool = randomBytes(5 << 20 + 7, &generator)
        var lengths = Array(0...300) + [511, 512, 513, 4096, 65_535, 65_536, 1 << 20, 5 << 20]
        lengths += (0..<20).map { _ in Int(generator.next() % (1 << 20)) }
        for second in lengths {
            let firstLength = Int(generator.next() % 1000)
            let a = pool.prefix(firstLength)
            let b = pool.suffix(second)
            XCTAssertEqual(CRC32C.combine(CRC32C.checksum(a), CRC32C.checksum(b), secondLength: second), CRC32C.checksum(a + b), "|B| = \(second)")
            let zeros = Data(count: second)
            XCTAssertEqual(CRC32C.combine(CRC32C.checksum(a), CRC32C.checksum(zeros), secondLength: second), CRC32C.checksum(a + zeros), "\(second) zeros")
        }
        // Shifting by 0 changes nothing, and shifts add up, beyond what can be checksummed here.
        XCTAssertEqual(CRC32C.shifted(0x1234_5678, by: 0), 0x1234_5678)
        XCTAssertEqual(CRC32C.shifted(0, by: 12_345), 0)
        for (a, b) in [(1, 1), (1 << 32, 1 << 32), (Int.max / 2, Int.max / 2), (123_456_789_012, 987_654_321)] {
            XCTAssertEqual(CRC32C.shifted(CRC32C.shifted(0xE306_9283, by: a), by: b), CRC32C.shifted(0xE306_9283, by: a + b), "\(a) + \(b)")
        }
    }

    // MARK: - The same answers as the direct search

    func testTheReaderFindsWhatTheDirectSearchFinds() {
        var generator = SplitMix64(seed: 0x2E5C)
        let limits = [0, 0, 1, 63, 64, 65, JournalFormat.RecordReader.defaultDirectLimit]
        var found = 0
        for round in 0..<3000 {
            let buffer = round % 4 == 0 ? randomBuffer(&generator) : craftedBuffer(&generator)
            buffer.withUnsafeBytes { bytes in
                var reader = JournalFormat.RecordReader(bytes, directLimit: limits[round % limits.count])
                // First as recovery goes, forward from one record to the next; then from offsets in any order.
                var offset = 0
                while let next = referenceNextRecord(bytes, from: offset) {
                    XCTAssertEqual(reader.nextRecord(from: offset), next, "round \(round), from \(offset)")
                    XCTAssertEqual(reader.record(at: next), JournalFormat.parseRecord(bytes, at: next), "round \(round), at \(next)")
                    found += 1
                    offset = next + 1
                }
                XCTAssertNil(reader.nextRecord(from: offset), "round \(round), from \(offset)")
                for _ in 0..<6 {
                    let offset = Int(generator.next() % UInt64(bytes.count + 2))
                    XCTAssertEqual(reader.nextRecord(from: offset), referenceNextRecord(bytes, from: offset), "round \(round), from \(offset)")
                    XCTAssertEqual(reader.record(at: offset), JournalFormat.parseRecord(bytes, at: offset), "round \(round), at \(offset)")
                }
            }
        }
        XCTAssertGreaterThan(found, 3000, "the buffers hold records to find")
    }

    // MARK: - Linear work

    func testAFileFullOfForgedHeadersCostsWorkLinearInItsSize() {
        for size in [64 << 10, 512 << 10] {
            // Forged headers back to back, each claiming a payload up to the end of the file: the direct search
            // checksums every one of those payloads.
            let forged = forgedJournalFile(size: size)
            // The same behind a damaged file header.
            var damagedHeader = forged
            damagedHeader[3] ^= 0x01
            // Intact records between forged headers: each forged one fails where a record was expected.
            let interleaved = interleavedFile(size: size)
            for (name, bytes, records) in [("forged", forged, 0), ("damaged header", damagedHeader, 0), ("interleaved", interleaved.bytes, interleaved.records)] {
                let scan = bytes.withUnsafeBytes { JournalScan($0, file: "journal") }
                XCTAssertEqual(scan.index.count, records, "\(name), \(size) bytes")
                // Each offset costs at most a header (24), two prefix ends (63 each) and its share of the prefixes;
                // only the first failure, before damage is seen, reads a payload directly (the whole file).
                XCTAssertLessThan(scan.checksummedBytes, 8 * bytes.count, "\(name), \(size) bytes: \(scan.checksummedBytes) bytes checksummed")
            }
        }
    }

    func testAnUndamagedFileIsReadOnceAndNothingMore() {
        var file = JournalFormat.fileHeader(floor: 1)
        var expected = 0
        for number in 0..<200 {
            let payload = samplePayload(number, size: number * 13 % 700)
            appendRecord(payload, id: UInt64(number + 1), to: &file)
            expected += 24 + payload.count
        }
        let scan = file.withUnsafeBytes { JournalScan($0, file: "journal") }
        XCTAssertEqual(scan.index.count, 200)
        XCTAssertEqual(scan.checksummedBytes, expected, "each header and payload once")
    }

    // MARK: - Helpers

    /// The search as it was before `RecordReader`: at each offset, a record checked directly.
    private func referenceNextRecord(_ bytes: UnsafeRawBufferPointer, from offset: Int) -> Int? {
        var candidate = offset
        while bytes.count - candidate >= JournalFormat.recordHeaderSize {
            if bytes[candidate] == UInt8(ascii: "R"), JournalFormat.parseRecord(bytes, at: candidate) != nil { return candidate }
            candidate += 1
        }
        return nil
    }

    private func randomBytes(_ count: Int, _ generator: inout SplitMix64) -> Data {
        var bytes = [UInt8](repeating: 0, count: count)
        var index = 0
        while index < count {
            var word = generator.next()
            for _ in 0..<min(8, count - index) {
                bytes[index] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                index += 1
            }
        }
        return Data(bytes)
    }

    private func appendRecord(_ payload: Data, id: UInt64, to bytes: inout Data) {
        bytes += forgedRecordHeader(id: id, length: UInt32(payload.count), payloadCRC: CRC32C.checksum(payload)) + payload
    }

    /// Random bytes with the magic strewn in.
    private func randomBuffer(_ generator: inout SplitMix64) -> Data {
        var bytes = randomBytes(Int(generator.next() % 600), &generator)
        for _ in 0..<(generator.next() % 8) where bytes.count >= 4 {
            let at = Int(generator.next() % UInt64(bytes.count - 3))
            bytes.replaceSubrange(at..<at + 4, with: Data("RQJR".utf8))
        }
        return bytes
    }

    /// Pieces one after the other: garbage, intact records, records with a wrong payload checksum or a flipped bit,
    /// headers claiming more than the file holds, and headers claiming a payload up to the end of the file (right or
    /// wrong), written last to first once the file's length is known.
    private func craftedBuffer(_ generator: inout SplitMix64) -> Data {
        var bytes = Data()
        var toEnd: [(offset: Int, right: Bool)] = []
        for _ in 0..<(1 + generator.next() % 14) {
            let payload = randomBytes(Int(generator.next() % 400), &generator)
            let id = generator.next() % 50
            switch generator.next() % 7 {
            case 0: bytes += randomBytes(Int(generator.next() % 90), &generator)
            case 1, 2: appendRecord(payload, id: id, to: &bytes)
            case 3: bytes += forgedRecordHeader(id: id, length: UInt32(payload.count), payloadCRC: CRC32C.checksum(payload) ^ 1) + payload
            case 4:
                var record = Data()
                appendRecord(payload, id: id, to: &record)
                let bit = Int(generator.next() % UInt64(record.count * 8))
                record[bit / 8] ^= 1 << UInt8(bit % 8)
                bytes += record
            case 5: bytes += forgedRecordHeader(kind: UInt8(1 + generator.next() % 3), id: id, length: UInt32(generator.next() % 5000) + 400, payloadCRC: 0)
            default:
                toEnd.append((bytes.count, generator.next() % 2 == 0))
                bytes += Data(count: JournalFormat.recordHeaderSize)
            }
        }
        for (offset, right) in toEnd.reversed() {
            let payload = bytes.suffix(from: offset + JournalFormat.recordHeaderSize)
            let crc = CRC32C.checksum(payload) ^ (right ? 0 : 0x8000)
            let forged = forgedRecordHeader(flags: UInt8(generator.next() % 2), id: generator.next() % 50, length: UInt32(payload.count), payloadCRC: crc)
            bytes.replaceSubrange(offset..<offset + JournalFormat.recordHeaderSize, with: forged)
        }
        return bytes
    }

    /// A file of about `size` bytes: an intact 10-byte record, then a forged header claiming a payload up to the
    /// end, again and again.
    private func interleavedFile(size: Int) -> (bytes: Data, records: Int) {
        var bytes = JournalFormat.fileHeader(floor: 1)
        var forged: [Int] = []
        var records = 0
        while size - bytes.count >= 2 * JournalFormat.recordHeaderSize + 10 {
            records += 1
            appendRecord(Data(repeating: UInt8(records % 256), count: 10), id: UInt64(records), to: &bytes)
            forged.append(bytes.count)
            bytes += Data(count: JournalFormat.recordHeaderSize)
        }
        for offset in forged {
            let length = bytes.count - offset - JournalFormat.recordHeaderSize
            bytes.replaceSubrange(offset..<offset + JournalFormat.recordHeaderSize, with: forgedRecordHeader(id: 1, length: UInt32(length), payloadCRC: 1))
        }
        return (bytes, records)
    }
}
