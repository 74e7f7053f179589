#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
@testable import RequestsOutbox
import RequestsTestServer
import XCTest

/// Entries that carry files (issue #48): copied at enqueue, sent streamed with the same bytes on every attempt,
/// removed when the entry leaves, checked on open.
final class OutboxAttachmentTests: XCTestCase {
    private func open(_ folder: URL, suspended: Bool = false, largest: Int64 = 1 << 30, total: Int64 = 4 << 30) throws -> Outbox {
        var options = testOutboxOptions
        options.startsSuspended = suspended
        options.maximumAttachmentSize = largest
        options.maximumAttachmentsSize = total
        return try Outbox(directory: folder, queue: OperationQueue(), session: testSession, requestTypes: [PostNote.self, BareNote.self], options: options)
    }

    /// The stored files of `outbox`'s folder.
    private func storedFiles(_ folder: URL) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: folder.appendingPathComponent("files").path)) ?? []
    }

    func testAFileSentAsTheBodyArrivesWholeAndLeavesWithItsEntry() throws {
        let path = "outbox/\(UUID().uuidString)"
        let server = FingerprintingServer(refusals: 1)
        TestServer.shared.route("/" + path) { server.handle($0) }
        let folder = makeOutboxFolder(self)
        let source = try makeFile(self, bytes: 300_000, name: "photo.jpg")
        let bytes = try Data(contentsOf: source)
        let outbox = try open(folder)
        let changes = ChangeRecorder(outbox)
        let sent = changes.expectation("sent") { $0.kind.isSent }
        let entry = try outbox.enqueue(BareNote(path: path), files: .body(OutboxAttachment(file: source)))
        try FileManager.default.removeItem(at: source)  // the outbox has its own copy
        wait(for: [sent], timeout: 20)
        outbox.close()
        XCTAssertEqual(server.bodies.count, 2, "a 503, then the same bytes again")
        XCTAssertEqual(server.bodies.first, bytes)
        XCTAssertEqual(Set(server.bodies).count, 1)
        XCTAssertEqual(server.contentTypes.first, "image/jpeg")
        XCTAssertEqual(entry.attachments.map(\.size), [300_000])
        var hasher = SHA256()
        hasher.update(bytes)
        XCTAssertEqual(entry.attachments.first?.sha256, SHA256.hex(hasher.finalize()))
        XCTAssertEqual(storedFiles(folder), [], "removed once the entry's removal is written")
    }

    func testAMultipartBodyCarriesTheRequestAndTheFilesWithTheSameBytesAfterARestart() throws {
        let path = "outbox/\(UUID().uuidString)"
        let server = FingerprintingServer(refusals: 1)
        TestServer.shared.route("/" + path) { server.handle($0) }
        let folder = makeOutboxFolder(self)
        let photo = try makeFile(self, bytes: 70_000, name: "site.png")
        let log = try makeFile(self, bytes: 1_000, name: "log.txt")
        let first = try open(folder)
        let changes = ChangeRecorder(first)
        let refused = changes.expectation("503") { $0.kind.isWillRetry }
        let files = OutboxFiles.multipart([OutboxAttachment(file: photo, name: "photo"), OutboxAttachment(file: log, name: "log", fileName: "today.txt")], requestPart: "note")
        let entry = try first.enqueue(PostNote(path: path, text: "hello"), lane: "notes", files: files)
        XCTAssertEqual(storedFiles(folder).count, 2)
        wait(for: [refused], timeout: 20)
        first.close()

        let second = try open(folder, suspended: true)
        XCTAssertEqual(second.openingReport.attachments, 2)
        XCTAssertTrue(second.openingReport.isAllClear)
        let resumed = ChangeRecorder(second)
        let sent = resumed.expectation("sent after the restart") { $0.kind.isSent }
        second.isSuspended = false
        wait(for: [sent], timeout: 20)
        second.close()
        XCTAssertEqual(server.bodies.count, 2)
        XCTAssertEqual(Set(server.bodies).count, 1, "the same boundary and parts after the restart")
        let body = try XCTUnwrap(server.bodies.first)
        XCTAssertNotNil(body.range(of: try Data(contentsOf: photo)))
        XCTAssertNotNil(body.range(of: try Data(contentsOf: log)))
        XCTAssertNotNil(body.range(of: Data(#"name="note""#.utf8)))
        XCTAssertNotNil(body.range(of: Data(#"filename="today.txt""#.utf8)))
        XCTAssertNotNil(body.range(of: Data("Content-Type: image/png".utf8)))
        XCTAssertNotNil(body.range(of: Data("hello".utf8)))
        XCTAssertEqual(server.contentTypes.first.map { $0.hasPrefix("multipart/form-data; boundary=") }, true)
        XCTAssertEqual(entry.attachments.map(\.fileName), ["site.png", "today.txt"])
        XCTAssertEqual(storedFiles(folder), [])
    }

    func testLimitsAndUnusableFilesStoreNothing() throws {
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: true, largest: 10_000, total: 15_000)
        defer { outbox.close() }
        let big = try makeFile(self, bytes: 10_001, name: "big.bin")
        let small = try makeFile(self, bytes: 8_000, name: "small.bin")
        XCTAssertThrowsError(try outbox.enqueue(BareNote(path: "x"), files: .body(OutboxAttachment(file: big)))) {
            XCTAssertEqual($0 as? OutboxError, .attachmentTooLarge(size: 10_001, limit: 10_000))
        }
        try outbox.enqueue(BareNote(path: "x"), files: .body(OutboxAttachment(file: small)))
        XCTAssertThrowsError(try outbox.enqueue(BareNote(path: "x"), files: .multipart([OutboxAttachment(file: small)]))) {
            XCTAssertEqual($0 as? OutboxError, .attachmentsFull(size: 8_000, limit: 15_000))
        }
        let missing = folder.deletingLastPathComponent().appendingPathComponent("missing-\(UUID().uuidString)")
        XCTAssertThrowsError(try outbox.enqueue(BareNote(path: "x"), files: .multipart([OutboxAttachment(file: missing)]))) {
            guard case .unusableAttachment = $0 as? OutboxError else { return XCTFail("\($0)") }
        }
        XCTAssertThrowsError(try outbox.enqueue(BareNote(path: "x"), files: .body(OutboxAttachment(file: folder)))) {
            guard case .unusableAttachment = $0 as? OutboxError else { return XCTFail("\($0)") }
        }
        // A request with a body of its own cannot also have a file as its body.
        XCTAssertThrowsError(try outbox.enqueue(PostNote(path: "x", text: "t"), files: .body(OutboxAttachment(file: small)))) {
            guard case .unusableAttachment = $0 as? OutboxError else { return XCTFail("\($0)") }
        }
        let injected = OutboxAttachment(file: small, mimeType: "image/png\r\nX-Injected: 1")
        XCTAssertThrowsError(try outbox.enqueue(BareNote(path: "x"), files: .multipart([injected]))) {
            guard case .unusableAttachment = $0 as? OutboxError else { return XCTFail("\($0)") }
        }
        XCTAssertEqual(outbox.pendingCount, 1)
        XCTAssertEqual(storedFiles(folder).count, 1, "only the entry that was stored has a file")
    }

    func testAnExpiredEntrysFileIsRemoved() throws {
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: true)
        let changes = ChangeRecorder(outbox)
        let expired = changes.expectation("expired") { $0.kind == .dropped(.expired) }
        let file = try makeFile(self, bytes: 3_000, name: "old.bin")
        try outbox.enqueue(BareNote(path: "x"), expiresAt: Date(timeIntervalSinceNow: -1), files: .body(OutboxAttachment(file: file)))
        XCTAssertEqual(storedFiles(folder).count, 1)
        outbox.isSuspended = false
        wait(for: [expired], timeout: 20)
        outbox.close()
        XCTAssertEqual(storedFiles(folder), [])
    }

    func testFilesArePrivateAndDroppingAnEntryRemovesItsFiles() throws {
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: true)
        defer { outbox.close() }
        let entry = try outbox.enqueue(BareNote(path: "x"), files: .body(OutboxAttachment(file: try makeFile(self, bytes: 5_000, name: "a.bin"))))
        let files = folder.appendingPathComponent("files")
        let name = try XCTUnwrap(storedFiles(folder).first)
        XCTAssertEqual(try mode(of: files), 0o700)
        XCTAssertEqual(try mode(of: files.appendingPathComponent(name)), 0o600)
        try outbox.drop(entry.id)
        XCTAssertEqual(storedFiles(folder), [])
    }

    /// A file removed, cut short, changed or replaced by a link: the opening report names it and its entry is parked
    /// with the reason (a changed byte is found by the SHA-256 before the first attempt); a file no entry carries is
    /// removed; the file a link points to is never touched.
    func testMissingDamagedAndLinkedFilesParkTheirEntriesAndStrayFilesAreRemoved() throws {
        let path = "outbox/\(UUID().uuidString)"
        let server = FingerprintingServer(refusals: 0)
        TestServer.shared.route("/" + path) { server.handle($0) }
        let folder = makeOutboxFolder(self)
        let first = try open(folder, suspended: true)
        var entries: [OutboxEntry] = []
        for index in 0..<5 {
            let file = try makeFile(self, bytes: 2_000 + index, name: "f\(index).bin")
            entries.append(try first.enqueue(BareNote(path: path), lane: "l\(index)", files: .body(OutboxAttachment(file: file))))
        }
        first.close()
        let files = folder.appendingPathComponent("files")
        func stored(_ index: Int) -> URL { files.appendingPathComponent(entries[index].attachments[0].storedName) }
        try FileManager.default.removeItem(at: stored(0))
        try Data(count: 10).write(to: stored(1))
        var changed = try Data(contentsOf: stored(2))
        changed[0] ^= 0xFF
        try changed.write(to: stored(2))
        let outside = try makeFile(self, bytes: 2_003, name: "outside.bin")
        try FileManager.default.removeItem(at: stored(3))
        try FileManager.default.createSymbolicLink(at: stored(3), withDestinationURL: outside)
        try Data("stray".utf8).write(to: files.appendingPathComponent("stray"))

        let second = try open(folder, suspended: true)
        defer { second.close() }
        let report = second.openingReport
        XCTAssertEqual(report.attachments, 5)
        XCTAssertEqual(report.removedStrayFiles, 1)
        XCTAssertFalse(report.isAllClear)
        XCTAssertEqual(report.damagedAttachments.map(\.entryID), [entries[0].id, entries[1].id, entries[3].id])
        XCTAssertEqual(report.damagedAttachments.map(\.fileName), ["f0.bin", "f1.bin", "f3.bin"])
        XCTAssertEqual(report.damagedAttachments[0].problem, "it is missing")
        XCTAssertEqual(report.damagedAttachments[1].problem, "it has 10 bytes instead of 2001")
        XCTAssertEqual(Set(second.deadLetters.map(\.id)), [entries[0].id, entries[1].id, entries[3].id])
        let changes = ChangeRecorder(second)
        let parked = changes.expectation("the changed file is found before sending") { $0.kind == .parked }
        let sent = changes.expectation("the intact one is sent") { $0.kind.isSent }
        second.isSuspended = false
        wait(for: [parked, sent], timeout: 20)
        XCTAssertEqual(changes.all.first { $0.kind == .parked }?.entry.id, entries[2].id)
        guard case let .failed(reason)? = second.deadLetters.first(where: { $0.id == entries[2].id })?.deadLetter?.reason else {
            return XCTFail("not parked with a reason")
        }
        XCTAssertTrue(reason.contains("SHA-256"), reason)
        XCTAssertEqual(server.bodies.count, 1, "only the intact file was sent")
        XCTAssertEqual(try Data(contentsOf: outside).count, 2_003)
        XCTAssertFalse(FileManager.default.fileExists(atPath: files.appendingPathComponent("stray").path))
    }

    /// A link put in place of a stored file after enqueue is found before the attempt: the entry is parked, and
    /// the bytes the link points to are never sent.
    func testALinkPutInPlaceOfAStoredFileParksTheEntryUnsent() throws {
        let path = "outbox/\(UUID().uuidString)"
        let server = FingerprintingServer(refusals: 0)
        TestServer.shared.route("/" + path) { server.handle($0) }
        let folder = makeOutboxFolder(self)
        let outbox = try open(folder, suspended: true)
        defer { outbox.close() }
        let entry = try outbox.enqueue(BareNote(path: path), files: .body(OutboxAttachment(file: try makeFile(self, bytes: 1_000, name: "a.bin"))))
        let stored = folder.appendingPathComponent("files").appendingPathComponent(entry.attachments[0].storedName)
        try FileManager.default.removeItem(at: stored)
        try FileManager.default.createSymbolicLink(at: stored, withDestinationURL: try makeFile(self, bytes: 1_000, name: "secret.bin"))
        let changes = ChangeRecorder(outbox)
        let parked = changes.expectation("parked") { $0.kind == .parked }
        outbox.isSuspended = false
        wait(for: [parked], timeout: 20)
        XCTAssertEqual(server.bodies.count, 0)
        guard case let .failed(reason)? = outbox.deadLetters.first?.deadLetter?.reason else { return XCTFail("not parked") }
        XCTAssertTrue(reason.contains("cannot be opened"), reason)
    }

    func testAFilesFolderThatIsALinkIsRefusedAndNothingIsWrittenWhereItPoints() throws {
        let folder = makeOutboxFolder(self)
        try open(folder, suspended: true).close()
        let elsewhere = try makeFile(self, bytes: 10, name: "victim").deletingLastPathComponent()
        try FileManager.default.createSymbolicLink(at: folder.appendingPathComponent("files"), withDestinationURL: elsewhere)
        XCTAssertThrowsError(try open(folder, suspended: true)) {
            XCTAssertEqual($0 as? OutboxError, .unusableFolder(folder.appendingPathComponent("files", isDirectory: true), "it is a symbolic link"))
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere.path), ["victim"])
        // The journal is usable again once the link is gone (the refused open released the folder).
        try FileManager.default.removeItem(at: folder.appendingPathComponent("files"))
        try open(folder, suspended: true).close()
    }

    func testTheRecordOfAnEntryWithFilesRoundTripsAndRefusesANameThatLeavesTheFolder() throws {
        var entry = OutboxEntry(
            id: 3, idempotencyKey: "k", lane: nil, requestType: "T", enqueuedAt: Date(timeIntervalSince1970: 5), expiresAt: nil,
            attempts: 0, deadLetter: nil, encodedRequest: Data("{}".utf8), frozen: nil)
        entry.coalescingKey = "draft"
        let file = OutboxStoredFile(name: "p", fileName: "a.jpg", mimeType: "image/jpeg", size: 7, digest: Array(repeating: 1, count: 32), storedName: "abc")
        entry.files = OutboxStoredFiles(form: .multipart, requestPart: "r", boundary: "b", files: [file])
        let encoded = OutboxRecord.encode(entry)
        XCTAssertEqual(encoded.first, 3)
        XCTAssertEqual(OutboxRecord.decode(encoded, id: 3), entry)
        for hostile in ["..", "../journal", "", "a/b"] {
            var bad = entry
            bad.files?.files[0] = OutboxStoredFile(name: "p", fileName: "a", mimeType: "t", size: 7, digest: file.digest, storedName: hostile)
            XCTAssertNil(OutboxRecord.decode(OutboxRecord.encode(bad), id: 3), hostile)
        }
        // Every cut of the record is refused, none traps.
        for end in 0..<encoded.count { XCTAssertNil(OutboxRecord.decode(encoded.prefix(end), id: 3)) }
        // An entry without files or key is still written in format 2.
        entry.files = nil
        entry.coalescingKey = nil
        XCTAssertEqual(OutboxRecord.encode(entry).first, 2)
    }
}

/// A POST with no body of its own, for a file sent as the body.
struct BareNote: OutboxRequest, NoContentRequest {
    var path: String
    var identifier: String { "bare#" + path }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var shouldEnforceNoContent: Bool { false }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: TestServer.shared.url("/" + path))
        request.httpMethod = "POST"
        completion(.success(request))
    }
}

/// A file of `bytes` random bytes named `name` in a new folder, removed after the test.
func makeFile(_ test: XCTestCase, bytes: Int, name: String) throws -> URL {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-source-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    test.addTeardownBlock { try? FileManager.default.removeItem(at: folder) }
    var generator = SystemRandomNumberGenerator()
    let data = Data((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) })
    let url = folder.appendingPathComponent(name)
    try data.write(to: url)
    return url
}

func mode(of url: URL) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
}
