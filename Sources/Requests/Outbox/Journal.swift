import Foundation
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
/// Memory: the journal keeps 16 bytes per live record plus its dictionary slot (the payloads stay on disk), and the
/// records recovered at open until ``releaseRecovered()``.
final class Journal: @unchecked Sendable {
    /// Limits, which tests make small.
    struct Options: Sendable {
        /// The largest payload accepted.
        var maximumPayloadSize = JournalFormat.maximumPayloadSize
        /// Compaction runs when the file's dead bytes exceed its live bytes and this many bytes.
        var compactionMinimum: UInt64 = 1 << 20
        init() {}
    }

    static let journalName = "journal"
    static let lockName = "journal.lock"

    /// The journal's folder.
    let directory: URL
    let options: Options
    private let fileSystem: JournalFileSystem
    private let events: (@Sendable (JournalEvent) -> Void)?
    private let journalPath: String
    private let directoryFile: Int32
    private let lockFile: Int32

    /// Guards every `var` below.
    private let condition = NSCondition()
    private var recoveredRecords: [JournalRecord]
    private var index: [UInt64: JournalLocation]
    private var liveBytes: UInt64
    private var nextID: UInt64
    /// The length of the file's intact content; appends go there.
    private var length: UInt64
    private var file: Int32
    private var queue: [Batch] = []
    /// A leader is writing, syncing or compacting; it alone uses `file` and changes `length` and `index`.
    private var leading = false
    private var isClosed = false
    /// A failed write may have left bytes after `length`: the next leader cuts them off, durably, first.
    private var mustCut = false
    /// A compaction's rename is not yet durable: the next leader syncs the folder first.
    private var folderUnsynced = false
    /// After a failed compaction, none is tried before the file reaches this length.
    private var nextCompactionLength: UInt64 = 0

    /// Opens or creates the journal in `directory` (created `0700`, files `0600`; refuses a symbolic link or a
    /// folder of another user), takes an exclusive lock, and recovers the live records. `events` hears of damage
    /// found and of compactions, synchronously on the thread that found them (during this initializer for what
    /// recovery finds), never while the journal's lock is held.
    convenience init(directory: URL, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        try self.init(directory: directory, options: Options(), fileSystem: PosixJournalFileSystem(), events: events)
    }

    /// Opens the journal with `options` through `fileSystem` (tests fail its calls or simulate crashes).
    init(directory: URL, options: Options = Options(), fileSystem: JournalFileSystem, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        self.directory = directory
        self.options = options
        self.fileSystem = fileSystem
        self.events = events
        let journalURL = directory.appendingPathComponent(Self.journalName)
        journalPath = journalURL.path
        directoryFile = try fileSystem.openDirectory(directory)
        var opened = [directoryFile]
        var rewrite = false
        do {
            lockFile = try fileSystem.openFile(Self.lockName, in: directoryFile, at: directory.appendingPathComponent(Self.lockName), exclusive: false)
            opened.append(lockFile)
            guard try fileSystem.lock(lockFile) else { throw JournalError.lockedByAnotherProcess(directory) }
            try fileSystem.removeFile(JournalCompaction.temporaryName, in: directoryFile)
            file = try fileSystem.openFile(Self.journalName, in: directoryFile, at: journalURL, exclusive: false)
            opened.append(file)
            let size = try fileSystem.size(of: file)
            let bytes = try fileSystem.read(file, at: 0, count: Int(size))
            let scan = bytes.withUnsafeBytes { JournalScan($0, file: journalURL.path) }
            if let version = scan.unsupportedVersion { throw JournalError.unsupportedVersion(journalURL, version: version) }
            for event in scan.events { events?(event) }
            index = scan.index
            liveBytes = scan.liveBytes
            nextID = max(scan.floor, scan.highestID + 1, 1)
            recoveredRecords = scan.index.sorted { $0.key < $1.key }.map { id, location in
                let start = Int(location.offset) + JournalFormat.recordHeaderSize
                return JournalRecord(id: id, payload: bytes.subdata(in: start..<start + Int(location.length)))
            }
            length = scan.validLength
            if scan.validLength < JournalFormat.fileHeaderSize {
                // A new file, or one too short for a header: it holds nothing; it gets a header, and its name is
                // made durable before anything is written to it.
                try fileSystem.truncate(file, to: 0)
                try fileSystem.write(file, JournalFormat.fileHeader(floor: nextID), at: 0)
                try fileSystem.syncData(file)
                try fileSystem.syncDirectory(directoryFile)
                length = UInt64(JournalFormat.fileHeaderSize)
            } else if scan.validLength < size {
                try fileSystem.truncate(file, to: scan.validLength)
                try fileSystem.syncData(file)
            }
            rewrite = scan.skippedDamage || (scan.needsNewHeader && scan.validLength >= JournalFormat.fileHeaderSize)
        } catch {
            for descriptor in opened.reversed() { fileSystem.close(descriptor) }
            throw error
        }
        // A damaged header or a skipped stretch: rewritten now, so that the damage is reported once.
        if rewrite || condition.withLock({ shouldCompact() }) { compact() }
    }

