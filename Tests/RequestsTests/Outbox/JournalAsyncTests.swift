import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The non-blocking calls (`append(_:completion:)`, `update(_:payload:completion:)`, `remove(_:completion:)`): they
/// share group commits with the blocking ones, each completion is called exactly once, in the group's order, never
/// on the caller's thread for a call that waits for a sync; a failed group fails them all and leaves nothing;
/// `close()` completes the queued ones with `.closed`. A sync held by the test (`SyncGate`) keeps a group in flight
/// so that calls queue behind it deterministically: no test depends on timing. Run under ThreadSanitizer too.
final class JournalAsyncTests: XCTestCase {
    private static let limit = 1 << 16

    private func open(_ folder: URL, _ fileSystem: JournalFileSystem, compactionMinimum: UInt64 = .max, events: (@Sendable (JournalEvent) -> Void)? = nil) throws -> Journal {
        var options = Journal.Options.exactSize
        options.compactionMinimum = compactionMinimum
        options.maximumPayloadSize = Self.limit
        return try Journal(directory: folder, options: options, fileSystem: fileSystem, events: events)
    }

    func testNonBlockingAndBlockingCallsShareGroupsAndEachCompletesOnceInTheGroupsOrder() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        let log = CompletionLog(journal)
        let gate = SyncGate(fileSystem)
        journal.append([samplePayload(0)], completion: log.expect(0))
        XCTAssertTrue(gate.waitUntilHeld(), "the writer queue leads the first call and waits in its sync")
        // Everything from here on queues behind that sync.
        for number in 1...30 { journal.append((0..<(number % 3 + 1)).map { samplePayload(number * 10 + $0) }, completion: log.expect(number)) }
        let results = JournalCallResults()
        let threads = DispatchGroup()
        for number in 31...34 {
            threads.enter()
            Thread.detachNewThread {
                results.store(number, Result { try journal.append([samplePayload(number * 10)]) })
                threads.leave()
            }
        }
        waitUntil("34 calls queued") { journal.queuedCallCount == 34 }
        XCTAssertEqual(log.calledCount, 0, "no call completes before its group is synced")
        gate.release()
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(threads.wait(timeout: .now() + 60), .success)

        XCTAssertEqual(journal.groupCommits.groups, 2, "the first call's group, then one group of the 34 queued")
        XCTAssertEqual(journal.groupCommits.calls, 35)
        XCTAssertEqual(log.callCounts, Dictionary(uniqueKeysWithValues: (0...30).map { ($0, 1) }), "each completion exactly once")
        XCTAssertEqual(try log.ids(0), [1])
        let nonBlocking = try (1...30).map { try log.ids($0) }
        let blocking = try (31...34).map { try results.get($0).get() }
        for (earlier, later) in zip(nonBlocking, nonBlocking.dropFirst()) {
            XCTAssertLessThan(try XCTUnwrap(earlier.last), try XCTUnwrap(later.first), "ids in the order of the calls")
        }
        let allIDs: [UInt64] = [1] + (nonBlocking + blocking).joined()
        XCTAssertEqual(allIDs.sorted(), Array(1...UInt64(allIDs.count)), "every id given once")
        XCTAssertEqual(log.order.filter { $0 != 0 }, Array(1...30), "completions in the order of the group")
        XCTAssertFalse(log.ranOnCallersThread(0...30), "no completion on the caller's thread")
        XCTAssertTrue((0...30).allSatisfy { log.ranOnCompletionQueue($0) }, "every completion on the journal's completion queue")

