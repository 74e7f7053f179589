import Foundation
import Requests

/// The group commit: every call waits in one queue; the first caller queued leads, writing and syncing all that is
/// queued as one group, then hands the lead to the next. The state is the journal's, behind its lock.
///
/// Who leads: a blocking call's thread, or the writer queue (`writer`, serial, the journal's own) for a group of
/// non-blocking calls only, so that no other thread ever waits for a non-blocking call. A blocking caller never
/// waits for the writer queue to start: when it finds the lead handed to the writer and not yet taken
/// (`writerPending`) it takes the lead itself, and a finished lead hands over to the first blocking caller queued
/// if there is one, else to the writer. (The writer queue may be busy running a completion that made this very
/// blocking call.) So a blocking caller waits only for a lead that is running.
extension Journal {
    /// What a lead leaves to its thread for when it no longer leads and has released the lock, so that a handler
    /// may call the journal: the completions of the group's non-blocking calls, in the group's order, and the
    /// events of a compaction.
    struct LeadOutcome {
        var completions: [(JournalBatch.Completion, Result<[UInt64], JournalError>)] = []
        var events: [JournalEvent] = []

        mutating func append(_ other: LeadOutcome) {
            completions += other.completions
            events += other.events
        }
    }

    /// Who is to lead next, told by the thread that led once it has released the lock.
    enum Handoff {
        case none
        /// A blocking caller, woken on its semaphore.
        case caller(DispatchSemaphore)
        /// The writer queue.
        case writer
    }

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
        var wakesGatherer = enqueue(batch)
        // Leads if no one does, or if the lead was handed to the writer queue, which has not taken it yet.
        if !leading || writerPending {
            leading = true
            writerPending = false
            batch.leads = true
        }
        // What this thread's lead left to do once it no longer leads.
        var done = LeadOutcome()
        while true {
            var next = Handoff.none
            if batch.leads {
                batch.leads = false
                done.append(lead(handingOffTo: &next))
            }
            let result = batch.result
            lock.unlock()
            if wakesGatherer {
                wakesGatherer = false
                gathered.signal()
            }
            hand(next)
            if let result {
                finish(done)
                return try result.get()
            }
            batch.wakeup.wait()
            lock.lock()
        }
    }

    /// Queues `batch` once `prepare` (run under the lock) accepts it, and returns at once; `completion` hears of
    /// it once it is durable or failed, from the thread that wrote its group. If `prepare` refuses it, the journal
    /// is closed, or it holds no change, `completion` is called here, before returning.
    func commit(_ batch: JournalBatch, completion: @escaping JournalBatch.Completion, prepare: (JournalBatch) throws -> Void) {
        lock.lock()
        guard !isClosed else {
            lock.unlock()
            return completion(.failure(.closed))
        }
        do {
            try prepare(batch)
        } catch {
            lock.unlock()
            return completion(.failure(JournalError(error)))
        }
        guard !batch.changes.isEmpty else {
            lock.unlock()
            return completion(.success([]))
        }
        batch.completion = completion
        let wakesGatherer = enqueue(batch)
        var next = Handoff.none
        if !leading {
            leading = true
            writerPending = true
            next = .writer
        }
        lock.unlock()
        if wakesGatherer { gathered.signal() }
        hand(next)
    }

    /// Queues `batch`; returns whether a gathering leader is to be woken (after the lock is released, so that it
    /// does not wake only to wait for it). Under the lock.
    private func enqueue(_ batch: JournalBatch) -> Bool {
        queue.append(batch)
        guard gatherTarget > 0, queue.count >= gatherTarget else { return false }
        gatherTarget = 0
        return true
    }

    /// Leads on the writer queue, unless a blocking caller took the lead meanwhile or `close()` cancelled it.
    private func leadOnWriter() {
        lock.lock()
        guard writerPending else { return lock.unlock() }
        writerPending = false
        var next = Handoff.none
        let done = lead(handingOffTo: &next)
        lock.unlock()
        hand(next)
        finish(done)
    }

    /// Wakes the next leader. Without the lock.
    private func hand(_ next: Handoff) {
        switch next {
        case .none: break
        case let .caller(wakeup): wakeup.signal()
        case .writer: writer.async { self.leadOnWriter() }
        }
    }

    /// Has the completions called on their queue, then tells the events. Without the lock, and not leading.
    private func finish(_ done: LeadOutcome) {
        let calls = done.completions
        if !calls.isEmpty { completions.async { for (completion, outcome) in calls { completion(outcome) } } }
        for event in done.events { events?(event) }
    }

    /// Gathers, then writes and syncs every queued batch as one, then applies them, or fails them all and cuts off
    /// what was written; then hands the lead to the first blocking call queued meanwhile, or else, if calls are
    /// queued, to the writer queue (`next`, for the caller to wake once it has released the lock). Called and
    /// returns with the lock held; releases it to wait and for the I/O.
    private func lead(handingOffTo next: inout Handoff) -> LeadOutcome {
        gather()
        let group = queue
        queue.removeAll()
        let done = group.isEmpty ? LeadOutcome() : write(group)
        if let caller = queue.first(where: { $0.completion == nil }) {
            caller.leads = true
            next = .caller(caller.wakeup)
        } else if !queue.isEmpty {
            writerPending = true
            next = .writer
        } else {
            leading = false
            closeWaiter?.signal()
        }
        return done
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
    /// add records fail and removals go on), applies it or fails it, wakes its blocking callers, and compacts if it
    /// is time. Under the lock; releases it for the I/O. Returns the completions to call and the events of a
    /// compaction.
    private func write(_ group: [JournalBatch]) -> LeadOutcome {
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
        let live = index.count
        var done = LeadOutcome()
        for batch in group {
            if let completion = batch.completion, let outcome = batch.outcome { done.completions.append((completion, outcome)) }
        }
        // Woken without the lock held, so that they do not wake only to wait for it.
        lock.unlock()
        defer { lock.lock() }
        for batch in group where batch.completion == nil { batch.wakeup.signal() }
        if failure == nil, end > start { checkpoint.recordCommit(written, length: end, liveRecords: live) }
        if compacts { done.events = compact() }
        return done
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