    deinit { close() }

    /// The live records recovered at open, in id order, until ``releaseRecovered()``.
    var recovered: [JournalRecord] { condition.withLock { recoveredRecords } }

    /// Forgets ``recovered``, so that the payloads are not kept twice once the owner has its own copy.
    func releaseRecovered() { condition.withLock { recoveredRecords = [] } }

    /// The number of live records.
    var liveCount: Int { condition.withLock { index.count } }

    /// The live records' ids, in no particular order.
    var liveIDs: [UInt64] { condition.withLock { Array(index.keys) } }

    /// The calls queued for the next group commit (not those being written): for tests and monitors.
    var queuedCallCount: Int { condition.withLock { queue.count } }

    /// Appends records durably: returns only after they are synced; concurrent callers share one sync (group
    /// commit), and `payloads` are one write. Returns the ids given, in order. On any failure throws, and none of
    /// these records exists afterwards, not even after a crash.
    @discardableResult
    func append(_ payloads: [Data]) throws -> [UInt64] {
        let batch = try Batch(kind: .put, id: 0, payloads: payloads, limit: options.maximumPayloadSize)
        try commit(batch) { batch in
            let first = nextID
            nextID += UInt64(batch.operations.count)
            for position in batch.operations.indices {
                batch.operations[position].id = first + UInt64(position)
                JournalFormat.patch(id: first + UInt64(position), in: &batch.bytes, at: batch.operations[position].offset)
            }
        }
        return batch.operations.map(\.id)
    }

    /// Replaces a live record's payload, durably (same group commit). Throws `.unknownRecord` if `id` is not live.
    func update(_ id: UInt64, payload: Data) throws {
        let batch = try Batch(kind: .update, id: id, payloads: [payload], limit: options.maximumPayloadSize)
        try commit(batch) { _ in
            guard index[id] != nil else { throw JournalError.unknownRecord(id) }
        }
    }

    /// Removes live records, durably (tombstones; same group commit), all or none. Ids that are not live are
    /// ignored.
    func remove(_ ids: [UInt64]) throws {
        let batch = try Batch(kind: .remove, id: 0, payloads: [], limit: 0)
        try commit(batch) { batch in
            var seen = Set<UInt64>()
            let live = ids.filter { index[$0] != nil && seen.insert($0).inserted }
            for (position, id) in live.enumerated() {
                batch.operations.append(Change(kind: .remove, id: id, offset: batch.bytes.count, length: 0))
                let header = JournalFormat.RecordHeader(kind: .remove, continues: position < live.count - 1, id: id, length: 0, payloadCRC: 0)
                JournalFormat.appendRecordHeader(header, to: &batch.bytes)
            }
        }
    }

    /// Releases the lock and closes the files; later calls throw `.closed`. Calls waiting for a sync that already
    /// started complete; those still queued throw `.closed`.
    func close() {
        condition.lock()
        defer { condition.unlock() }
        guard !isClosed else { return }
        isClosed = true
        for batch in queue { batch.result = .failure(.closed) }
        queue.removeAll()
        condition.broadcast()
        while leading { condition.wait() }
        // A last try to cut off a failed call's records, which must not reappear at the next open.
        if mustCut { try? cutOff(file, at: length) }
        fileSystem.close(file)
        fileSystem.close(lockFile)
        fileSystem.close(directoryFile)
    }

    // MARK: - Group commit

    /// What one record of a batch does.
    private struct Change {
        var kind: JournalFormat.Kind
        var id: UInt64
        /// Where its header starts in the batch's bytes.
        var offset: Int
        var length: Int
    }

    /// One call's records, encoded. Changed only under `condition` once queued.
    private final class Batch {
        var bytes = Data()
        var operations: [Change] = []
        var result: Result<Void, JournalError>?

        /// Records of `kind` for `id` (patched later for puts), one per payload, each payload at most `limit`.
        init(kind: JournalFormat.Kind, id: UInt64, payloads: [Data], limit: Int) throws {
            bytes.reserveCapacity(payloads.reduce(0) { $0 + JournalFormat.recordHeaderSize + $1.count })
            for (position, payload) in payloads.enumerated() {
                guard payload.count <= min(limit, Int(UInt32.max)) else { throw JournalError.recordTooLarge(size: payload.count, limit: limit) }
                operations.append(Change(kind: kind, id: id, offset: bytes.count, length: payload.count))
                let header = JournalFormat.RecordHeader(
                    kind: kind, continues: position < payloads.count - 1, id: id, length: payload.count, payloadCRC: CRC32C.checksum(payload))
                JournalFormat.appendRecordHeader(header, to: &bytes)
                bytes.append(payload)
            }
        }
    }

