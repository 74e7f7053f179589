#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// Coalescing (issue #48): the latest draft wins; an entry in flight is not replaced; the replacement is one call of
/// the journal.
final class OutboxCoalescingTests: XCTestCase {
    private func open(_ folder: URL, suspended: Bool) throws -> Outbox {
        var options = testOutboxOptions
        options.startsSuspended = suspended
        return try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self, BareNote.self], options: options)
    }

    func testTheLatestPendingDraftReplacesTheOthersAndIsTheOneSent() throws {
        let path = "outbox/\(UUID().uuidString)"
        let received = ReceivedNotes()
        TestServer.shared.route("/" + path) { request in
            received.add(request)
            return LoopbackResponse(status: 201)
        }
        let folder = makeOutboxFolder(self)
        let first = try open(folder, suspended: true)
        let changes = ChangeRecorder(first)
        let replacedAll = changes.expectation("four replaced", count: 4) {
            if case .dropped(.replaced) = $0.kind { return true } else { return false }
        }
        var entries: [OutboxEntry] = []
        for draft in 1...5 { entries.append(try first.enqueue(PostNote(path: path, text: "draft \(draft)"), replacing: "form-1")) }
        try first.enqueue(PostNote(path: path, text: "other form"), replacing: "form-2")
        wait(for: [replacedAll], timeout: 20)
        XCTAssertEqual(first.pendingEntries.map(\.id), [entries[4].id, entries[4].id + 1])
        XCTAssertEqual(entries[4].lane, "form-1", "the lane is the key")
        XCTAssertEqual(entries[4].coalescingKey, "form-1")
        let replaced = changes.all.compactMap { change -> (UInt64, UInt64)? in
            guard case let .dropped(.replaced(by)) = change.kind else { return nil }
            return (change.entry.id, by)
        }
        XCTAssertEqual(replaced.map(\.0), entries.prefix(4).map(\.id))
        XCTAssertEqual(replaced.map(\.1), entries[1...4].map(\.id))
        first.close()

        let second = try open(folder, suspended: true)
        defer { second.close() }
        XCTAssertEqual(second.openingReport.pending, 2, "the journal holds the latest drafts only")
        let resumed = ChangeRecorder(second)
        let sent = resumed.expectation("both sent", count: 2) { $0.kind.isSent }
        second.isSuspended = false
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(Set(received.texts), ["draft 5", "other form"])
    }

    func testAnEntryInFlightIsNotReplacedAndTheLatestDraftFollowsIt() throws {
        let path = "outbox/\(UUID().uuidString)"
        let received = ReceivedNotes()
        let gate = DispatchSemaphore(value: 0)
        let arrived = expectation(description: "the first draft is in flight")
        TestServer.shared.route("/" + path) { request in
            received.add(request)
            if String(decoding: request.body, as: UTF8.self) == "draft 1" {
                arrived.fulfill()
                _ = gate.wait(timeout: .now() + 20)
            }
            return LoopbackResponse(status: 201)
        }
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: false)
        defer { outbox.close() }
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("two sent", count: 2) { $0.kind.isSent }
        let one = try outbox.enqueue(PostNote(path: path, text: "draft 1"), replacing: "form")
        wait(for: [arrived], timeout: 20)
        let two = try outbox.enqueue(PostNote(path: path, text: "draft 2"), replacing: "form")
        let three = try outbox.enqueue(PostNote(path: path, text: "draft 3"), replacing: "form")
        XCTAssertEqual(outbox.pendingEntries.map(\.id), [one.id, three.id], "the one in flight stays, the latest waits behind it")
        gate.signal()
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(received.texts, ["draft 1", "draft 3"])
        let dropped = changes.all.filter { $0.kind == .dropped(.replaced(by: three.id)) }.map(\.entry.id)
        XCTAssertEqual(dropped, [two.id])
    }

    func testAParkedDraftIsReplacedAndAnEmptyMultipartEntryIsReadAgain() throws {
        let path = "outbox/\(UUID().uuidString)"
        let statuses = ScriptedStatuses([422])
        TestServer.shared.route("/" + path) { _ in LoopbackResponse(status: statuses.next()) }
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: false)
        let changes = ChangeRecorder(outbox)
        let parked = changes.expectation("parked") { $0.kind == .parked }
        let first = try outbox.enqueue(PostNote(path: path, text: "draft 1"), replacing: "form")
        wait(for: [parked], timeout: 20)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        let second = try outbox.enqueue(PostNote(path: path, text: "draft 2"), files: .multipart([]), replacing: "form")
        wait(for: [sent], timeout: 20)
        XCTAssertEqual(outbox.deadLetters.count, 0)
        XCTAssertTrue(changes.all.contains { $0.kind == .dropped(.replaced(by: second.id)) && $0.entry.id == first.id })
        outbox.isSuspended = true
        let third = try outbox.enqueue(PostNote(path: path, text: "draft 3"), files: .multipart([]), replacing: "form")
        outbox.close()
        let reopened = try open(folder, suspended: true)
        defer { reopened.close() }
        XCTAssertEqual(reopened.openingReport.skippedRecords, 0)
        XCTAssertEqual(reopened.pendingEntries.map(\.id), [third.id])
    }

    func testAReplacedEntrysFilesAreRemoved() throws {
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: true)
        defer { outbox.close() }
        let file = try makeFile(self, bytes: 4_000, name: "draft.bin")
        try outbox.enqueue(BareNote(path: "x"), files: .body(OutboxAttachment(file: file)), replacing: "d")
        try outbox.enqueue(BareNote(path: "x"), files: .body(OutboxAttachment(file: file)), replacing: "d")
        let stored = try FileManager.default.contentsOfDirectory(atPath: folder.appendingPathComponent("files").path)
        XCTAssertEqual(stored, outbox.pendingEntries.flatMap(\.attachments).map(\.storedName), "the replaced entry's file is gone")
        XCTAssertEqual(outbox.pendingCount, 1)
    }
}

