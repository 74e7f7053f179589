#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// Requests that survive the process: each is on disk before ``enqueue(_:lane:expiresAt:)-a7f9`` returns, is sent
/// with the same `Idempotency-Key` on every attempt, in this process and after a restart, and leaves the disk only
/// when the server has given a definitive answer.
///
/// Open an outbox on a folder of its own, with the queue its attempts run on and every request type it may find
/// there. Opening resumes the entries a previous process left. Each attempt is a request operation of `queue`,
/// with the queue's policies (adapters, authenticator, monitors), so monitors see every attempt.
///
/// - Transport errors, 408, 429 and 5xx are sent again after a backoff (or the `Retry-After`), without limit
///   unless the entry expires. While there is no connectivity, one entry probes and the others wait.
/// - Other answers outside the request's valid status codes park the entry in ``deadLetters`` with the response;
///   ``retry(_:)`` makes it pending again and ``drop(_:)`` removes it.
/// - Entries with the same lane run one at a time, in enqueue order; other entries run in parallel, up to
///   ``OutboxOptions/maximumConcurrentEntries``.
/// - ``changes`` reports what happens, with the pending count after each change.
///
/// The folder is locked while the outbox is open (until ``close()``, or until it is released): a second outbox on
/// it, in this process or another, fails with ``OutboxError/folderInUse(_:)``. Files are readable only by the user.
/// What opening found (resumed entries, damaged records skipped, a journal found lost since the last checkpoint) is
/// in ``openingReport`` and goes to the queue's monitors that are ``OutboxMonitor``s. See <doc:DurableOutbox>.
public final class Outbox: @unchecked Sendable {
    /// The folder the journal is in.
    public let directory: URL
    /// What opening found: entries resumed, records skipped, and a journal found lost.
    public let openingReport: OutboxOpeningReport
    let queue: OperationQueue
    let session: URLSession
    let options: OutboxOptions
    let journal: Journal
    /// The entries' files.
    let fileStore: OutboxFileStore
    let types: [String: any OutboxRequest.Type]
    /// The registered types' names, computed once: the default name costs a runtime type lookup.
    let typeNames: [ObjectIdentifier: String]
    /// Where attempts complete and timers fire.
    let callbacks = DispatchQueue(label: "Requests.Outbox")

    let lock = NSLock()
    var lanes = OutboxLanes()
    var running = 0
    var isClosed = false
    var suspended: Bool
    /// No connectivity: only `probe` is sent, after its backoff, until an attempt gets an answer.
    var isOffline = false
    var probe: UInt64?
    var generation = 0
    /// Numbers each attempt, so that only the current attempt of an entry concludes it.
    var attemptCount: UInt64 = 0
    var subscribers: [UUID: AsyncStream<OutboxChange>.Continuation] = [:]
    /// Settled entries whose removal from the journal is not yet written, and those being written (see
    /// `removalsToWrite()`).
    var unremoved: [UInt64] = []
    var removing: Set<UInt64> = []
    /// The timer of the group of removals in `unremoved`, if one is armed; timers are numbered by `removalTimerCount`.
    var removalTimer: UInt64?
    var removalTimerCount: UInt64 = 0
    /// The files of entries that left, removed once their entry's removal is durable (see `removeFiles(of:)`).
    var leavingFiles: [UInt64: OutboxStoredFiles] = [:]
    /// Entries whose files were checked whole (size and SHA-256) in this process: stored by it, or checked before
    /// their first attempt.
    var checkedFiles: Set<UInt64> = []
    /// Removals are written in groups of this many during a drain, or ``OutboxOptions/removalDelay`` after the first
    /// of a smaller group.
    static let removalGroup = 8

