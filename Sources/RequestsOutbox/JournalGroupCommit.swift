import Foundation
import Requests

/// The group commit: every call waits in one queue; the first caller queued leads, writing and syncing all that is
/// queued as one group, then hands the lead to the next. The state is the journal's, behind its lock.
extension Journal {
    /// Queues `batch` once `prepare` (run under the lock) accepts it, and returns when it is durable: as the
    /// leader that writes it, or after a leader did.
    func commit(_ batch: JournalBatch, prepare: (JournalBatch) throws -> Void) throws {
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
    func cutOff(_ target: Int32, at start: UInt64) throws {
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
