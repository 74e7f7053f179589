import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The records `live` holds, in id order, as `Journal.recovered` lists them.
func journalRecords(_ live: [UInt64: Data]) -> [JournalRecord] {
    live.sorted { $0.key < $1.key }.map { JournalRecord(id: $0.key, payload: $0.value) }
}

/// Holds the next `syncData` of `fileSystem` until `release()`: a group is then in flight, and every call made
/// meanwhile queues behind it. `fault` decides for the other calls, as `FaultyFileSystem.setFault` does.
final class SyncGate: Sendable {
    private let held = DispatchSemaphore(value: 0)
    private let released = DispatchSemaphore(value: 0)

    init(_ fileSystem: FaultyFileSystem, fault: (@Sendable (_ call: FaultyFileSystem.Call, _ number: Int) -> FaultyFileSystem.Fault?)? = nil) {
        let sync = fileSystem.count(.syncData) + 1
        let (held, released) = (held, released)
        fileSystem.setFault { call, number, _ in
            if call == .syncData, number == sync {
                held.signal()
                // A limit, not a margin: a journal that wrongly made the test's own thread wait here fails the test
                // after a minute rather than hanging it.
                _ = released.wait(timeout: .now() + 60)
                return nil
            }
            return fault?(call, number)
        }
    }

    /// Waits until the sync is held (fails after a minute, a limit rather than a margin).
    func waitUntilHeld() -> Bool { held.wait(timeout: .now() + 60) == .success }

    func release() { released.signal() }
}

/// Keeps a journal's writer queue busy until `release()`, so that a lead handed to it is not taken.
final class WriterBlocker: Sendable {
    private let released = DispatchSemaphore(value: 0)

    init(_ journal: Journal) {
        let running = DispatchSemaphore(value: 0)
        let released = released
        journal.writer.async {
            running.signal()
            // A limit, not a margin, as in `SyncGate`.
            _ = released.wait(timeout: .now() + 60)
        }
        running.wait()
    }

    func release() { released.signal() }
}

/// A thread's identity, set on that thread.
final class ThreadBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: ObjectIdentifier?
    func set() { lock.withLock { stored = ObjectIdentifier(Thread.current) } }
    var identifier: ObjectIdentifier? { lock.withLock { stored } }
}

/// What the completions of numbered non-blocking calls were told, how often, in what order and on what thread.
final class CompletionLog: @unchecked Sendable {
    private let lock = NSLock()
    private let writerKey = DispatchSpecificKey<Bool>()
    private let pending = DispatchGroup()
    private let caller = ObjectIdentifier(Thread.current)
    private var results: [Int: Result<[UInt64], JournalError>] = [:]
    private var counts: [Int: Int] = [:]
    private var threads: [Int: ObjectIdentifier] = [:]
    private var writer: [Int: Bool] = [:]
    private var storedOrder: [Int] = []

    /// Made on the thread that makes the calls (the caller's thread); tells the journal's completion queue by a key.
    init(_ journal: Journal) {
        journal.completions.setSpecific(key: writerKey, value: true)
    }

    /// The completion of call `number`.
    func expect(_ number: Int) -> JournalBatch.Completion {
        pending.enter()
        return { [self] result in record(number, result) }
    }

    func expectVoid(_ number: Int) -> @Sendable (Result<Void, JournalError>) -> Void {
        let completion = expect(number)
        return { result in completion(result.map { [] }) }
    }

    private func record(_ number: Int, _ result: Result<[UInt64], JournalError>) {
        let thread = ObjectIdentifier(Thread.current)
        let onWriter = DispatchQueue.getSpecific(key: writerKey) == true
        let first = lock.withLock {
            counts[number, default: 0] += 1
            guard counts[number] == 1 else { return false }
            results[number] = result
            threads[number] = thread
            writer[number] = onWriter
            storedOrder.append(number)
            return true
        }
        if first { pending.leave() }
    }

    /// Waits for every expected completion (fails after a minute, a limit rather than a margin).
    func waitForAll() -> Bool { pending.wait(timeout: .now() + 60) == .success }

    /// The numbers of the calls completed, in the order of their completions.
    var order: [Int] { lock.withLock { storedOrder } }
    var calledCount: Int { lock.withLock { storedOrder.count } }
    var callCounts: [Int: Int] { lock.withLock { counts } }
    func result(_ number: Int) -> Result<[UInt64], JournalError>? { lock.withLock { results[number] } }
    func ids(_ number: Int) throws -> [UInt64] { try XCTUnwrap(result(number)).get() }
    func ranOnCompletionQueue(_ number: Int) -> Bool { lock.withLock { writer[number] == true } }
    func ran(_ number: Int, on thread: ObjectIdentifier?) -> Bool { lock.withLock { threads[number] != nil && threads[number] == thread } }
    func ranOnCallersThread(_ numbers: ClosedRange<Int>) -> Bool { numbers.contains { ran($0, on: caller) } }
}

/// Events, whether each was told on the writer queue, and how many completions had run by then.
final class EventsOnWriter: @unchecked Sendable {
    private let lock = NSLock()
    private let key = DispatchSpecificKey<Bool>()
    private var stored: [(event: JournalEvent, onWriter: Bool, completions: Int)] = []
    private var log: CompletionLog?
    let told = DispatchSemaphore(value: 0)

    var handler: @Sendable (JournalEvent) -> Void {
        { [self] event in
            let onWriter = DispatchQueue.getSpecific(key: key) == true
            lock.withLock { stored.append((event, onWriter, log?.calledCount ?? -1)) }
            told.signal()
        }
    }

    /// Tells `journal`'s writer queue by a key, and counts the completions `log` saw before each event.
    func watch(_ journal: Journal, _ log: CompletionLog) {
        journal.writer.setSpecific(key: key, value: true)
        lock.withLock { self.log = log }
    }

    /// The first event, whether it was told on the writer queue, and how many completions had run before it.
    var first: (JournalEvent?, Bool, Int) {
        lock.withLock { stored.first.map { ($0.event, $0.onWriter, $0.completions) } ?? (nil, false, -1) }
    }
}
