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
/// at once. The file format and the guarantees are described in docs/outbox-journal.md.
///
/// Threads: the state is behind one lock (some of it internal rather than private, for the compaction in
/// JournalCompaction.swift); each waiting caller sleeps on its own semaphore, woken when its call is done or when it
/// is to lead the next group, so that a finished group wakes only its own callers.
///
/// Memory: the journal keeps 16 bytes per live record plus its dictionary slot (the payloads stay on disk), and the
/// records recovered at open until ``releaseRecovered()``.
final class Journal: @unchecked Sendable {
    /// The journal's folder.
    let directory: URL
    let options: Options
    let fileSystem: JournalFileSystem
    private let events: (@Sendable (JournalEvent) -> Void)?
    let journalPath: String
    let directoryFile: Int32
    private let lockFile: Int32

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
    private var queue: [JournalBatch] = []
    /// A leader is gathering, writing, syncing or compacting (or is woken to): it alone uses `file` and changes
    /// `length` and `index`.
    private var leading = false
    private var isClosed = false
    /// `close()` waits on it for the leader to finish.
    private var closeWaiter: DispatchSemaphore?
    /// The number of calls the last group held, and how long its sync took: a leader that finds fewer calls queued
    /// waits up to one sync's time for as many (see `gather()`).
    private var lastGroupSize = 0
    /// Groups written, and calls in them, since the journal opened.
    private var groupsWritten = 0
    private var callsWritten = 0
    private var lastSyncNanoseconds: UInt64 = 0
    /// While a leader gathers: the queue length that wakes it (0 when none gathers), and its semaphore.
    private var gatherTarget = 0
    private let gathered = DispatchSemaphore(value: 0)
    /// A failed write may have left bytes after `length`: the next leader cuts them off, durably, first.
    private var mustCut = false
    /// A compaction's rename is not yet durable: the next leader syncs the folder first.
    var folderUnsynced = false
    /// After a failed compaction, none is tried before the file reaches this length.
    var nextCompactionLength: UInt64 = 0

    /// Opens or creates the journal in `directory` (created `0700`, files `0600`; refuses a symbolic link or a
    /// folder of another user), takes an exclusive lock, and recovers the live records. `events` hears of damage
    /// found and of compactions on the thread that found them: during this initializer for what recovery finds, and
    /// before the call whose group commit compacted returns; never while the journal is locked or led by that
    /// thread, so that the handler may call the journal.
    convenience init(directory: URL, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        try self.init(directory: directory, options: Options(), fileSystem: PosixJournalFileSystem(), events: events)
    }

