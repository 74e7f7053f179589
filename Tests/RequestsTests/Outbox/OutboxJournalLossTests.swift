#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// Issue #47, silent loss, measured from outside: a real folder with 20 entries whose journal is then emptied,
/// deleted, replaced or shortened, or whose checkpoint is damaged or deleted. Each reopen's `openingReport` is
/// checked field by field, and so is what the queue's monitors are told. And no false alarm: a new folder, a
/// normal close, a crash, a compaction.
final class OutboxJournalLossTests: XCTestCase {
    /// An outbox that sends nothing (its entries stay pending), telling `monitor` what it found.
    private func open(_ folder: URL, monitor: OpeningMonitor? = nil) throws -> Outbox {
        let queue = OperationQueue()
        if let monitor { queue.requestPolicies.monitors.append(monitor) }
        var options = testOutboxOptions
        options.startsSuspended = true
        return try Outbox(directory: folder, queue: queue, session: testSession, requestTypes: [PostNote.self], options: options)
    }

    /// Twenty entries, one `enqueue` each; the outbox is closed.
    @discardableResult
    private func storeTwenty(in folder: URL) throws -> [OutboxEntry] {
        let outbox = try open(folder)
        defer { outbox.close() }
        return try (0..<20).map { try outbox.enqueue(PostNote(path: "loss", text: "entry-\($0)-" + String(repeating: "z", count: 100))) }
    }

    private func journal(_ folder: URL) -> URL { folder.appendingPathComponent("journal") }
    private func checkpoint(_ folder: URL) -> URL { folder.appendingPathComponent("journal.state") }

    /// Where the records of the journal file `bytes` end, in order (the zeros kept after them are no record).
    private func recordEnds(_ bytes: Data) -> [Int] {
        var ends: [Int] = []
        var offset = 32
        while offset + 28 <= bytes.count, bytes[offset] != 0 {
            var length = 0
            for index in 0..<4 { length |= Int(bytes[offset + 16 + index]) << (8 * index) }
            offset += 28 + length
            ends.append(offset)
        }
        return ends
    }

    private func report(
        pending: Int, skipped: Int = 0, discarded: Bool = false, loss: OutboxJournalLoss? = nil
    ) -> OutboxOpeningReport {
        OutboxOpeningReport(pending: pending, deadLetters: 0, skippedRecords: skipped, discardedIncompleteRecord: discarded, loss: loss)
    }

    /// A copy of the folder's journal and checkpoint as they are now, in a new folder: what a process that dies now
    /// leaves (the system keeps what it was given, synced or not).
    private func copyAsACrashLeavesIt(_ folder: URL) throws -> URL {
        let copy = makeOutboxFolder(self)
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        for name in ["journal", "journal.state"] {
            try FileManager.default.copyItem(at: folder.appendingPathComponent(name), to: copy.appendingPathComponent(name))
        }
        return copy
    }

    // MARK: - All clear

    func testAFreshFolderIsAllClear() throws {
        let folder = makeOutboxFolder(self)
        let monitor = OpeningMonitor()
        let outbox = try open(folder, monitor: monitor)
        defer { outbox.close() }
        XCTAssertEqual(outbox.openingReport, report(pending: 0))
        XCTAssertTrue(outbox.openingReport.isAllClear)
        XCTAssertEqual(monitor.reports, [outbox.openingReport])
    }

    func testANormalCloseAndReopenIsAllClear() throws {
        let folder = makeOutboxFolder(self)
        let entries = try storeTwenty(in: folder)
        let outbox = try open(folder)
        defer { outbox.close() }
        XCTAssertEqual(outbox.openingReport, report(pending: 20))
        XCTAssertTrue(outbox.openingReport.isAllClear)
        XCTAssertEqual(outbox.pendingEntries.map(\.idempotencyKey), entries.map(\.idempotencyKey))
    }

