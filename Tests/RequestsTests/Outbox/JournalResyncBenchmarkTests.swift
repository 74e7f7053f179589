import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// How long opening a journal file full of forged record headers takes, printed, never asserted (a benchmark, not
/// a timed test). Skipped unless `REQUESTS_JOURNAL_BENCH=1`; `REQUESTS_RESYNC_BENCH_SIZES` (bytes, separated by
/// commas) chooses the files' sizes, 560,000 and 5,000,000 by default:
///
///     REQUESTS_JOURNAL_BENCH=1 swift test -c release -Xswiftc -enable-testing --filter JournalResyncBenchmarkTests
final class JournalResyncBenchmarkTests: XCTestCase {
    func testOpeningFilesFullOfForgedHeaders() throws {
        let environment = ProcessInfo.processInfo.environment
        guard environment["REQUESTS_JOURNAL_BENCH"] == "1" else { throw XCTSkip("a benchmark: set REQUESTS_JOURNAL_BENCH=1 to run it") }
        let sizes = (environment["REQUESTS_RESYNC_BENCH_SIZES"] ?? "560000,5000000").split(separator: ",").compactMap { Int($0) }
        for size in sizes {
            let folder = makeJournalFolder(self, "journal-\(size)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try forgedJournalFile(size: size).write(to: folder.appendingPathComponent("journal"))
            let start = DispatchTime.now().uptimeNanoseconds
            let journal = try Journal(directory: folder)
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
            XCTAssertEqual(journal.recovered, [])
            journal.close()
            print(String(format: "opening a file of %d bytes full of forged headers: %.3f s", size, seconds))
        }
    }
}

/// A journal file of `size` bytes: a valid file header, then forged record headers back to back (the last one
/// padded with zeros), each with its own checksum right and claiming a payload up to the end of the file, with a
/// payload checksum of 1 (wrong for every one of them, as it happens). Recovery must try each of them.
func forgedJournalFile(size: Int) -> Data {
    var bytes = JournalFormat.fileHeader(floor: 1)
    while size - bytes.count >= JournalFormat.recordHeaderSize {
        let length = size - bytes.count - JournalFormat.recordHeaderSize
        bytes += forgedRecordHeader(id: UInt64(bytes.count), length: UInt32(length), payloadCRC: 1)
    }
    return bytes + Data(count: max(0, size - bytes.count))
}

/// A record header whose own checksum is right, whatever its fields.
func forgedRecordHeader(kind: UInt8 = 1, flags: UInt8 = 2, id: UInt64, length: UInt32, payloadCRC: UInt32) -> Data {
    var header = Data("RQJR".utf8) + [kind, flags, 0, 0]
    withUnsafeBytes(of: id.littleEndian) { header.append(contentsOf: $0) }
    withUnsafeBytes(of: length.littleEndian) { header.append(contentsOf: $0) }
    withUnsafeBytes(of: payloadCRC.littleEndian) { header.append(contentsOf: $0) }
    withUnsafeBytes(of: CRC32C.checksum(header).littleEndian) { header.append(contentsOf: $0) }
    return header
}
