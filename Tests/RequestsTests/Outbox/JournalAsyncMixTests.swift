import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Many threads at once, half of them making blocking calls and half non-blocking ones, among injected write
/// failures (a full disk half-way through a write), and the compactions a small minimum allows: each completion is
/// called once, and the journal, and a reopen, keep exactly the changes whose calls succeeded. Run under
/// ThreadSanitizer too.
final class JournalAsyncMixTests: XCTestCase {
    func testManyThreadsMixingBothFormsAmongFailuresKeepExactlyWhatSucceeded() throws {
        let folder = makeJournalFolder(self)
        let fileSystem = FaultyFileSystem(PosixJournalFileSystem())
        var options = Journal.Options()
        options.compactionMinimum = 4096
        let journal = try Journal(directory: folder, options: options, fileSystem: fileSystem)
        // Every seventh write fails half-way (a group's records, zeros written ahead, or a compaction's file).
        fileSystem.setFault { call, number, _ in call == .write && number % 7 == 0 ? .fail(errno: ENOSPC, writtenFirst: 20) : nil }
        let models = (0..<8).map { _ in MixModel() }
        let threads = DispatchGroup()
        for thread in 0..<8 {
            threads.enter()
            Thread.detachNewThread {
                defer { threads.leave() }
                if thread % 2 == 0 { Self.runBlocking(journal, models[thread], seed: thread) } else { Self.runNonBlocking(journal, models[thread], seed: thread) }
            }
        }
        XCTAssertEqual(threads.wait(timeout: .now() + 300), .success)
        for model in models {
            XCTAssertEqual(model.extraCompletions, 0, "each completion exactly once")
            XCTAssertEqual(model.unexpected, [], "only the injected failure")
        }
        XCTAssertGreaterThan(models.map(\.failures).reduce(0, +), 0, "some calls failed")
        let expected = models.reduce(into: [UInt64: Data]()) { $0.merge($1.live) { first, _ in first } }
        XCTAssertEqual(Set(journal.liveIDs), Set(expected.keys))
        journal.close()
        XCTAssertEqual(try Journal(directory: folder).recovered, journalRecords(expected))
    }

    /// Rounds of blocking calls on the thread's own records.
    private static func runBlocking(_ journal: Journal, _ model: MixModel, seed: Int) {
        for round in 0..<40 {
            let payloads = (0..<(round % 3 + 1)).map { samplePayload(seed * 100_000 + round * 10 + $0) }
            model.settle(Result { try journal.append(payloads) }) { ids in model.add(ids, payloads) }
            if let id = model.someLive(round) {
                let payload = samplePayload(seed * 100_000 + round * 10 + 7, size: 30)
                model.settle(Result { try journal.update(id, payload: payload) }) { _ in model.set(id, payload) }
            }
            let doomed = model.someLive(round + 1, count: 2)
            model.settle(Result { try journal.remove(doomed) }) { _ in model.drop(doomed) }
        }
    }

    /// Rounds of non-blocking calls on the thread's own records, several at once (on distinct records), each round
    /// waiting for its completions before the next: the model follows the journal's order.
    private static func runNonBlocking(_ journal: Journal, _ model: MixModel, seed: Int) {
        for round in 0..<40 {
            let pending = DispatchGroup()
            let base = seed * 100_000 + round * 10
            for call in 0..<3 {
                let payloads = (0..<(call + 1)).map { samplePayload(base + call * 3 + $0) }
                pending.enter()
                journal.append(
                    payloads,
                    completion: model.once(pending) { result in
                        model.settle(result) { ids in model.add(ids, payloads) }
                    })
            }
            let live = model.someLive(round, count: 3)
            if let id = live.first {
                let payload = samplePayload(base + 9, size: 30)
                pending.enter()
                journal.update(
                    id, payload: payload,
                    completion: model.once(pending) { result in
                        model.settle(result) { _ in model.set(id, payload) }
                    })
            }
            let doomed = Array(live.dropFirst())
            pending.enter()
            journal.remove(
                doomed,
                completion: model.once(pending) { result in
                    model.settle(result) { _ in model.drop(doomed) }
                })
            pending.wait()
        }
    }
}

/// One thread's records as the journal must keep them, from the calls that succeeded; and what went wrong.
private final class MixModel: @unchecked Sendable {
    private let lock = NSLock()
    private var records: [UInt64: Data] = [:]
    private var failed = 0
    private var wrong: [String] = []
    private var extra = 0

    var live: [UInt64: Data] { lock.withLock { records } }
    var failures: Int { lock.withLock { failed } }
    var unexpected: [String] { lock.withLock { wrong } }
    var extraCompletions: Int { lock.withLock { extra } }

    /// Applies `success` to the model if the call succeeded; counts an injected failure, records any other.
    func settle<Value>(_ result: Result<Value, some Error>, success: (Value) -> Void) {
        switch result {
        case let .success(value): success(value)
        case let .failure(error):
            lock.withLock {
                if case .writeFailed(ENOSPC, _)? = error as? JournalError { failed += 1 } else { wrong.append("\(error)") }
            }
        }
    }

    func add(_ ids: [UInt64], _ payloads: [Data]) {
        lock.withLock { for (id, payload) in zip(ids, payloads) { records[id] = payload } }
    }

    func set(_ id: UInt64, _ payload: Data) { lock.withLock { records[id] = payload } }
    func drop(_ ids: [UInt64]) { lock.withLock { for id in ids { records[id] = nil } } }

    func someLive(_ round: Int, count: Int = 1) -> [UInt64] {
        lock.withLock { Array(records.keys.sorted().dropFirst(round % 3).prefix(count)) }
    }

    func someLive(_ round: Int) -> UInt64? { someLive(round, count: 1).first }

    /// Wraps a completion: runs `body` on the first call only, then leaves `group`; counts any further call.
    func once<Value>(_ group: DispatchGroup, _ body: @escaping @Sendable (Result<Value, JournalError>) -> Void) -> @Sendable (Result<Value, JournalError>) -> Void {
        let calls = Counter()
        return { [self] result in
            guard calls.increment() == 1 else { return lock.withLock { extra += 1 } }
            body(result)
            group.leave()
        }
    }
}

private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func increment() -> Int {
        lock.withLock {
            value += 1; return value
        }
    }
}
