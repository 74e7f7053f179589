import Foundation
import Requests
import RequestsOutbox
import XCTest

/// The outbox on a real file system that fills up. Skipped unless `REQUESTS_FULL_DISK_DIR` names an empty folder on
/// a small file system of its own, for example (as root): `mkdir -p /mnt/tiny && mount -t tmpfs -o size=1m tmpfs
/// /mnt/tiny`, then `REQUESTS_FULL_DISK_DIR=/mnt/tiny swift test --filter OutboxFullDiskTests`. (At 512k exactly, the
/// journal's second 256 KiB step no longer fits beside the checkpoint file's page once the filler is gone.) The
/// fault-injecting file system of `JournalFaultTests` covers the same in every run; this checks the real `ENOSPC` path
/// end to end.
final class OutboxFullDiskTests: XCTestCase {
    func testAFullDiskFailsEnqueuesCleanlyAndEntriesCanStillLeave() throws {
        guard let root = ProcessInfo.processInfo.environment["REQUESTS_FULL_DISK_DIR"] else {
            throw XCTSkip("set REQUESTS_FULL_DISK_DIR to a folder on a small file system of its own")
        }
        let folder = URL(fileURLWithPath: root).appendingPathComponent("outbox-\(UUID().uuidString)")
        let filler = URL(fileURLWithPath: root).appendingPathComponent("filler-\(UUID().uuidString)")
        defer {
            try? FileManager.default.removeItem(at: folder)
            try? FileManager.default.removeItem(at: filler)
        }
        var options = OutboxOptions()
        options.startsSuspended = true
        func open() throws -> Outbox {
            try Outbox(directory: folder, queue: OperationQueue(), requestTypes: [PostNote.self], options: options)
        }
        var outbox: Outbox? = try open()
        func note(_ index: Int) -> PostNote { PostNote(path: "full", text: "\(index)-" + String(repeating: "x", count: 200)) }
        var acknowledged = try (0..<30).map { try XCTUnwrap(outbox).enqueue(note($0)).idempotencyKey }
        // Another file takes what the journal has not: the disk is then full.
        XCTAssertTrue(FileManager.default.createFile(atPath: filler.path, contents: nil))
        func fill() throws {
            let handle = try FileHandle(forWritingTo: filler)
            _ = try handle.seekToEnd()
            while (try? handle.write(contentsOf: Data(count: 4096))) != nil {}
            while (try? handle.write(contentsOf: Data(count: 1))) != nil {}
            try handle.close()
        }
        try fill()
        var failures = 0
        var index = 30
        // Enqueues until 20 have failed: each either stores its entry or throws `writeFailed`.
        while failures < 20, index < 100_000 {
            do {
                let entry = try XCTUnwrap(outbox).enqueue(note(index))
                acknowledged.append(entry.idempotencyKey)
            } catch OutboxError.writeFailed {
                failures += 1
            }
            index += 1
        }
        XCTAssertEqual(failures, 20)
        XCTAssertGreaterThan(acknowledged.count, 30, "entries go on into the zeros written ahead, up to the reserve")
        // Entries can still leave a full disk: drops write into the zeros the journal kept for them (200 removals,
        // 5,600 bytes, are more than a step or a page has left after its last entry). Records with the frozen request
        // (record format 2, about twice format 1's for this note) fill the zeros ahead after about 330 entries.
        XCTAssertGreaterThan(acknowledged.count, 300)
        let dropped = try XCTUnwrap(outbox).pendingEntries.prefix(200)
        for entry in dropped { try XCTUnwrap(outbox).drop(entry.id) }
        outbox = nil

        // What the close gave back is taken too: the reserve the journal kept lets entries leave after a restart.
        try fill()
        let reopened = try open()
        XCTAssertEqual(reopened.openingReport.skippedRecords, 0)
        XCTAssertFalse(reopened.openingReport.discardedIncompleteRecord)
        XCTAssertEqual(reopened.pendingEntries.map(\.idempotencyKey), Array(acknowledged.dropFirst(200)))
        for entry in reopened.pendingEntries.prefix(200) { try reopened.drop(entry.id) }
        acknowledged.removeFirst(200)
        // Space given back: enqueues succeed again, and are kept.
        try FileManager.default.removeItem(at: filler)
        let after = try reopened.enqueue(PostNote(path: "full", text: "after"))
        reopened.close()
        let third = try open()
        defer { third.close() }
        XCTAssertEqual(third.pendingEntries.map(\.idempotencyKey), Array(acknowledged.dropFirst(200)) + [after.idempotencyKey])
    }
}
