import Foundation
import Requests
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An append-only journal of records in a private folder, the storage of the outbox: each call returns only when
/// its records are on disk (`fdatasync`), and exists on disk whole or not at all. Concurrent calls share one write
/// and one sync (group commit): while a leader syncs, the others queue; the next leader writes all queued calls
/// at once. Each call has a non-blocking form, with a completion, that shares the same group commits. The file
/// format and the guarantees are described in docs/outbox-journal.md.
///
/// Threads: the state is behind one lock (internal rather than private, for the group commit in
/// JournalGroupCommit.swift and the compaction in JournalCompaction.swift); each waiting caller sleeps on its own
/// semaphore, woken when its call is done or when it is to lead the next group, so that a finished group wakes only
/// its own callers. A group of non-blocking calls only is led on the journal's own serial queue (`writer`).
///
/// Memory: the journal keeps 16 bytes per live record plus its dictionary slot (the payloads stay on disk), and the
/// records recovered at open until ``releaseRecovered()``.
final class Journal: @unchecked Sendable {
    /// The journal's folder.
    let directory: URL
    let options: Options
    let fileSystem: JournalFileSystem
    let events: (@Sendable (JournalEvent) -> Void)?
    let journalPath: String
    let directoryFile: Int32
    private let lockFile: Int32
    /// How far the journal got (`journal.state`): written by the leader after each group commit, and by compaction.
    let checkpoint: JournalCheckpoint

    /// Guards every `var` below.
    let lock = NSLock()
    private var recoveredRecords: [JournalRecord]
    var index: [UInt64: JournalLocation]
    var liveBytes: UInt64
    var nextID: UInt64
    /// The length of the file's intact content; appends go there.
    var length: UInt64
    /// The file's size: beyond `length` it holds zeros written ahead (see `write(_:)`).
    var allocated: UInt64
    var file: Int32
    var queue: [JournalBatch] = []
    /// A leader is gathering, writing, syncing or compacting (or is woken to, or the lead is handed to the writer
    /// queue): it alone uses `file` and changes `length` and `index`.
    var leading = false
    /// The lead is handed to the writer queue, which has not taken it yet: a blocking caller that comes meanwhile
    /// takes it instead, and `close()` cancels it.
    var writerPending = false
    var isClosed = false
    /// `close()` waits on it for the leader to finish.
    var closeWaiter: DispatchSemaphore?
    /// The number of calls the last group held, and how long its sync took: a leader that finds fewer calls queued
    /// waits up to one sync's time for as many (see `gather()`).
    var lastGroupSize = 0
    /// Groups written, and calls in them, since the journal opened.
    var groupsWritten = 0
    var callsWritten = 0
    var lastSyncNanoseconds: UInt64 = 0
    /// While a leader gathers: the queue length that wakes it (0 when none gathers), and its semaphore.
    var gatherTarget = 0
    let gathered = DispatchSemaphore(value: 0)
    /// Leads the groups of non-blocking calls only (see JournalGroupCommit.swift).
    let writer = DispatchQueue(label: "Requests.Journal.writer")
    /// Calls the completions of queued non-blocking calls, in order. Never the thread that wrote their group: that may
    /// be a blocking caller, which may hold a lock of its own that a completion takes.
    let completions = DispatchQueue(label: "Requests.Journal.completions")
    private static let completionsKey = DispatchSpecificKey<Bool>()
    /// A failed write may have left bytes after `length`: the next leader cuts them off, durably, first.
    var mustCut = false
    /// A compaction's rename is not yet durable: the next leader syncs the folder first.
    var folderUnsynced = false
    /// After a failed compaction, none is tried before the file reaches this length.
    var nextCompactionLength: UInt64 = 0

    /// Opens or creates the journal in `directory` (created `0700`, files `0600`; refuses a symbolic link or a
    /// folder of another user), takes an exclusive lock, and recovers the live records. `events` hears of damage
    /// found and of compactions on the thread that found them: during this initializer for what recovery finds, and
    /// before the call whose group commit compacted returns (after the completions of its group's non-blocking
    /// calls; on the writer queue for a group of non-blocking calls only); never while the journal is locked or led
    /// by that thread, so that the handler may call the journal.
    convenience init(directory: URL, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        try self.init(directory: directory, options: Options(), fileSystem: PosixJournalFileSystem(), events: events)
    }