    /// Opens the outbox in `directory` (created if needed, `0700`), resumes the entries stored there, and starts
    /// sending them as operations of `queue` on `session`. The calling thread reads, recovers and syncs the journal;
    /// from the main thread, use ``open(directory:queue:session:requestTypes:options:)``, which does that elsewhere.
    ///
    /// - Parameters:
    ///   - directory: a folder for this outbox alone.
    ///   - queue: the queue each attempt is an operation of, with its policies.
    ///   - session: the session attempts are sent with.
    ///   - requestTypes: every type that may be enqueued, and found stored, by its ``OutboxRequest/outboxName``. A
    ///     stored entry whose type is not here is parked with ``OutboxDeadLetter/Reason/cannotDecode(requestType:)``.
    ///   - options: concurrency, backoff, expiry.
    /// - Throws: ``OutboxError``: the folder is in use by another outbox, or cannot be used.
    public init(
        directory: URL,
        queue: OperationQueue,
        session: URLSession = .shared,
        requestTypes: [any OutboxRequest.Type],
        options: OutboxOptions = OutboxOptions()
    ) throws {
        self.directory = directory
        self.queue = queue
        self.session = session
        self.options = options
        suspended = options.startsSuspended
        var types: [String: any OutboxRequest.Type] = [:]
        var typeNames: [ObjectIdentifier: String] = [:]
        for type in requestTypes {
            types[type.outboxName] = type
            typeNames[ObjectIdentifier(type)] = type.outboxName
        }
        self.types = types
        self.typeNames = typeNames
        let events = OutboxJournalEvents()
        do {
            var journalOptions = Journal.Options()
            journalOptions.sync = options.durability == .barrier ? .barrier : .full
            journal = try Journal(directory: directory, options: journalOptions, fileSystem: PosixJournalFileSystem(), events: { events.record($0) })
        } catch {
            throw Self.outboxError(error, directory: directory)
        }
        do {
            fileStore = try OutboxFileStore(outboxDirectory: directory)
        } catch {
            journal.close()
            throw Self.outboxError(error, directory: directory.appendingPathComponent(OutboxFileStore.folderName, isDirectory: true))
        }
        var unreadable = 0
        var entries: [OutboxEntry] = []
        let recovered = journal.recovered
        journal.releaseRecovered()
        for record in recovered {
            guard let entry = OutboxRecord.decode(record.payload, id: record.id) else {
                unreadable += 1
                continue
            }
            entries.append(entry)
        }
        let files = Self.checkFiles(of: &entries, in: fileStore, journal: journal)
        for entry in entries {
            if entry.deadLetter != nil {
                lanes.addParked(entry)
            } else {
                lanes.addPending(entry)
            }
        }
        openingReport = OutboxOpeningReport(
            pending: lanes.pendingCount, deadLetters: lanes.deadLetterCount, skippedRecords: events.skipped + unreadable,
            discardedIncompleteRecord: events.discardedTail, loss: events.loss, attachments: files.count,
            damagedAttachments: files.damaged, removedStrayFiles: files.removed)
        for case let monitor as OutboxMonitor in queue.requestPolicies.monitors { monitor.outboxDidOpen(directory, report: openingReport) }
        let starts = lock.withLock { schedule() }
        starts.forEach(start)
    }

    deinit {
        close()
    }

