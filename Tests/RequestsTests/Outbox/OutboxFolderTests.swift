#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer
import XCTest

/// The outbox on a real folder: damaged journals, privacy, refused folders, restarts.
final class OutboxFolderTests: XCTestCase {
    private func open(_ folder: URL) throws -> Outbox {
        var options = testOutboxOptions
        options.startsSuspended = true
        return try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self], options: options)
    }

    /// Three entries stored by an outbox that is then closed.
    private func storeThree(in folder: URL) throws -> [OutboxEntry] {
        let outbox = try open(folder)
        defer { outbox.close() }
        return try (0..<3).map { try outbox.enqueue(PostNote(path: "outbox/folder", text: "entry-\($0)-" + String(repeating: "x", count: 200))) }
    }

    func testADamagedRecordInTheMiddleIsSkippedAndTheOthersResume() throws {
        let folder = makeOutboxFolder(self)
        let entries = try storeThree(in: folder)
        let journal = folder.appendingPathComponent("journal")
        var bytes = try Data(contentsOf: journal)
        let middle = try XCTUnwrap(bytes.range(of: Data("entry-1-".utf8)))
        bytes[middle.lowerBound] ^= 0xFF
        try bytes.write(to: journal)

        let queue = OperationQueue()
        let monitor = OpeningMonitor()
        queue.requestPolicies.monitors.append(monitor)
        var options = testOutboxOptions
        options.startsSuspended = true
        let reopened = try Outbox(directory: folder, queue: queue, session: testSession, requestTypes: [PostNote.self], options: options)
        XCTAssertEqual(monitor.reports, [reopened.openingReport], "the queue's monitors are told")
        XCTAssertEqual(reopened.openingReport.skippedRecords, 1)
        XCTAssertFalse(reopened.openingReport.discardedIncompleteRecord)
        XCTAssertEqual(reopened.pendingEntries.map(\.idempotencyKey), [entries[0], entries[2]].map(\.idempotencyKey))
    }

    func testAnIncompleteLastRecordIsCutOff() throws {
        let folder = makeOutboxFolder(self)
        let entries = try storeThree(in: folder)
        let journal = folder.appendingPathComponent("journal")
        let bytes = try Data(contentsOf: journal)
        let last = try XCTUnwrap(bytes.range(of: Data("entry-2-".utf8)))
        try bytes.prefix(upTo: last.upperBound).write(to: journal)

        let reopened = try open(folder)
        XCTAssertTrue(reopened.openingReport.discardedIncompleteRecord)
        XCTAssertEqual(reopened.openingReport.skippedRecords, 0)
        // The checkpoint knew that the third entry had reached the disk: no crash makes this cut, so it is a loss too.
        XCTAssertEqual(reopened.openingReport.loss?.kind, .journalShortened)
        XCTAssertEqual(reopened.pendingEntries.map(\.idempotencyKey), entries.prefix(2).map(\.idempotencyKey))
        // And the journal goes on after the cut: a new entry survives another reopen.
        let added = try reopened.enqueue(PostNote(path: "outbox/folder", text: "after the cut"))
        reopened.close()
        XCTAssertEqual(try open(folder).pendingEntries.map(\.idempotencyKey), entries.prefix(2).map(\.idempotencyKey) + [added.idempotencyKey])
    }

    func testTheFolderAndItsFilesArePrivate() throws {
        let folder = makeOutboxFolder(self)
        _ = try storeThree(in: folder)
        let mode = { (url: URL) -> Int in
            ((try? FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int) ?? -1) & 0o777
        }
        XCTAssertEqual(mode(folder), 0o700)
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        XCTAssertTrue(files.contains("journal"), "\(files)")
        for file in files {
            XCTAssertEqual(mode(folder.appendingPathComponent(file)), 0o600, file)
        }
    }

    func testASymbolicLinkIsRefusedAndNothingIsWrittenWhereItPoints() throws {
        let target = makeOutboxFolder(self)
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        let link = makeOutboxFolder(self)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        XCTAssertThrowsError(try open(link)) { error in
            guard case .unusableFolder(link, _) = error as? OutboxError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: target.path), [])
    }

    /// After `close()`, an enqueue throws `.closed` and stores nothing; the folder is free for the next outbox.
    func testEnqueueAfterCloseThrowsClosedAndStoresNothing() throws {
        let folder = makeOutboxFolder(self)
        let stored = try storeThree(in: folder)
        let outbox = try open(folder)
        outbox.close()
        XCTAssertThrowsError(try outbox.enqueue(PostNote(path: "outbox/folder", text: "late"))) { error in
            guard case OutboxError.closed = error else { return XCTFail("\(error)") }
        }
        let reopened = try open(folder)
        defer { reopened.close() }
        XCTAssertEqual(reopened.pendingEntries.map(\.idempotencyKey), stored.map(\.idempotencyKey))
    }

    func testParkedEntriesStayParkedAcrossARestart() throws {
        let path = "/outbox/park-restart-\(UUID().uuidString)"
        TestServer.shared.route(path) { _ in LoopbackResponse(status: 400, body: Data("no".utf8)) }
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder)
        let changes = ChangeRecorder(outbox)
        let parked = changes.expectation("parked") { $0.kind == .parked }
        let entry = try outbox.enqueue(PostNote(path: String(path.dropFirst()), text: "rejected"))
        outbox.isSuspended = false
        wait(for: [parked], timeout: 20)
        outbox.close()

        let reopened = try open(folder)
        XCTAssertEqual(reopened.openingReport.deadLetters, 1)
        XCTAssertEqual(reopened.pendingCount, 0)
        let letter = try XCTUnwrap(reopened.deadLetters.first)
        XCTAssertEqual(letter.idempotencyKey, entry.idempotencyKey)
        XCTAssertEqual(letter.deadLetter?.reason, .rejected(statusCode: 400))
        XCTAssertEqual(letter.deadLetter?.response?.body, Data("no".utf8))
        XCTAssertEqual(letter.request(as: PostNote.self)?.text, "rejected")
    }

    /// The lock file removed while an outbox has the folder open: a second outbox must still be refused, or the two
    /// would append at their own offsets and overwrite each other's acknowledged entries.
    func testLockFileRemovedWhileOpen() throws {
        let folder = makeOutboxFolder(self)
        let first = try open(folder)
        defer { first.close() }
        _ = try first.enqueue(PostNote(path: "p", text: "one"))
        try FileManager.default.removeItem(at: folder.appendingPathComponent("journal.lock"))
        XCTAssertThrowsError(try open(folder)) { XCTAssertEqual($0 as? OutboxError, .folderInUse(folder)) }
    }
}

/// Keeps the opening reports it is told.
final class OpeningMonitor: OutboxMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var kept: [OutboxOpeningReport] = []
    var reports: [OutboxOpeningReport] { lock.withLock { kept } }
    func outboxDidOpen(_ directory: URL, report: OutboxOpeningReport) { lock.withLock { kept.append(report) } }
}