    /// Queues `batch` once `prepare` (run under the lock) accepts it, and returns when it is durable: as the
    /// leader that writes it, or after a leader did.
    private func commit(_ batch: Batch, prepare: (Batch) throws -> Void) throws {
        condition.lock()
        defer { condition.unlock() }
        guard !isClosed else { throw JournalError.closed }
        try prepare(batch)
        guard !batch.operations.isEmpty else { return }
        queue.append(batch)
        while batch.result == nil {
            if leading { condition.wait() } else { lead() }
        }
        try batch.result?.get()
    }

    /// Writes and syncs every queued batch as one, then applies them, or fails them all and cuts off what was
    /// written. Called and returns with the lock held; releases it for the I/O.
    private func lead() {
        leading = true
        let group = queue
        queue.removeAll()
        let start = length
        let target = file
        let cut = mustCut
        let syncFolder = folderUnsynced
        condition.unlock()
        var bytes = group.count == 1 ? group[0].bytes : Data(capacity: group.reduce(0) { $0 + $1.bytes.count })
        var bases = [0]
        if group.count > 1 {
            bases.removeAll()
            for batch in group {
                bases.append(bytes.count)
                bytes.append(batch.bytes)
            }
        }
        var failure: JournalError?
        var folderSynced = !syncFolder
        do {
            if cut { try cutOff(target, at: start) }
            if syncFolder {
                try fileSystem.syncDirectory(directoryFile)
                folderSynced = true
            }
            try fileSystem.write(target, bytes, at: start)
            try fileSystem.syncData(target)
        } catch {
            failure = Self.journalError(error)
        }
        // A group that failed must never exist, not even after a crash: whatever part of it was written is cut
        // off, durably; if that fails too, the next leader tries again before writing anything.
        let cutFailed = failure != nil && (try? cutOff(target, at: start)) == nil
        condition.lock()
        mustCut = cutFailed
        folderUnsynced = !folderSynced
        if let failure {
            for batch in group { batch.result = .failure(failure) }
        } else {
            for (batch, base) in zip(group, bases) {
                for operation in batch.operations {
                    apply(operation, at: start + UInt64(base + operation.offset))
                }
                batch.result = .success(())
            }
            length = start + UInt64(bytes.count)
        }
        condition.broadcast()
        if failure == nil, !isClosed, shouldCompact() {
            condition.unlock()
            compact()
            condition.lock()
        }
        leading = false
        condition.broadcast()
    }

    private func cutOff(_ target: Int32, at start: UInt64) throws {
        try fileSystem.truncate(target, to: start)
        try fileSystem.syncData(target)
    }

    /// Applies a durable record to the live records, as recovery (`JournalScan`) would.
    private func apply(_ operation: Change, at offset: UInt64) {
        let location = JournalLocation(offset: offset, length: UInt32(operation.length))
        switch operation.kind {
        case .put:
            index[operation.id] = location
            liveBytes += location.size
        case .update:
            // Not live: a removal committed first; this record is dead.
            guard let old = index[operation.id] else { return }
            index[operation.id] = location
            liveBytes = liveBytes - old.size + location.size
        case .remove:
            if let old = index.removeValue(forKey: operation.id) { liveBytes -= old.size }
        }
    }

    // MARK: - Compaction

    /// Whether the dead bytes exceed the live ones and the minimum. Under the lock.
    private func shouldCompact() -> Bool {
        let header = UInt64(JournalFormat.fileHeaderSize)
        guard length >= header + liveBytes, length >= nextCompactionLength else { return false }
        let dead = length - header - liveBytes
        return dead > liveBytes && dead >= options.compactionMinimum
    }

    /// Rewrites the file with the live records (`JournalCompaction`). Runs as the leader or during `init`, without
    /// the lock: no other thread uses the file or changes the index meanwhile. A failure leaves the journal as it
    /// was; compaction is tried again once the file has grown by `compactionMinimum`.
    private func compact() {
        let (live, floor, old, before) = condition.withLock {
            (index.sorted { $0.key < $1.key }.map { (id: $0.key, location: $0.value) }, nextID, file, length)
        }
        let outcome: JournalCompaction.Outcome
        do {
            outcome = try JournalCompaction.run(
                fileSystem: fileSystem, directory: directoryFile, directoryURL: directory, journalName: Self.journalName,
                old: old, live: live, floor: floor)
        } catch {
            condition.withLock { nextCompactionLength = before + options.compactionMinimum }
            return
        }
        // Renamed: the new file is the journal from now on. Until the rename is durable, nothing is written.
        let synced = (try? fileSystem.syncDirectory(directoryFile)) != nil
        fileSystem.close(old)
        condition.withLock {
            file = outcome.file
            index = outcome.index
            liveBytes = outcome.index.values.reduce(0) { $0 + $1.size }
            length = outcome.length
            folderUnsynced = !synced
            nextCompactionLength = 0
        }
        for offset in outcome.damaged { events?(.skippedCorruptRecord(file: journalPath, offset: offset)) }
        events?(.compacted(bytesBefore: before, bytesAfter: outcome.length))
    }

    private static func journalError(_ error: Error) -> JournalError {
        error as? JournalError ?? .writeFailed(errno: EIO, operation: String(describing: error))
    }
}
