#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// How an outbox sends: which entries start, one attempt, what its outcome does to the entry. Every decision about
/// an entry's next step is in ``conclude(_:_:)``.
extension Outbox {
    /// The entries to start now, marked running. Call with the lock held; start them after releasing it.
    func schedule() -> [UInt64] {
        // Offline, only the probe starts: its timer made it ready while the outbox was suspended.
        if isOffline, !isClosed, !suspended, let probe, lanes[probe]?.phase == .ready {
            lanes[probe]?.phase = .running
            running += 1
            return [probe]
        }
        var starts: [UInt64] = []
        while !isClosed, !suspended, !isOffline, running < max(1, options.maximumConcurrentEntries), let id = lanes.nextReady() {
            running += 1
            starts.append(id)
        }
        return starts
    }

    /// Sends one attempt of a running entry, or settles it at once when it has expired or cannot be decoded.
    func start(_ id: UInt64) {
        guard let (entry, made) = lock.withLock({ isClosed ? nil : lanes[id].map { ($0.entry, lanes.made(id)) } }) else { return }
        if let expiry = entry.expiresAt, expiry <= Date() {
            return conclude(id, .expired)
        }
        guard let type = types[entry.requestType] else {
            return conclude(id, .verdict(.permanent(.cannotDecode(requestType: entry.requestType), nil)))
        }
        if let files = entry.files, !lock.withLock({ checkedFiles.contains(id) }) {
            // Found on disk: its files are read whole once, off the caller's thread, before its first attempt.
            return DispatchQueue.global().async { [weak self] in
                guard let self else { return }
                if let problem = self.problem(with: files, reading: true) {
                    return self.conclude(id, .verdict(.permanent(.failed(problem), nil)))
                }
                _ = self.lock.withLock { self.checkedFiles.insert(id) }
                self.send(type, entry, made: made)
            }
        }
        // Before every attempt: each file is still a regular file of its size, not a link put in its place (the
        // upload opens it by its path).
        if let files = entry.files, let problem = problem(with: files, reading: false) {
            return conclude(id, .verdict(.permanent(.failed(problem), nil)))
        }
        send(type, entry, made: made)
    }

    /// Sends an attempt of `entry` as a request of type `R`: the request enqueued in this process, or else the one
    /// decoded from the entry's JSON (once, then kept for its next attempts), with the URL request made from the
    /// frozen one (once too).
    private func send<R: OutboxRequest>(_ type: R.Type, _ entry: OutboxEntry, made: OutboxLanes.Made?) {
        guard let request = made?.request as? R ?? (try? JSONDecoder().decode(R.self, from: entry.encodedRequest)) else {
            return conclude(entry.id, .verdict(.permanent(.cannotDecode(requestType: entry.requestType), nil)))
        }
        let urlRequest = made?.urlRequest ?? entry.frozen?.urlRequest
        if made?.request == nil || (made?.urlRequest == nil && urlRequest != nil) {
            lock.withLock { lanes.keep(OutboxLanes.Made(request: request, urlRequest: urlRequest), for: entry.id) }
        }
        let (limits, timeout) = attemptLimits(own: request.limits)
        let attempt = OutboxAttempt(
            inner: request, idempotencyKey: entry.idempotencyKey, frozen: entry.frozen, made: urlRequest, limits: limits)
        let number: UInt64 = lock.withLock {
            attemptCount += 1
            return attemptCount
        }
        // Weak: an attempt in flight must not keep an outbox the app released open (its deinit closes it).
        let concluded: (Result<OutboxResponse, Error>) -> Void = { [weak self] result in
            let verdict = OutboxVerdict.judge(result, refusal: attempt.answer.refusal, attemptTimeout: timeout)
            self?.conclude(entry.id, .verdict(verdict), attempt: number)
        }
        let operation: RequestOperation<OutboxResponse, Error>
        if let files = entry.files {
            let upload = OutboxUploadAttempt(attempt: attempt, uploadBody: files.uploadBody(frozen: entry.frozen, store: fileStore))
            operation = queue.makeOperation(for: upload, session: session, completionQueue: callbacks, completion: concluded)
        } else {
            operation = queue.makeOperation(for: attempt, session: session, completionQueue: callbacks, completion: concluded)
        }
        let proceed: Bool = lock.withLock {
            guard !isClosed, lanes[entry.id]?.phase == .running else { return false }
            lanes[entry.id]?.attempt = (number, operation)
            lanes[entry.id]?.entry.attempts += 1
            return true
        }
        guard proceed else { return }
        queue.addOperation(operation)
    }

    /// The limits of an attempt: the request's own (or else the queue's), with a deadline of
    /// ``OutboxOptions/attemptTimeout`` unless theirs is shorter; and that timeout when it is the one that applies,
    /// so that the failure it causes is described as the outbox's.
    private func attemptLimits(own: TransferLimits?) -> (TransferLimits?, TimeInterval?) {
        let timeout = options.attemptTimeout > 0 ? options.attemptTimeout : OutboxOptions().attemptTimeout
        guard timeout.isFinite else { return (own, nil) }
        var limits = own ?? queue.requestPolicies.limits
        // A NaN deadline is none, which the timeout replaces.
        if let deadline = limits.deadline, deadline <= timeout { return (limits, nil) }
        limits.deadline = timeout
        return (limits, timeout)
    }