        journal.close()
        var expected: [UInt64: Data] = [1: samplePayload(0)]
        for (number, ids) in zip(1...30, nonBlocking) {
            for (position, id) in ids.enumerated() { expected[id] = samplePayload(number * 10 + position) }
        }
        for (number, ids) in zip(31...34, blocking) { expected[ids[0]] = samplePayload(number * 10) }
        XCTAssertEqual(try Journal(directory: folder).recovered, journalRecords(expected))
    }

    func testAFailedWriteOrSyncFailsTheWholeGroupAndNothingOfItSurvivesAReopen() throws {
        for failing in [FaultyFileSystem.Call.write, .syncData] {
            let folder = makeJournalFolder(self)
            let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
            let journal = try open(folder, fileSystem)
            try journal.append([samplePayload(0)])
            let log = CompletionLog(journal)
            // The held sync is the first group's; the second group's write or sync fails (after 30 bytes of a write).
            let failingNumber = fileSystem.count(failing) + 2
            let gate = SyncGate(fileSystem) { call, number in
                call == failing && number == failingNumber ? .fail(errno: EIO, writtenFirst: 30) : nil
            }
            journal.append([samplePayload(1)], completion: log.expect(1))
            XCTAssertTrue(gate.waitUntilHeld())
            for number in 2...6 { journal.append([samplePayload(number), samplePayload(number + 100)], completion: log.expect(number)) }
            journal.update(1, payload: samplePayload(7), completion: log.expectVoid(7))
            journal.remove([1], completion: log.expectVoid(8))
            let results = JournalCallResults()
            let threads = DispatchGroup()
            threads.enter()
            Thread.detachNewThread {
                results.store(9, Result { try journal.append([samplePayload(9)]) })
                threads.leave()
            }
            waitUntil("eight calls queued") { journal.queuedCallCount == 8 }
            gate.release()
            XCTAssertTrue(log.waitForAll())
            XCTAssertEqual(threads.wait(timeout: .now() + 60), .success)

            let error = JournalError.writeFailed(errno: EIO, operation: failing.rawValue)
            XCTAssertEqual(try log.ids(1), [2], "\(failing)")
            for number in 2...8 { XCTAssertEqual(log.result(number), .failure(error), "\(failing), call \(number)") }
            XCTAssertThrowsError(try results.get(9).get()) { XCTAssertEqual($0 as? JournalError, error) }
            XCTAssertEqual(log.callCounts, Dictionary(uniqueKeysWithValues: (1...8).map { ($0, 1) }))
            XCTAssertEqual(journal.liveCount, 2)
            // The journal works again; the failed calls' ids are not given again.
            let after = CompletionLog(journal)
            journal.append([samplePayload(10)], completion: after.expect(10))
            XCTAssertTrue(after.waitForAll())
            let last = try after.ids(10)
            XCTAssertGreaterThan(try XCTUnwrap(last.first), 13)
            journal.close()
            XCTAssertEqual(
                try Journal(directory: folder).recovered,
                journalRecords([1: samplePayload(0), 2: samplePayload(1), last[0]: samplePayload(10)]), "\(failing): nothing of the failed group")
        }
    }

    func testCloseWaitsForTheGroupInFlightAndCompletesQueuedCallsWithClosed() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        let log = CompletionLog(journal)
        let gate = SyncGate(fileSystem)
        journal.append([samplePayload(0)], completion: log.expect(0))
        XCTAssertTrue(gate.waitUntilHeld())
        for number in 1...5 { journal.append([samplePayload(number)], completion: log.expect(number)) }
        let results = JournalCallResults()
        let threads = DispatchGroup()
        threads.enter()
        Thread.detachNewThread {
            results.store(6, Result { try journal.append([samplePayload(6)]) })
            threads.leave()
        }
        waitUntil("six calls queued") { journal.queuedCallCount == 6 }
        let closer = ThreadBox()
        threads.enter()
        Thread.detachNewThread {
            closer.set()
            journal.close()
            threads.leave()
        }
        // Only close() empties the queue while the sync is held.
        waitUntil("close() took the queued calls") { journal.queuedCallCount == 0 }
        XCTAssertEqual(log.calledCount, 0, "close() waits for the group in flight")
        gate.release()
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(threads.wait(timeout: .now() + 60), .success)

        XCTAssertEqual(try log.ids(0), [1], "the group in flight completed")
        for number in 1...5 {
            XCTAssertEqual(log.result(number), .failure(.closed))
            XCTAssertTrue(log.ranOnCompletionQueue(number), "on the completion queue, before close() returned")
        }
        XCTAssertThrowsError(try results.get(6).get()) { XCTAssertEqual($0 as? JournalError, .closed) }
        XCTAssertEqual(log.callCounts, Dictionary(uniqueKeysWithValues: (0...5).map { ($0, 1) }))
        // After close(): refused at once, on the caller's thread.
        journal.append([samplePayload(7)], completion: log.expect(7))
        XCTAssertEqual(log.result(7), .failure(.closed))
        XCTAssertTrue(log.ranOnCallersThread(7...7))
        XCTAssertThrowsError(try journal.append([samplePayload(8)])) { XCTAssertEqual($0 as? JournalError, .closed) }
        XCTAssertEqual(try Journal(directory: folder).recovered, [JournalRecord(id: 1, payload: samplePayload(0))])
    }

    /// A blocking call made under a lock of the caller's leads a group that holds a non-blocking call whose completion
    /// takes that lock (as the outbox's `drop` does, under its lock, while a sent entry's removal is queued): the
    /// completion must not run on the blocking caller's thread, where it would wait for that thread forever.
    func testACompletionNeverRunsOnTheThreadOfTheBlockingCallThatLedItsGroup() throws {
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(makeJournalFolder(self), fileSystem)
        let log = CompletionLog(journal)
        let gate = SyncGate(fileSystem)
        journal.append([samplePayload(0)], completion: log.expect(0))
        XCTAssertTrue(gate.waitUntilHeld())
        let callersLock = NSLock()
        let second = log.expect(1)
        journal.append([samplePayload(1)]) { result in
            callersLock.withLock { second(result) }
        }
        let returned = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            callersLock.withLock { _ = try? journal.append([samplePayload(2)]) }
            returned.signal()
        }
        waitUntil("the blocking call queued") { journal.queuedCallCount == 2 }
        gate.release()
        XCTAssertEqual(returned.wait(timeout: .now() + 60), .success, "the blocking call returned")
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(try log.ids(1), [2])
    }

    func testCloseCancelsALeadHandedToTheWriterQueueBeforeItStarts() throws {
        let folder = makeJournalFolder(self)
        let journal = try open(folder, PosixJournalFileSystem())
        let log = CompletionLog(journal)
        let busy = WriterBlocker(journal)
        journal.append([samplePayload(1)], completion: log.expect(1))
        XCTAssertEqual(journal.queuedCallCount, 1, "handed to the writer queue, which is busy")
        journal.close()
        XCTAssertEqual(log.result(1), .failure(.closed), "completed before close() returned, without waiting for the writer")
        XCTAssertTrue(log.ranOnCompletionQueue(1), "on the completion queue, not the thread that closed")
        busy.release()
        journal.writer.sync {}
        XCTAssertEqual(log.callCounts, [1: 1], "the writer found nothing to do")
        XCTAssertEqual(journal.groupCommits.groups, 0)
        XCTAssertEqual(try Journal(directory: folder).recovered, [])
    }

    func testABlockingCallTakesTheLeadFromABusyWriterQueueAndWritesTheQueuedCallsWithIt() throws {
        let journal = try open(makeJournalFolder(self), PosixJournalFileSystem())
        let log = CompletionLog(journal)
        let busy = WriterBlocker(journal)
        journal.append([samplePayload(1)], completion: log.expect(1))
        journal.remove([99], completion: log.expectVoid(2))
        XCTAssertEqual(log.result(2), .success([]), "nothing to remove: completed at once")
        XCTAssertEqual(journal.queuedCallCount, 1)
        // The writer queue is busy: the blocking call does not wait for it, and leads both calls as one group.
        let results = JournalCallResults()
        let blocking = ThreadBox()
        let returned = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            blocking.set()
            results.store(3, Result { try journal.append([samplePayload(3)]) })
            returned.signal()
        }
        let waited = returned.wait(timeout: .now() + 60)
        XCTAssertEqual(waited, .success, "the blocking call did not wait for the writer queue")
        if waited == .timedOut {
            busy.release()
            returned.wait()
        }
        XCTAssertEqual(try results.get(3).get(), [2])
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(try log.ids(1), [1], "written by the blocking call's group")
        XCTAssertFalse(log.ran(1, on: blocking.identifier), "completed on the completion queue, not the blocking caller's thread")
        XCTAssertTrue(log.ranOnCompletionQueue(1))
        XCTAssertEqual(journal.groupCommits.groups, 1)
        XCTAssertEqual(journal.groupCommits.calls, 2)
        busy.release()
        journal.writer.sync {}
        XCTAssertEqual(journal.groupCommits.groups, 1, "the writer found nothing to do")
        XCTAssertEqual(log.callCounts, [1: 1, 2: 1])
    }

    func testCompletionsOfCallsThatNeedNoSyncAreCalledAtOnceAndOthersNeverOnTheCallersThread() throws {
        let folder = makeJournalFolder(self)
        let journal = try open(folder, PosixJournalFileSystem())
        let log = CompletionLog(journal)
        for number in 0..<40 { journal.append([samplePayload(number)], completion: log.expect(number)) }
        XCTAssertTrue(log.waitForAll())
        XCTAssertFalse(log.ranOnCallersThread(0...39))
        XCTAssertTrue((0..<40).allSatisfy { log.ranOnCompletionQueue($0) })
        XCTAssertEqual(log.order, Array(0..<40), "groups of non-blocking calls only complete one after the other, in order")
        XCTAssertEqual(try (0..<40).flatMap { try log.ids($0) }, Array(1...40))
        let ids = try log.ids(0) + log.ids(1)
        journal.update(ids[0], payload: samplePayload(100), completion: log.expectVoid(40))
        journal.remove([ids[1], ids[1], 999], completion: log.expectVoid(41))
        XCTAssertTrue(log.waitForAll())
        XCTAssertFalse(log.ranOnCallersThread(40...41))
        XCTAssertEqual(log.result(40), .success([]))
        XCTAssertEqual(log.result(41), .success([]))

        // Calls that need no I/O complete before they return, on the caller's thread.
        let groups = journal.groupCommits.groups
        journal.append([], completion: log.expect(50))
        journal.append([samplePayload(51), Data(count: Self.limit + 1)], completion: log.expect(51))
        journal.update(999, payload: samplePayload(52), completion: log.expectVoid(52))
        journal.update(ids[0], payload: Data(count: Self.limit + 1), completion: log.expectVoid(53))
        journal.remove([ids[1], 999], completion: log.expectVoid(54))
        journal.remove([], completion: log.expectVoid(55))
        XCTAssertEqual(log.result(50), .success([]))
        XCTAssertEqual(log.result(51), .failure(.recordTooLarge(size: Self.limit + 1, limit: Self.limit)))
        XCTAssertEqual(log.result(52), .failure(.unknownRecord(999)))
        XCTAssertEqual(log.result(53), .failure(.recordTooLarge(size: Self.limit + 1, limit: Self.limit)))
        XCTAssertEqual(log.result(54), .success([]))
        XCTAssertEqual(log.result(55), .success([]))
        XCTAssertTrue(log.ranOnCallersThread(50...55))
        XCTAssertEqual(journal.groupCommits.groups, groups, "nothing written")
        XCTAssertEqual(log.callCounts.count, 48)
        XCTAssertTrue(log.callCounts.values.allSatisfy { $0 == 1 })
        journal.close()
        var expected = Dictionary(uniqueKeysWithValues: (0..<40).map { (UInt64($0 + 1), samplePayload($0)) })
        expected[ids[0]] = samplePayload(100)
        expected[ids[1]] = nil
        XCTAssertEqual(try Journal(directory: folder).recovered, journalRecords(expected))
    }

    func testACompletionMayCallTheJournalBlockingOrCloseItFromTheWriterQueue() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        let journal = try open(folder, fileSystem)
        let log = CompletionLog(journal)
        let inner = JournalCallResults()
        // The first call's completion runs on the writer queue, which has just been handed the lead for call 1
        // (queued meanwhile): its blocking call must take that lead rather than wait for the writer queue.
        let gate = SyncGate(fileSystem)
        let first = log.expect(0)
        journal.append([samplePayload(0)]) { result in
            inner.store(0, Result { try journal.append([samplePayload(100)]) })
            first(result)
        }
        XCTAssertTrue(gate.waitUntilHeld())
        journal.append([samplePayload(1)], completion: log.expect(1))
        gate.release()
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(try log.ids(0), [1])
        XCTAssertEqual(try log.ids(1), [2])
        XCTAssertEqual(try inner.get(0).get(), [3])
        XCTAssertTrue(log.ranOnCompletionQueue(0) && log.ranOnCompletionQueue(1), "both on the completion queue")

        // Likewise close() from a completion: it does not wait for the completion queue it runs on.
        let again = SyncGate(fileSystem)
        let closing = log.expect(2)
        journal.append([samplePayload(2)]) { result in
            journal.close()
            closing(result)
        }
        XCTAssertTrue(again.waitUntilHeld())
        journal.append([samplePayload(3)], completion: log.expect(3))
        again.release()
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(try log.ids(2), [4])
        // Call 3 was queued behind call 2's sync: the writer writes it, or close() (run by call 2's completion, on
        // the completion queue) refuses it first; either way it completes once and the journal agrees.
        journal.writer.sync {}
        XCTAssertEqual(log.callCounts, [0: 1, 1: 1, 2: 1, 3: 1])
        let written: [UInt64] = log.result(3) == .failure(.closed) ? [1, 2, 3, 4] : [1, 2, 3, 4, 5]
        XCTAssertTrue(log.result(3) == .failure(.closed) || log.result(3) == .success([5]), "\(String(describing: log.result(3)))")
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), written)
    }

    func testEventsFoundByANonBlockingLeadAreToldOnTheWriterQueue() throws {
        let folder = makeJournalFolder(self)
        let events = EventsOnWriter()
        let journal = try open(folder, PosixJournalFileSystem(), compactionMinimum: 1000, events: events.handler)
        let log = CompletionLog(journal)
        events.watch(journal, log)
        journal.append((0..<40).map { samplePayload($0, size: 50) }, completion: log.expect(0))
        XCTAssertTrue(log.waitForAll())
        let ids = try log.ids(0)
        journal.remove(Array(ids.prefix(35)), completion: log.expectVoid(1))
        XCTAssertTrue(log.waitForAll())
        XCTAssertEqual(events.told.wait(timeout: .now() + 60), .success)
        let (event, onWriter, completionsBefore) = events.first
        guard case .compacted? = event else { return XCTFail("compacted: \(String(describing: event))") }
        XCTAssertTrue(onWriter, "told on the writer queue")
        // The group's completion runs on the completion queue, unordered with the event; the earlier one ran before.
        XCTAssertGreaterThanOrEqual(completionsBefore, 1)
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered.map(\.id), Array(ids.suffix(5)))
    }
}