/// The journal's replacement is one call: whatever a crash cuts or loses of it, the journal holds the old record or
/// the new one, never both, never neither.
final class JournalReplaceTests: XCTestCase {
    func testEveryCutAndEveryLostRecordOfAReplacementLeavesTheOldRecordOrTheNew() throws {
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder, options: .exactSize, fileSystem: PosixJournalFileSystem())
        let old = samplePayload(1, size: 40)
        let new = samplePayload(2, size: 60)
        XCTAssertEqual(try journal.append([old]), [1])
        XCTAssertEqual(try journal.replace([1, 99], with: new), 2)
        XCTAssertEqual(try journal.replace([], with: samplePayload(3)), 3, "nothing to replace: a plain put")
        journal.close()
        let bytes = try Data(contentsOf: folder.appendingPathComponent("journal"))
        let start = JournalFormat.fileHeaderSize + JournalFormat.recordHeaderSize + old.count
        let tombstone = start + JournalFormat.recordHeaderSize + new.count
        let end = tombstone + JournalFormat.recordHeaderSize
        func recovered(_ file: Data) throws -> [UInt64] {
            let copy = makeJournalFolder(self, "copy")
            try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try file.write(to: copy.appendingPathComponent("journal"))
            let reopened = try Journal(directory: copy, options: .exactSize, fileSystem: PosixJournalFileSystem())
            defer { reopened.close() }
            return reopened.recovered.map(\.id)
        }
        XCTAssertEqual(try recovered(bytes.prefix(end)), [2])
        // Every fifth byte, and each byte around the records' edges: each cut costs an open and its syncs.
        let edges = [start, start + 1, tombstone - 1, tombstone, tombstone + 1, end - 1]
        for cut in Set(Array(stride(from: start, to: end, by: 5)) + edges).sorted() {
            XCTAssertEqual(try recovered(bytes.prefix(cut)), [1], "cut at \(cut)")
        }
        for lost in [start..<tombstone, tombstone..<end] {
            var damaged = bytes.prefix(end)
            damaged.replaceSubrange(lost, with: Data(count: lost.count))
            XCTAssertEqual(try recovered(damaged), [1], "record at \(lost) lost")
        }
    }
}
