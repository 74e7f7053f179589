import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// Many threads appending, updating and removing at once, with compactions among them (run it under
/// ThreadSanitizer too): ids unique and growing, every acknowledged change kept, the same state after a reopen.
final class JournalConcurrencyTests: XCTestCase {
    func testConcurrentCallsKeepEveryAcknowledgedChange() throws {
        let folder = makeJournalFolder(self)
        var options = Journal.Options()
        options.compactionMinimum = 4096
        let log = JournalEventLog()
        let journal = try Journal(directory: folder, options: options, fileSystem: PosixJournalFileSystem(), events: log.handler)
        let threads = 8
        let rounds = 60
        let models = (0..<threads).map { _ in ThreadModel() }
        let done = DispatchGroup()
        for thread in 0..<threads {
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                let model = models[thread]
                do {
                    for round in 0..<rounds {
                        let count = round % 4 == 0 ? 5 : 1
                        let payloads = (0..<count).map { samplePayload(thread * 10_000 + round * 10 + $0) }
                        let ids = try journal.append(payloads)
                        model.appended(ids, payloads)
                        if round % 3 == 1, let id = ids.first {
                            let payload = samplePayload(thread * 10_000 + round * 10 + 9, size: 30)
                            try journal.update(id, payload: payload)
                            model.live[id] = payload
                        }
                        if round % 2 == 1 {
                            let doomed = Array(model.live.keys.sorted().prefix(2))
                            try journal.remove(doomed)
                            for id in doomed { model.live[id] = nil }
                        }
                    }
                } catch {
                    model.failure = error
                }
            }
        }
        done.wait()
        for model in models { XCTAssertNil(model.failure) }
        let allIDs = models.flatMap(\.ids)
        XCTAssertEqual(Set(allIDs).count, allIDs.count, "no id given twice")
        for model in models { XCTAssertEqual(model.ids, model.ids.sorted(), "each thread's ids grow") }
        let expected = models.reduce(into: [UInt64: Data]()) { $0.merge($1.live) { first, _ in first } }
        XCTAssertEqual(journal.liveCount, expected.count)
        XCTAssertTrue(log.events.contains { if case .compacted = $0 { return true } else { return false } }, "compactions ran among the calls")
        journal.close()
        let reopened = try Journal(directory: folder)
        XCTAssertEqual(reopened.recovered, expected.sorted { $0.key < $1.key }.map { JournalRecord(id: $0.key, payload: $0.value) })
    }

    func testCloseWhileCallsRunCompletesOrRefusesEachOfThem() throws {
        let folder = makeJournalFolder(self)
        let journal = try Journal(directory: folder)
        let acknowledged = ThreadModel()
        let lock = NSLock()
        let started = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for thread in 0..<4 {
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                started.signal()
                for round in 0..<1000 {
                    let payload = samplePayload(thread * 10_000 + round)
                    do {
                        let ids = try journal.append([payload])
                        lock.withLock { acknowledged.appended(ids, [payload]) }
                    } catch {
                        XCTAssertEqual(error as? JournalError, .closed)
                        return
                    }
                }
            }
        }
        for _ in 0..<4 { started.wait() }
        journal.close()
        done.wait()
        let recovered = try Journal(directory: folder).recovered
        let expected = lock.withLock { acknowledged.live }
        XCTAssertEqual(Dictionary(uniqueKeysWithValues: recovered.map { ($0.id, $0.payload) }), expected)
    }
}

/// One thread's view: what it was given and what it expects to be live. Touched by its thread, then read after
/// the threads are done.
private final class ThreadModel: @unchecked Sendable {
    var ids: [UInt64] = []
    var live: [UInt64: Data] = [:]
    var failure: Error?

    func appended(_ ids: [UInt64], _ payloads: [Data]) {
        self.ids += ids
        for (id, payload) in zip(ids, payloads) { live[id] = payload }
    }
}