    /// Opens the journal with `options` through `fileSystem` (tests fail its calls or simulate crashes).
    init(directory: URL, options: Options = Options(), fileSystem: JournalFileSystem, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        let opened = try Self.open(directory, fileSystem: fileSystem, events: events)
        self.directory = directory
        self.options = options
        self.fileSystem = fileSystem
        self.events = events
        journalPath = opened.path
        directoryFile = opened.directory
        lockFile = opened.lock
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

    /// Releases the lock and closes the files; later calls throw `.closed`. Calls waiting for a sync that already
    /// started complete; those still queued throw `.closed`.
    func close() {
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { return }
        isClosed = true
        for batch in queue {
            batch.result = .failure(.closed)
            batch.wakeup.signal()
        }
        queue.removeAll()
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
        fileSystem.close(lockFile)
        fileSystem.close(directoryFile)
    }

    // MARK: - Group commit

    /// Queues `batch` once `prepare` (run under the lock) accepts it, and returns when it is durable: as the
    /// leader that writes it, or after a leader did.
    private func commit(_ batch: JournalBatch, prepare: (JournalBatch) throws -> Void) throws {
        lock.lock()
        guard !isClosed else {
            lock.unlock()
            throw JournalError.closed
        }
        do {
            try prepare(batch)
        } catch {
            lock.unlock()
            throw error
        }
        guard !batch.changes.isEmpty else { return lock.unlock() }
        queue.append(batch)
        // Threads are woken after the lock is released, so that they do not wake only to wait for it.
        var wakesGatherer = false
        if gatherTarget > 0, queue.count >= gatherTarget {
            gatherTarget = 0
            wakesGatherer = true
        }
        if !leading {
            leading = true
            batch.leads = true
        }
        // What this thread's leads found, told once it no longer leads: a handler may call the journal.
        var found: [JournalEvent] = []
        while true {
            var nextLeader: JournalBatch?
            if batch.leads {
                batch.leads = false
                found += lead(handingOffTo: &nextLeader)
            }
            let result = batch.result
            lock.unlock()
            if wakesGatherer {
                wakesGatherer = false
                gathered.signal()
            }
            nextLeader?.wakeup.signal()
            if let result {
                for event in found { events?(event) }
                return try result.get()
            }
            batch.wakeup.wait()
            lock.lock()
        }
    }

    /// Gathers, then writes and syncs every queued batch as one, then applies them, or fails them all and cuts off
    /// what was written; then makes the first call queued meanwhile the next leader (`next`, for the caller to wake
    /// once it has released the lock). Called and returns with the lock held; releases it to wait and for the I/O.
    /// Returns the events of a compaction.
    private func lead(handingOffTo next: inout JournalBatch?) -> [JournalEvent] {
        gather()
        let group = queue
        queue.removeAll()
        let found = group.isEmpty ? [] : write(group)
        if let first = queue.first {
            first.leads = true
            next = first
        } else {
            leading = false
            closeWaiter?.signal()
        }
        return found
    }

    /// If the last group held more calls than are queued, waits until as many are (their callers are likely on
    /// their way back) or for as long as the last sync took, at most a millisecond: fewer, fuller syncs. With one
    /// caller, or callers that do not come back, it costs nothing or one sync's time once (the next group's size
    /// is then this one's). Under the lock.
    private func gather() {
        let target = lastGroupSize
        guard target > 1, queue.count < target, !isClosed else { return }
        gatherTarget = target
        lock.unlock()
        let outcome = gathered.wait(timeout: .now() + .nanoseconds(Int(min(lastSyncNanoseconds, 1_000_000))))
        lock.lock()
        // Timed out just as the target was reached: take the signal that was sent, or is about to be (the caller
        // that reached it sends it after releasing the lock), so that it does not end the next gathering early.
        // Waited for without the lock, so that other callers are not held up meanwhile.
        if outcome == .timedOut, gatherTarget == 0 {
            lock.unlock()
            gathered.wait()
            lock.lock()
        }
        gatherTarget = 0
    }

    /// Writes and syncs `group` (after the zeros `JournalSpace` asks for: if they cannot be written, the calls that
    /// add records fail and removals go on), applies it or fails it, and compacts if it is time. Under the lock;
    /// releases it for the I/O. Returns the events of a compaction.
    private func write(_ group: [JournalBatch]) -> [JournalEvent] {
        let start = length
        let target = file
        let cut = mustCut
        let syncFolder = folderUnsynced
        var space = JournalSpace(start: start, allocated: cut ? start : allocated, options: options)
        lock.unlock()
        var failure: JournalError?
        var folderSynced = !syncFolder
        var syncTime: UInt64 = 0
        var written = group
        var refused: JournalError?
        var end = start
        var starts: [Int] = []
        do {
            if cut { try cutOff(target, at: start) }
            if syncFolder {
                try fileSystem.syncDirectory(directoryFile)
                folderSynced = true
            }
            refused = space.writeZeros(before: group, in: target, with: fileSystem)
            if refused != nil { written = group.filter { !$0.grows } }
            let (bytes, offsets) = JournalBatch.concatenate(written)
            starts = offsets
            end = start + UInt64(bytes.count)
            if !bytes.isEmpty {
                try fileSystem.write(target, bytes, at: start)
                let syncStart = DispatchTime.now().uptimeNanoseconds
                try fileSystem.syncData(target, mode: options.sync)
                syncTime = DispatchTime.now().uptimeNanoseconds - syncStart
            }
        } catch {
            failure = JournalError(error)
        }
        // A group that failed must never exist, not even after a crash: whatever part of it was written is cut
        // off, durably; if that fails too, the next leader tries again before writing anything.
        let cutFailed = failure != nil && (try? cutOff(target, at: start)) == nil
        lock.lock()
        mustCut = cutFailed
        allocated = failure == nil ? max(space.allocated, end) : start
        folderUnsynced = !folderSynced
        lastGroupSize = group.count
        groupsWritten += 1
        callsWritten += group.count
        if syncTime > 0 { lastSyncNanoseconds = syncTime }
        if let failure {
            for batch in group { batch.result = .failure(failure) }
        } else {
            for (batch, base) in zip(written, starts) {
                for change in batch.changes { apply(change, at: start + UInt64(base + change.offset)) }
                batch.result = .success(())
            }
            if let refused {
                for batch in group where batch.grows { batch.result = .failure(refused) }
            }
            length = end
        }
        let compacts = failure == nil && !isClosed && shouldCompact()
        // Woken without the lock held, so that they do not wake only to wait for it.
        lock.unlock()
        defer { lock.lock() }
        for batch in group { batch.wakeup.signal() }
        return compacts ? compact() : []
    }

    /// Cuts a failed group off, durably whatever `options.sync`: it must never come back, not even after a power loss.
    private func cutOff(_ target: Int32, at start: UInt64) throws {
        try fileSystem.truncate(target, to: start)
        try fileSystem.syncData(target, mode: .full)
    }

    /// Applies a durable record to the live records, as recovery (`JournalScan`) would.
    private func apply(_ change: JournalBatch.Change, at offset: UInt64) {
        let location = JournalLocation(offset: offset, length: UInt32(change.length))
        switch change.kind {
        case .put:
            index[change.id] = location
            liveBytes += location.size
        case .update:
            // Not live: a removal committed first; this record is dead.
            guard let old = index[change.id] else { return }
            index[change.id] = location
            liveBytes = liveBytes - old.size + location.size
        case .remove:
            if let old = index.removeValue(forKey: change.id) { liveBytes -= old.size }
        }
    }
}