    /// The process dies with the outbox open: its journal and checkpoint are what it gave the system.
    func testAProcessThatDiedIsAllClear() throws {
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder)
        defer { outbox.close() }
        let entries = try (0..<20).map { try outbox.enqueue(PostNote(path: "loss", text: "entry-\($0)")) }
        try outbox.drop(entries[4].id)
        let copy = try copyAsACrashLeavesIt(folder)
        let reopened = try open(copy)
        defer { reopened.close() }
        XCTAssertEqual(reopened.openingReport, report(pending: 19))
        XCTAssertTrue(reopened.openingReport.isAllClear)
    }

    /// A compaction replaces the journal file: the checkpoint follows it, through a crash copy and a reopen, and still
    /// measures the new file.
    func testACompactionIsNoFalseAlarmAndTheCheckpointFollowsTheNewFile() throws {
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder)
        // 20 entries of 60 KB (the text twice: in the JSON and in the frozen body): the 18th drop makes the dead bytes pass the 1 MiB that makes the journal compact, so
        // that the new file holds the last two entries and nothing else.
        let entries = try (0..<20).map { try outbox.enqueue(PostNote(path: "loss", text: "entry-\($0)-" + String(repeating: "c", count: 30_000))) }
        let before = try Data(contentsOf: journal(folder))
        for entry in entries.prefix(18) { try outbox.drop(entry.id) }
        let after = try Data(contentsOf: journal(folder))
        XCTAssertNotEqual(after.prefix(32), before.prefix(32), "compacted: a new file, with a header of its own")
        XCTAssertEqual(recordEnds(after).count, 2, "compacted at the last drop: the two entries left")
        let copy = try copyAsACrashLeavesIt(folder)
        outbox.close()

        for (label, place) in [("a crash", copy), ("a close", folder)] {
            let reopened = try open(place)
            XCTAssertEqual(reopened.openingReport, report(pending: 2), label)
            XCTAssertEqual(reopened.pendingEntries.map(\.idempotencyKey), entries.suffix(2).map(\.idempotencyKey), label)
            reopened.close()
        }
        // The new file cut by a byte: shortened, not "replaced" (the checkpoint names the new file).
        let ends = recordEnds(try Data(contentsOf: journal(folder)))
        XCTAssertEqual(ends.count, 2)
        try Data(contentsOf: journal(folder)).prefix(ends[1] - 1).write(to: journal(folder))
        let cut = try open(folder)
        defer { cut.close() }
        XCTAssertEqual(cut.openingReport, report(pending: 1, discarded: true, loss: OutboxJournalLoss(kind: .journalShortened, entriesAtLastCheckpoint: 2, entriesFound: 1)))
        XCTAssertEqual(cut.openingReport.loss?.entriesKnownLost, 1)
    }

    // MARK: - The journal lost

    func testAnEmptiedJournalIsReportedToTheReportAndTheMonitorsOnce() throws {
        let folder = makeOutboxFolder(self)
        try storeTwenty(in: folder)
        try Data().write(to: journal(folder))
        let monitor = OpeningMonitor()
        let outbox = try open(folder, monitor: monitor)
        let loss = OutboxJournalLoss(kind: .journalEmptied, entriesAtLastCheckpoint: 20, entriesFound: 0)
        XCTAssertEqual(outbox.openingReport, report(pending: 0, loss: loss))
        XCTAssertEqual(outbox.openingReport.loss?.entriesKnownLost, 20)
        XCTAssertFalse(outbox.openingReport.isAllClear)
        XCTAssertEqual(monitor.reports, [outbox.openingReport], "the queue's monitors are told")
        // The outbox goes on, and gives no identifier it gave before.
        let added = try outbox.enqueue(PostNote(path: "loss", text: "after"))
        XCTAssertEqual(added.id, 21)
        outbox.close()
        let again = try open(folder)
        defer { again.close() }
        XCTAssertEqual(again.openingReport, report(pending: 1), "reported once")
        XCTAssertTrue(again.openingReport.isAllClear)
    }

    func testADeletedJournalIsReportedMissingNotFresh() throws {
        let folder = makeOutboxFolder(self)
        try storeTwenty(in: folder)
        try FileManager.default.removeItem(at: journal(folder))
        let outbox = try open(folder)
        defer { outbox.close() }
        XCTAssertEqual(outbox.openingReport, report(pending: 0, loss: OutboxJournalLoss(kind: .journalMissing, entriesAtLastCheckpoint: 20, entriesFound: 0)))
        XCTAssertFalse(outbox.openingReport.isAllClear)
    }

    func testAJournalReplacedByRandomBytesIsReplacedNotOneSkippedRecord() throws {
        let folder = makeOutboxFolder(self)
        try storeTwenty(in: folder)
        let size = try Data(contentsOf: journal(folder)).count
        var generator = SystemRandomNumberGenerator()
        var noise = Data((0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) })
        noise[0] = 0  // never the magic's first byte
        try noise.write(to: journal(folder))
        let outbox = try open(folder)
        defer { outbox.close() }
        XCTAssertEqual(outbox.openingReport, report(pending: 0, loss: OutboxJournalLoss(kind: .journalReplaced, entriesAtLastCheckpoint: 20, entriesFound: 0)))
        XCTAssertEqual(outbox.openingReport.skippedRecords, 0, "not one damaged record: the whole file")
    }

    func testAJournalCutInHalfIsShortened() throws {
        let folder = makeOutboxFolder(self)
        let entries = try storeTwenty(in: folder)
        let bytes = try Data(contentsOf: journal(folder))
        let ends = recordEnds(bytes)
        XCTAssertEqual(ends.count, 20)
        let half = ends[19] / 2
        let whole = ends.filter { $0 <= half }.count
        XCTAssertTrue((8...10).contains(whole), "\(whole) records before the middle of 20 of about the same size")
        try bytes.prefix(half).write(to: journal(folder))
        let outbox = try open(folder)
        defer { outbox.close() }
        let loss = OutboxJournalLoss(kind: .journalShortened, entriesAtLastCheckpoint: 20, entriesFound: whole)
        XCTAssertEqual(outbox.openingReport, report(pending: whole, discarded: !ends.contains(half), loss: loss))
        XCTAssertEqual(outbox.openingReport.loss?.entriesKnownLost, 20 - whole)
        XCTAssertEqual(outbox.pendingEntries.map(\.idempotencyKey), entries.prefix(whole).map(\.idempotencyKey))
    }

    // MARK: - The checkpoint

    func testADamagedCheckpointIsReportedOnceAndTheEntriesKept() throws {
        let folder = makeOutboxFolder(self)
        let entries = try storeTwenty(in: folder)
        let size = try Data(contentsOf: checkpoint(folder)).count
        try Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }).write(to: checkpoint(folder))
        let monitor = OpeningMonitor()
        let outbox = try open(folder, monitor: monitor)
        let loss = OutboxJournalLoss(kind: .checkpointDamaged, entriesAtLastCheckpoint: nil, entriesFound: 20)
        XCTAssertEqual(outbox.openingReport, report(pending: 20, loss: loss))
        XCTAssertEqual(outbox.openingReport.loss?.entriesKnownLost, 0, "unknown, not counted")
        XCTAssertFalse(outbox.openingReport.isAllClear)
        XCTAssertEqual(monitor.reports, [outbox.openingReport])
        XCTAssertEqual(outbox.pendingEntries.map(\.idempotencyKey), entries.map(\.idempotencyKey))
        outbox.close()
        let again = try open(folder)
        defer { again.close() }
        XCTAssertEqual(again.openingReport, report(pending: 20), "a new checkpoint was written")
    }

    /// A folder of the previous version has no checkpoint: no alarm, and it gets one, so that a journal lost from
    /// then on is reported.
    func testADeletedCheckpointIsAnEarlierVersionsFolderNoAlarm() throws {
        let folder = makeOutboxFolder(self)
        try storeTwenty(in: folder)
        try FileManager.default.removeItem(at: checkpoint(folder))
        let outbox = try open(folder)
        XCTAssertEqual(outbox.openingReport, report(pending: 20))
        XCTAssertTrue(outbox.openingReport.isAllClear)
        outbox.close()
        XCTAssertTrue(FileManager.default.fileExists(atPath: checkpoint(folder).path))
        try Data().write(to: journal(folder))
        let emptied = try open(folder)
        defer { emptied.close() }
        XCTAssertEqual(emptied.openingReport.loss, OutboxJournalLoss(kind: .journalEmptied, entriesAtLastCheckpoint: 20, entriesFound: 0))
    }
}