    /// Opens the journal with `options` through `fileSystem` (tests fail its calls or simulate crashes).
    init(directory: URL, options: Options = Options(), fileSystem: JournalFileSystem, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        let opened = try Self.open(directory, fileSystem: fileSystem, events: events)
        completions.setSpecific(key: Self.completionsKey, value: true)
        self.directory = directory
        self.options = options
        self.fileSystem = fileSystem
        self.events = events
        journalPath = opened.path
        directoryFile = opened.directory
        lockFile = opened.lock
        checkpoint = opened.checkpoint
        file = opened.file
        length = opened.length
        allocated = opened.allocated
        index = opened.scan.index
        liveBytes = opened.scan.liveBytes
        nextID = opened.nextID
        recoveredRecords = opened.records
        // A damaged header or a skipped stretch: rewritten now, so that the damage is reported once.
        if opened.rewrite || lock.withLock({ shouldCompact() }) {
            for event in compact() { events?(event) }
        } else {
            // The reserve of zeros for removals, if the file lacks it (a compaction writes it in its new file).
            let reserved = JournalSpace.keepReserve(in: file, with: fileSystem, length: length, allocated: opened.allocated, options: options)
            lock.withLock { allocated = reserved }
        }
    }

    deinit { close() }

    /// The live records recovered at open, in id order, until ``releaseRecovered()``.
    var recovered: [JournalRecord] { lock.withLock { recoveredRecords } }

    /// Forgets ``recovered``, so that the payloads are not kept twice once the owner has its own copy.
    func releaseRecovered() { lock.withLock { recoveredRecords = [] } }

    /// The number of live records.
    var liveCount: Int { lock.withLock { index.count } }

    /// The live records' ids, in no particular order.
    var liveIDs: [UInt64] { lock.withLock { Array(index.keys) } }

    /// The calls queued for the next group commit (not those being written): for tests and monitors.
    var queuedCallCount: Int { lock.withLock { queue.count } }

    /// Group commits written since the journal opened, and the calls they held: for benchmarks and monitors.
    var groupCommits: (groups: Int, calls: Int) { lock.withLock { (groupsWritten, callsWritten) } }

    /// Appends records durably: returns only after they are synced; concurrent callers share one sync (group
    /// commit), and `payloads` are one write. Returns the ids given, in order. On any failure throws, and none of
    /// these records exists afterwards, not even after a crash.
    @discardableResult
    func append(_ payloads: [Data]) throws -> [UInt64] {
        let batch = try JournalBatch(kind: .put, id: 0, payloads: payloads, limit: options.maximumPayloadSize)
        try commit(batch) { batch in
            batch.assignIDs(from: nextID)
            nextID += UInt64(batch.changes.count)
        }
        return batch.changes.map(\.id)
    }

    /// Appends a record and removes the live ones of `ids` as one call, durably (same group commit): after a crash
    /// the journal holds either the new record and none of `ids`, or `ids` and not the new record. Returns the new
    /// record's id. Ids that are not live are ignored.
    @discardableResult
    func replace(_ ids: [UInt64], with payload: Data) throws -> UInt64 {
        let batch = try JournalBatch(kind: .put, id: 0, payloads: [payload], limit: options.maximumPayloadSize)
        try commit(batch) { batch in
            batch.assignIDs(from: nextID)
            nextID += 1
            var seen = Set<UInt64>()
            batch.addRemovals(ids.filter { index[$0] != nil && seen.insert($0).inserted })
        }
        return batch.changes[0].id
    }

    /// Replaces a live record's payload, durably (same group commit). Throws `.unknownRecord` if `id` is not live.
    func update(_ id: UInt64, payload: Data) throws {
        let batch = try JournalBatch(kind: .update, id: id, payloads: [payload], limit: options.maximumPayloadSize)
        try commit(batch) { _ in
            guard index[id] != nil else { throw JournalError.unknownRecord(id) }
        }
    }

    /// Removes live records, durably (tombstones; same group commit), all or none. Ids that are not live are
    /// ignored.
    func remove(_ ids: [UInt64]) throws {
        let batch = try JournalBatch(kind: .remove, id: 0, payloads: [], limit: 0)
        try commit(batch) { batch in
            var seen = Set<UInt64>()
            batch.addRemovals(ids.filter { index[$0] != nil && seen.insert($0).inserted })
        }
    }