    enum Outcome {
        case verdict(OutboxVerdict)
        case expired
    }

    /// What a running entry's attempt (or its expiry) means: it leaves, is parked, or waits to be sent again.
    /// `attempt`: the number ``send(_:_:)`` gave the attempt; an outcome for any attempt but the entry's current one
    /// is ignored, so that an entry is concluded once per start whatever its attempts report, and when.
    func conclude(_ id: UInt64, _ outcome: Outcome, attempt: UInt64? = nil) {
        let (current, closed, dropRequested, stored): (Bool, Bool, Bool, OutboxEntry?) = lock.withLock {
            if let attempt, lanes[id]?.attempt?.number != attempt { return (false, isClosed, false, nil) }
            running -= 1
            lanes[id]?.attempt = nil
            return (true, isClosed, lanes[id]?.dropRequested ?? false, lanes[id]?.entry)
        }
        guard current, !closed, var entry = stored else { return }
        if dropRequested {
            return leave(id, .dropped(.byApp))
        }
        switch outcome {
        case .expired:
            leave(id, .dropped(.expired))
        case let .verdict(.sent(response)):
            leave(id, .sent(response))
        case let .verdict(.permanent(reason, response)):
            let letter = OutboxDeadLetter(reason: reason, response: response, parkedAt: Date())
            entry.deadLetter = letter
            // A failed write leaves the entry pending on disk: the next outbox on the folder sends it again.
            try? journal.update(id, payload: OutboxRecord.encode(entry))
            let starts: [UInt64]? = lock.withLock {
                if lanes[id]?.dropRequested == true { return nil }
                if probe == id { endOffline() }
                let operation = lanes[id]?.settledOperation
                lanes.park(id, letter)
                if let parked = lanes[id]?.entry { emit(.parked, parked) }
                operation.map(queue.addOperation)
                return schedule()
            }
            // drop(_:) arrived while the entry was being parked.
            guard let starts else { return leave(id, .dropped(.byApp)) }
            starts.forEach(start)
        case let .verdict(.transient(retryAfter, offline, description)):
            let starts: [UInt64]? = lock.withLock {
                guard !isClosed, lanes[id] != nil else { return [] }
                if lanes[id]?.dropRequested == true { return nil }
                let delay = min(max(retryAfter ?? backoff(afterAttempts: entry.attempts), 0), options.maxDelay)
                if offline, probe == nil || probe == id {
                    if !isOffline { emit(.waitingForConnectivity, entry) }
                    isOffline = true
                    probe = id
                } else if !offline, isOffline {
                    endOffline()
                }
                let wake = generation
                lanes[id]?.phase = .backoff(generation: wake)
                emit(.willRetry(delay: delay, error: description), entry)
                callbacks.asyncAfter(deadline: .now() + delay) { [weak self] in self?.wake(id, generation: wake) }
                return schedule()
            }
            guard let starts else { return leave(id, .dropped(.byApp)) }
            starts.forEach(start)
        }
    }

    /// Forgets a settled entry, tells subscribers, and has its removal written with others (see
    /// ``removalsToWrite()``).
    private func leave(_ id: UInt64, _ kind: OutboxChange.Kind) {
        let (starts, removals): ([UInt64], [UInt64]) = lock.withLock {
            settle(id, kind)
            if case .sent = kind, isOffline { endOffline() }
            let starts = schedule()
            unremoved.append(id)
            return (starts, removalsToWrite())
        }
        starts.forEach(start)
        write(removals: removals)
    }

    /// The removals to write now, taken from `unremoved`: all of them once there are ``removalGroup``, or once no
    /// attempt is running (the outbox is idle or waits for a timer); otherwise none, and a timer writes them within
    /// ``OutboxOptions/removalDelay``. So a drain costs one sync per ``removalGroup`` removals, and a sent entry's removal is durable
    /// soon after. Until it is, a crash sends the entry again with the same key, which the server has seen. Call with
    /// the lock held.
    func removalsToWrite() -> [UInt64] {
        guard !unremoved.isEmpty else { return [] }
        if unremoved.count >= Self.removalGroup || running == 0 || isClosed { return takeRemovals() }
        // The timer counts from the first removal of the group: a timer armed for an earlier group, which was
        // written since, does not write this one early.
        if removalTimer == nil, options.removalDelay.isFinite {
            removalTimerCount += 1
            let timer = removalTimerCount
            removalTimer = timer
            callbacks.asyncAfter(deadline: .now() + max(options.removalDelay, 0)) { [weak self] in self?.removalTimerFired(timer) }
        }
        return []
    }

    /// The removals not yet written, now being written; the group's timer, if any, is void. Call with the lock held.
    private func takeRemovals() -> [UInt64] {
        removalTimer = nil
        defer {
            removing.formUnion(unremoved)
            unremoved = []
        }
        return unremoved
    }