    /// Opens the outbox like ``init(directory:queue:session:requestTypes:options:)``, on a background thread: opening
    /// reads the whole journal, recovers it and syncs it, which takes milliseconds for a few thousand entries and
    /// one sync (5–20 ms with `F_FULLFSYNC` on Apple SSDs), so that the caller's thread, the main thread say, never
    /// waits for the disk.
    public static func open(
        directory: URL,
        queue: OperationQueue,
        session: URLSession = .shared,
        requestTypes: [any OutboxRequest.Type],
        options: OutboxOptions = OutboxOptions()
    ) async throws -> Outbox {
        let arguments = OpeningArguments(directory: directory, queue: queue, session: session, requestTypes: requestTypes, options: options)
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(
                    with: Result {
                        try Outbox(
                            directory: arguments.directory, queue: arguments.queue, session: arguments.session,
                            requestTypes: arguments.requestTypes, options: arguments.options)
                    })
            }
        }
    }

    /// Whether the outbox starts no attempt (attempts in flight go on); entries are still stored by
    /// ``enqueue(_:lane:expiresAt:)-a7f9``. Setting it to `false` starts sending.
    public var isSuspended: Bool {
        get { lock.withLock { suspended } }
        set {
            let starts: [UInt64] = lock.withLock {
                suspended = newValue
                return schedule()
            }
            starts.forEach(start)
        }
    }

    /// Entries waiting to be sent (not the parked ones).
    public var pendingCount: Int { lock.withLock { lanes.pendingCount } }

    /// The pending entries, oldest first.
    public var pendingEntries: [OutboxEntry] { lock.withLock { lanes.entries(parked: false) } }

    /// The parked entries, oldest first, each with its ``OutboxEntry/deadLetter``.
    public var deadLetters: [OutboxEntry] { lock.withLock { lanes.entries(parked: true) } }

    /// The changes from now on: each access returns a new sequence. When a reader falls behind by more than 1,000
    /// changes, the oldest are dropped; each change carries the counts, so the latest is enough to show them.
    public var changes: AsyncStream<OutboxChange> {
        let id = UUID()
        return AsyncStream(bufferingPolicy: .bufferingNewest(1000)) { continuation in
            let added: Bool = lock.withLock {
                guard !isClosed else { return false }
                subscribers[id] = continuation
                return true
            }
            guard added else { return continuation.finish() }
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                _ = self.lock.withLock { self.subscribers.removeValue(forKey: id) }
            }
        }
    }

    /// An operation that finishes when the entry is settled (sent, parked or dropped), for other operations to
    /// depend on; `nil` when no pending entry has this identifier. The outbox adds it to its queue at that moment.
    public func operation(for id: UInt64) -> Operation? {
        lock.withLock {
            guard let slot = lanes[id], slot.phase != .parked else { return nil }
            if let operation = slot.settledOperation { return operation }
            let operation = BlockOperation {}
            lanes[id]?.settledOperation = operation
            return operation
        }
    }

    /// Makes a parked entry pending again: it is sent with the same `Idempotency-Key`, after the entries of its lane
    /// that were enqueued before it.
    public func retry(_ id: UInt64) throws {
        let starts: [UInt64] = try lock.withLock {
            guard !isClosed else { throw OutboxError.closed }
            guard var entry = lanes[id]?.entry, lanes[id]?.phase == .parked else { throw OutboxError.noSuchEntry(id) }
            entry.deadLetter = nil
            do {
                try journal.update(id, payload: OutboxRecord.encode(entry))
            } catch {
                throw Self.outboxError(error, directory: directory)
            }
            lanes.unpark(id)
            if let entry = lanes[id]?.entry { emit(.requeued, entry) }
            return schedule()
        }
        starts.forEach(start)
    }

    /// Removes a pending or parked entry without sending it. An entry whose attempt is in flight has that attempt
    /// cancelled and leaves when it ends (the server may still have received it).
    public func drop(_ id: UInt64) throws {
        let starts: [UInt64] = try lock.withLock {
            guard !isClosed else { throw OutboxError.closed }
            guard let slot = lanes[id] else { throw OutboxError.noSuchEntry(id) }
            if slot.phase == .running {
                lanes[id]?.dropRequested = true
                slot.attempt?.operation.cancel()
                return []
            }
            do {
                try journal.remove([id])
            } catch {
                throw Self.outboxError(error, directory: directory)
            }
            settle(id, .dropped(.byApp))
            return schedule()
        }
        removeFiles(of: [id])
        starts.forEach(start)
    }

    /// Sends the entries waiting for a retry timer or for connectivity now: call it when the app learns that the
    /// network is back (for example from `NWPathMonitor`).
    public func retryNow() {
        let starts: [UInt64] = lock.withLock {
            generation += 1
            isOffline = false
            probe = nil
            lanes.wakeAll()
            return schedule()
        }
        starts.forEach(start)
    }

    /// Stops sending, cancels the attempts in flight (their entries stay stored, and are sent again with the same
    /// key by the next outbox on the folder), ends ``changes`` and releases the folder. Later calls do nothing. An
    /// ``enqueue(_:lane:expiresAt:)-a7f9`` at the same time either throws ``OutboxError/closed`` or stores its entry,
    /// which the next outbox on the folder sends.
    ///
    /// Releasing the last reference to the outbox closes it the same way: attempts in flight, retry timers and
    /// readers of ``changes`` do not keep it alive, so a new outbox can open the folder as soon as the old one is
    /// released.
    public func close() {
        let (attempts, continuations): ([Operation], [AsyncStream<OutboxChange>.Continuation]) = lock.withLock {
            guard !isClosed else { return ([], []) }
            isClosed = true
            defer { subscribers = [:] }
            return (lanes.slots.values.compactMap(\.attempt?.operation), Array(subscribers.values))
        }
        attempts.forEach { $0.cancel() }
        continuations.forEach { $0.finish() }
        // The removals not yet written, and those being written (queued behind them, they are durable when this
        // returns): written now, so that the next outbox on the folder does not send those entries again.
        let removals: [UInt64] = lock.withLock {
            defer { unremoved = [] }
            return unremoved + removing
        }
        if !removals.isEmpty, (try? journal.remove(removals)) != nil { removeFiles(of: removals) }
        journal.close()
    }
}

