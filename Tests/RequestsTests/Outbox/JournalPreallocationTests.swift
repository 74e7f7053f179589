import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// The zeros the journal writes ahead of its records (`Journal.Options.preallocation`): the file grows in steps,
/// recovery takes a tail of zeros for that space and not for damage, a close gives the space back, and a full disk
/// while writing them leaves nothing of the call.
final class JournalPreallocationTests: XCTestCase {
    private let step: UInt64 = 4096
    private let reserve: UInt64 = 1024

    private var options: Journal.Options {
        var options = Journal.Options()
        options.preallocation = step
        options.reserve = reserve
        options.compactionMinimum = .max
        return options
    }

    /// The bytes of a file header and of `payloads`' records.
    private func contentSize(_ payloads: [Data]) -> Int {
        JournalFormat.fileHeaderSize + payloads.reduce(0) { $0 + JournalFormat.recordHeaderSize + $1.count }
    }

    private func size(_ url: URL) throws -> Int {
        try XCTUnwrap(FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int)
    }

    func testTheFileGrowsInStepsAndACloseGivesTheSpaceBack() throws {
        let folder = makeJournalFolder(self)
        let file = folder.appendingPathComponent("journal")
        let journal = try Journal(directory: folder, options: options, fileSystem: PosixJournalFileSystem())
        let payloads = (1...60).map { samplePayload($0, size: 100) }
        for payload in payloads { try journal.append([payload]) }
        let content = contentSize(payloads)
        XCTAssertGreaterThan(content, Int(step), "the test crosses a step")
        XCTAssertEqual(try size(file), Int(JournalSpace.roundedUp(UInt64(content) + reserve, to: step)), "zeros up to the step after the reserve")
        journal.close()
        XCTAssertEqual(try size(file), content + Int(reserve), "a close cuts the zeros off but for the reserve")
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.payload), payloads)
    }

    func testAfterACrashAZeroTailIsNoDamageAndATornRecordInItIs() throws {
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder, options: options, fileSystem: PosixJournalFileSystem())
        defer { journal.close() }
        let payloads = (1...5).map { samplePayload($0, size: 40) }
        for payload in payloads { try journal.append([payload]) }
        let content = contentSize(payloads)

        let quiet = try crashCopy(ofJournalIn: folder)
        XCTAssertGreaterThan(try size(quiet.appendingPathComponent("journal")), content, "zeros after the records")
        let log = JournalEventLog()
        let reopened = try Journal(directory: quiet, events: log.handler)
        XCTAssertEqual(reopened.recovered.map(\.payload), payloads)
        XCTAssertEqual(log.events, [], "zeros written ahead are not a torn tail")
        XCTAssertEqual(try reopened.append([samplePayload(6)]), [6])
        reopened.close()

        // A record cut short by the crash, inside the zeros: a torn tail, reported and cut off.
        let torn = try crashCopy(ofJournalIn: folder)
        let tornFile = torn.appendingPathComponent("journal")
        var record = Data()
        let header = JournalFormat.RecordHeader(kind: .put, continues: false, id: 6, length: 40, payloadCRC: CRC32C.checksum(samplePayload(6, size: 40)))
        JournalFormat.appendRecordHeader(header, to: &record)
        record += samplePayload(6, size: 40).prefix(10)
        let handle = try FileHandle(forWritingTo: tornFile)
        try handle.seek(toOffset: UInt64(content))
        try handle.write(contentsOf: record)
        try handle.close()
        let tornLog = JournalEventLog()
        let recovered = try Journal(directory: torn, events: tornLog.handler)
        XCTAssertEqual(recovered.recovered.map(\.payload), payloads)
        XCTAssertEqual(tornLog.events, [.discardedTornTail(file: tornFile.path, offset: UInt64(content))])
        XCTAssertEqual(try size(tornFile), content + Int(Journal.Options().reserve), "cut off at the last whole record, then the reserve")
        XCTAssertTrue(try Data(contentsOf: tornFile)[content...].allSatisfy { $0 == 0 }, "nothing of the torn record is left")
        recovered.close()
    }

    func testZerosComeFirstAndAFullDiskRefusesNewRecordsButNotRemovals() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem)
        // The first append writes zeros up to the step after its record and the reserve, then its record.
        let writes = fileSystem.count(.write)
        try journal.append([samplePayload(1)])
        XCTAssertEqual(fileSystem.count(.write), writes + 2)
        // Appends that leave the reserve within the step are one write each.
        try journal.append([samplePayload(2)])
        XCTAssertEqual(fileSystem.count(.write), writes + 3)
        // A call that needs the next step: its zeros fail half-way (a full disk), so it fails, and nothing of it is
        // written (its record's write is not even tried).
        let zeros = fileSystem.count(.write) + 1
        fileSystem.setFault { call, number, _ in call == .write && number >= zeros ? .fail(errno: ENOSPC, writtenFirst: 100) : nil }
        XCTAssertThrowsError(try journal.append([samplePayload(3, size: Int(step))])) {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: ENOSPC, operation: "write"))
        }
        XCTAssertEqual(fileSystem.count(.write), zeros)
        // A removal needs no new space (its record goes into the zeros kept as the reserve): one write, no zeros.
        fileSystem.setFault(nil)
        try journal.remove([1])
        XCTAssertEqual(fileSystem.count(.write), zeros + 1)
        // A record's own write failing fails its call, and nothing of it remains.
        let record = fileSystem.count(.write) + 1
        fileSystem.setFault { call, number, _ in call == .write && number == record ? .fail(errno: ENOSPC, writtenFirst: 10) : nil }
        XCTAssertThrowsError(try journal.append([samplePayload(4)])) {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: ENOSPC, operation: "write"))
        }
        fileSystem.setFault(nil)
        XCTAssertEqual(try journal.append([samplePayload(5, size: Int(step))]), [5], "space is back (ids are never reused)")
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.payload), [samplePayload(2), samplePayload(5, size: Int(step))])
    }

    /// A group holding a call that needs new space and a removal: the zeros fail (a full disk), the call fails with
    /// nothing of it written, and the removal is written and synced in the same group.
    func testInOneGroupARefusedCallLeavesTheRemovalWritten() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem)
        try journal.append([samplePayload(1)])
        try journal.append([samplePayload(2)])
        // The next call's write (its record: no zeros needed) waits while a large append and a removal queue;
        // the group after it then needs zeros, which fail.
        let leaderWrite = fileSystem.count(.write) + 1
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        fileSystem.setFault { call, number, _ in
            guard call == .write else { return nil }
            if number == leaderWrite {
                entered.signal()
                release.wait()
            }
            return number == leaderWrite + 1 ? .fail(errno: ENOSPC, writtenFirst: 100) : nil
        }
        let results = JournalCallResults()
        let done = DispatchGroup()
        func call(_ number: Int, _ body: @escaping @Sendable () throws -> [UInt64]) {
            done.enter()
            Thread.detachNewThread {
                results.store(number, Result(catching: body))
                done.leave()
            }
        }
        call(0) { try journal.append([samplePayload(3)]) }
        entered.wait()
        let large = samplePayload(4, size: Int(step))
        call(1) { try journal.append([large]) }
        call(2) {
            try journal.remove([1])
            return []
        }
        waitUntil("two calls queued") { journal.queuedCallCount == 2 }
        let syncs = fileSystem.count(.syncData)
        release.signal()
        done.wait()
        XCTAssertEqual(try results.get(0).get(), [3])
        XCTAssertThrowsError(try results.get(1).get()) {
            XCTAssertEqual($0 as? JournalError, .writeFailed(errno: ENOSPC, operation: "write"))
        }
        XCTAssertNoThrow(try results.get(2).get())
        XCTAssertEqual(fileSystem.count(.write), leaderWrite + 2, "the zeros, then the removal alone")
        XCTAssertEqual(fileSystem.count(.syncData), syncs + 2, "one sync per group")
        fileSystem.setFault(nil)
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.payload), [samplePayload(2), samplePayload(3)])
    }

    /// The zeros cover the records' place as well as what follows (so that a full disk fails that one write, before
    /// any record), up to the step after the reserve; a removal within the file needs none.
    func testZerosCoverTheRecordsPlaceAndTheReserve() throws {
        let put = try JournalBatch(kind: .put, id: 0, payloads: [samplePayload(1, size: 500)], limit: .max)
        let removal = try JournalBatch(kind: .remove, id: 0, payloads: [], limit: 0)
        removal.addRemovals([1, 2])
        let space = JournalSpace(start: 100, allocated: 300, options: options)
        XCTAssertEqual(space.zeros(before: [put]), 300..<step, "from what the file holds, over the records, to the step")
        XCTAssertEqual(space.zeros(before: [put, removal]), 300..<step)
        XCTAssertNil(space.zeros(before: [removal]), "a removal within the file needs no zeros")
        let end = space.start + UInt64(put.bytes.count)
        XCTAssertEqual(JournalSpace(start: 100, allocated: 100, options: options).zeros(before: [put]), 100..<step)
        XCTAssertEqual(JournalSpace(start: step - 200, allocated: step, options: options).zeros(before: [put]), step..<2 * step, "past the step")
        XCTAssertNil(JournalSpace(start: 100, allocated: end + reserve, options: options).zeros(before: [put]), "room enough")
        var exact = options
        exact.preallocation = 0
        XCTAssertNil(JournalSpace(start: 100, allocated: 100, options: exact).zeros(before: [put]))
    }
}