    private func removalTimerFired(_ timer: UInt64) {
        let removals: [UInt64] = lock.withLock {
            guard !isClosed, removalTimer == timer else { return [] }
            return takeRemovals()
        }
        write(removals: removals)
    }

    /// Writes removals without blocking a thread. A failed write leaves the entries on disk: the next outbox on the
    /// folder sends them again with the same key, which the server has seen.
    private func write(removals: [UInt64]) {
        guard !removals.isEmpty else { return }
        journal.remove(removals) { [weak self] result in
            guard let self else { return }
            self.lock.withLock { self.removing.subtract(removals) }
            if case .success = result { self.removeFiles(of: removals) }
        }
    }

    /// Forgets an entry that left, tells subscribers and finishes its settled operation. Call with the lock held.
    func settle(_ id: UInt64, _ kind: OutboxChange.Kind) {
        guard let slot = lanes.remove(id) else { return }
        checkedFiles.remove(id)
        if let files = slot.entry.files { leavingFiles[id] = files }
        if probe == id { endOffline() }
        emit(kind, slot.entry)
        slot.settledOperation.map(queue.addOperation)
    }

    /// Connectivity is back, or the probe left: every ready entry may start. Call with the lock held.
    func endOffline() {
        isOffline = false
        probe = nil
    }

    /// A retry timer fired: the entry is ready again (the probe is sent at once, whatever the limit).
    private func wake(_ id: UInt64, generation wake: Int) {
        let starts: [UInt64] = lock.withLock {
            guard !isClosed, lanes[id]?.phase == .backoff(generation: wake) else { return [] }
            if isOffline, probe == id, !suspended {
                lanes[id]?.phase = .running
                running += 1
                return [id]
            }
            lanes.makeReady(id)
            return schedule()
        }
        starts.forEach(start)
    }

    /// The wait after `attempts` failed attempts: ``OutboxOptions/baseDelay`` doubled per further attempt, with
    /// jitter, at most ``OutboxOptions/maxDelay``.
    func backoff(afterAttempts attempts: Int) -> TimeInterval {
        let base = options.baseDelay * pow(2, Double(min(max(attempts - 1, 0), 40)))
        let jitter = min(max(options.jitter, 0), 1)
        return min(base * Double.random(in: (1 - jitter)...(1 + jitter)), options.maxDelay)
    }

    /// Tells every subscriber. Call with the lock held, so that changes arrive in the order they happened.
    func emit(_ kind: OutboxChange.Kind, _ entry: OutboxEntry) {
        guard !subscribers.isEmpty else { return }
        let change = OutboxChange(
            kind: kind, entry: entry, pendingCount: lanes.pendingCount, deadLetterCount: lanes.deadLetterCount)
        for continuation in subscribers.values { continuation.yield(change) }
    }

    static func outboxError(_ error: Error, directory: URL) -> OutboxError {
        guard let error = error as? JournalError else { return .writeFailed(OutboxVerdict.describe(error)) }
        switch error {
        case .lockedByAnotherProcess: return .folderInUse(directory)
        case .notADirectory: return .unusableFolder(directory, "it is not a folder")
        case .notOwnedByUser: return .unusableFolder(directory, "it belongs to another user")
        case .isSymbolicLink: return .unusableFolder(directory, "it is a symbolic link")
        case let .recordTooLarge(size, limit): return .tooLarge(size: size, limit: limit)
        case let .writeFailed(code, operation): return .writeFailed("\(operation) failed: \(String(cString: strerror(code)))")
        case .closed: return .closed
        case let .unsupportedVersion(_, version):
            return .unusableFolder(directory, "its journal is of version \(version), which this version of Requests does not read")
        case .unknownRecord: return .writeFailed(error.description)
        }
    }
}

extension OutboxEntry {
    func with(id: UInt64) -> OutboxEntry {
        OutboxEntry(
            id: id, idempotencyKey: idempotencyKey, lane: lane, requestType: requestType, enqueuedAt: enqueuedAt,
            expiresAt: expiresAt, attempts: attempts, deadLetter: deadLetter, encodedRequest: encodedRequest, frozen: frozen,
            coalescingKey: coalescingKey, files: files)
    }
}

/// Counts what the journal reported while opening.
final class OutboxJournalEvents: @unchecked Sendable {
    private let lock = NSLock()
    private var skippedCount = 0
    private var discarded = false
    private var lost: OutboxJournalLoss?

    var skipped: Int { lock.withLock { skippedCount } }
    var discardedTail: Bool { lock.withLock { discarded } }
    var loss: OutboxJournalLoss? { lock.withLock { lost } }

    func record(_ event: JournalEvent) {
        lock.withLock {
            switch event {
            case .skippedCorruptRecord: skippedCount += 1
            case .discardedTornTail: discarded = true
            case .compacted: break
            case let .lost(_, kind, atCheckpoint, found): lost = OutboxJournalLoss(kind, recordsAtCheckpoint: atCheckpoint, recordsFound: found)
            }
        }
    }
}