/// What ``Outbox/open(directory:queue:session:requestTypes:options:)`` hands to the thread that opens: the queue,
/// the session and the types are used there as the initializer uses them.
private struct OpeningArguments: @unchecked Sendable {
    let directory: URL
    let queue: OperationQueue
    let session: URLSession
    let requestTypes: [any OutboxRequest.Type]
    let options: OutboxOptions
}

/// What ``Outbox/init(directory:queue:session:requestTypes:options:)`` found in the folder.
public struct OutboxOpeningReport: Sendable, Equatable {
    /// Entries resumed, to be sent.
    public let pending: Int
    /// Entries found parked.
    public let deadLetters: Int
    /// Records skipped because they were damaged (a checksum that does not match) or unreadable by this version.
    public let skippedRecords: Int
    /// Whether the last record was incomplete (the process ended while writing it) and was cut off. Its
    /// `enqueue` had not returned.
    public let discardedIncompleteRecord: Bool
    /// The journal found missing, emptied, replaced or shortened since the last checkpoint, or the checkpoint found
    /// unreadable, with what is known of the entries lost; `nil` when nothing is known to be lost. See
    /// ``isAllClear``.
    public let loss: OutboxJournalLoss?
    /// The files carried by the entries found (pending and parked).
    public let attachments: Int
    /// The files found missing or damaged (another size, not a regular file): their pending entries are parked with
    /// the reason (``OutboxDeadLetter/Reason/failed(_:)``).
    public let damagedAttachments: [OutboxDamagedAttachment]
    /// Files found in the folder that no entry carries (left by an `enqueue` or a removal that a crash
    /// interrupted), removed.
    public let removedStrayFiles: Int

    init(
        pending: Int, deadLetters: Int, skippedRecords: Int, discardedIncompleteRecord: Bool, loss: OutboxJournalLoss?,
        attachments: Int = 0, damagedAttachments: [OutboxDamagedAttachment] = [], removedStrayFiles: Int = 0
    ) {
        self.pending = pending
        self.deadLetters = deadLetters
        self.skippedRecords = skippedRecords
        self.discardedIncompleteRecord = discardedIncompleteRecord
        self.loss = loss
        self.attachments = attachments
        self.damagedAttachments = damagedAttachments
        self.removedStrayFiles = removedStrayFiles
    }
}