    // MARK: Non-blocking calls
    //
    // Each does what its blocking form does (all or none, durable before success, the same group commits) and
    // returns at once; `completion` is called exactly once, never while the journal is locked or led by the thread
    // that calls it, so that it may call the journal. It is called before the call returns, on the caller's thread,
    // only when no I/O is needed: the journal is closed (`.closed`), a payload is too large (`.recordTooLarge`),
    // `update` names an id that is not live (`.unknownRecord`), or there is nothing to write (`append` of no
    // payloads, `remove` of no live id). Any other call is queued and its completion is called later, on the
    // journal's serial `completions` queue, once its group is synced or failed, in the order of the groups and of
    // the calls in each; or, with `.closed`, for a call still queued when `close()` is called, before `close()`
    // returns. Never on the thread that wrote the group: that may be a blocking caller holding a lock of its own,
    // which a completion may take.

    /// Appends records as ``append(_:)`` does, without blocking: `completion` gets the ids given, in order, once the
    /// records are synced, or the error, and then none of them exists, not even after a crash.
    func append(_ payloads: [Data], completion: @escaping @Sendable (Result<[UInt64], JournalError>) -> Void) {
        let batch: JournalBatch
        do {
            batch = try JournalBatch(kind: .put, id: 0, payloads: payloads, limit: options.maximumPayloadSize)
        } catch {
            return completion(.failure(JournalError(error)))
        }
        commit(batch, completion: completion) { batch in
            batch.assignIDs(from: nextID)
            nextID += UInt64(batch.changes.count)
        }
    }

    /// Replaces a live record's payload as ``update(_:payload:)`` does, without blocking; `.unknownRecord` if `id` is
    /// not live when the call is queued.
    func update(_ id: UInt64, payload: Data, completion: @escaping @Sendable (Result<Void, JournalError>) -> Void) {
        let batch: JournalBatch
        do {
            batch = try JournalBatch(kind: .update, id: id, payloads: [payload], limit: options.maximumPayloadSize)
        } catch {
            return completion(.failure(JournalError(error)))
        }
        commit(batch, completion: { completion($0.map { _ in () }) }) { _ in
            guard index[id] != nil else { throw JournalError.unknownRecord(id) }
        }
    }

    /// Removes live records as ``remove(_:)`` does, without blocking, all or none; ids not live when the call is
    /// queued are ignored.
    func remove(_ ids: [UInt64], completion: @escaping @Sendable (Result<Void, JournalError>) -> Void) {
        let batch: JournalBatch
        do {
            batch = try JournalBatch(kind: .remove, id: 0, payloads: [], limit: 0)
        } catch {
            return completion(.failure(JournalError(error)))
        }
        commit(batch, completion: { completion($0.map { _ in () }) }) { batch in
            var seen = Set<UInt64>()
            batch.addRemovals(ids.filter { index[$0] != nil && seen.insert($0).inserted })
        }
    }

    /// Releases the lock and closes the files; later calls throw (or complete with) `.closed`. Calls waiting for a
    /// sync that already started complete; those still queued throw `.closed`, or complete with it on this thread
    /// before `close()` returns.
    func close() {
        var refused: [JournalBatch.Completion] = []
        // Declared before the unlock below, so run after it: completions are called without the lock, on their
        // queue, and have been called when `close()` returns (unless it is called from one of them).
        defer {
            let calls = refused
            if !calls.isEmpty { completions.async { for completion in calls { completion(.failure(.closed)) } } }
            if DispatchQueue.getSpecific(key: Self.completionsKey) == nil { completions.sync {} }
        }
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { return }
        isClosed = true
        for batch in queue {
            batch.result = .failure(.closed)
            if let completion = batch.completion {
                refused.append(completion)
            } else {
                batch.wakeup.signal()
            }
        }
        queue.removeAll()
        // Handed to the writer queue and not taken: nothing is being written; the writer will find nothing to do.
        if writerPending {
            writerPending = false
            leading = false
        }
        if gatherTarget > 0 {
            gatherTarget = 0
            gathered.signal()
        }
        if leading {
            let waiter = DispatchSemaphore(value: 0)
            closeWaiter = waiter
            lock.unlock()
            waiter.wait()
            lock.lock()
        }
        // A last try to cut off a failed call's records, which must not reappear at the next open.
        if mustCut {
            try? cutOff(file, at: length)
        } else {
            // The zeros written ahead are not needed any more, but for the reserve, kept for removals after the
            // next open (not synced: recovery keeps a tail of zeros, or finds the file shorter). Always cut: zeros a
            // full disk refused half-way may lie beyond `allocated`.
            try? fileSystem.truncate(file, to: JournalSpace.kept(length: length, allocated: allocated, options: options))
        }
        fileSystem.close(file)
        checkpoint.close()
        fileSystem.close(lockFile)
        fileSystem.close(directoryFile)
    }
}
