#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// Enqueueing: each request is encoded (its JSON, with sorted keys) and its URL request made and fixed
/// (``FrozenRequest``), then all are stored with one group commit of the journal, then scheduled.
extension Outbox {
    /// Stores `request` durably and schedules it; returns once it is on disk (after a sync, shared with other
    /// enqueues at the same time). The calling thread waits for that sync: from the main thread, use the
    /// asynchronous form, which does not block a thread.
    ///
    /// The request's `makeURLRequest` is called now, once: what it makes (method, URL, header fields, body) is what
    /// every attempt sends, in this process and after a restart (see ``OutboxEntry/urlRequest``). A
    /// `makeURLRequest` that completes later is waited for, up to ``OutboxOptions/attemptTimeout``, except on the main
    /// thread, where it throws ``OutboxError/cannotEncode(requestType:_:)``.
    ///
    /// - Parameters:
    ///   - request: the request, stored as its JSON and as the URL request it makes.
    ///   - lane: entries with the same lane are sent one at a time, in enqueue order; `nil`: no order.
    ///   - expiresAt: the entry is dropped unsent after this date (default: ``OutboxOptions/expiresAfter`` from
    ///     now, or never).
    /// - Returns: the entry, with its ``OutboxEntry/idempotencyKey``.
    /// - Throws: ``OutboxError``: the type is not among `requestTypes`, the request cannot be encoded or its
    ///   `makeURLRequest` failed, or the write failed. Nothing is stored then.
    @discardableResult
    public func enqueue<R: OutboxRequest>(_ request: R, lane: String? = nil, expiresAt: Date? = nil) throws -> OutboxEntry {
        try enqueue(contentsOf: [request], lane: lane, expiresAt: expiresAt)[0]
    }

    /// Stores `requests` durably, with one sync, in this order in `lane`; all or none are stored. See
    /// ``enqueue(_:lane:expiresAt:)-a7f9``.
    @discardableResult
    public func enqueue<R: OutboxRequest>(contentsOf requests: [R], lane: String? = nil, expiresAt: Date? = nil) throws -> [OutboxEntry] {
        let typeName = try registeredName(of: R.self)
        guard !requests.isEmpty else { return [] }
        var frozen: [FrozenRequest] = []
        frozen.reserveCapacity(requests.count)
        for index in requests.indices {
            do {
                frozen.append(try FrozenRequest.make(requests[index], bodyLimit: bodyLimit, wait: makeRequestWait))
            } catch {
                throw OutboxError.cannotEncode(requestType: typeName, FrozenRequest.describe(error))
            }
        }
        let entries = try makeEntries(requests, frozen: frozen, typeName: typeName, lane: lane, expiresAt: expiresAt)
        // A closed outbox's journal throws `.closed`.
        let ids: [UInt64]
        do {
            ids = try journal.append(entries.map(OutboxRecord.encode))
        } catch {
            throw Self.outboxError(error, directory: directory)
        }
        return schedule(entries, ids: ids, requests: requests)
    }

    /// Stores `request` durably and schedules it, like ``enqueue(_:lane:expiresAt:)-a7f9``, but suspends instead of
    /// blocking a thread while the request is made and while the sync runs: the form to call from the main actor.
    @discardableResult
    public func enqueue<R: OutboxRequest>(_ request: R, lane: String? = nil, expiresAt: Date? = nil) async throws -> OutboxEntry {
        try await enqueue(contentsOf: [request], lane: lane, expiresAt: expiresAt)[0]
    }

    /// Stores `requests` durably, with one sync, in this order in `lane`, like
    /// ``enqueue(contentsOf:lane:expiresAt:)``, but suspends instead of blocking a thread.
    @discardableResult
    public func enqueue<R: OutboxRequest>(contentsOf requests: [R], lane: String? = nil, expiresAt: Date? = nil) async throws -> [OutboxEntry] {
        let typeName = try registeredName(of: R.self)
        guard !requests.isEmpty else { return [] }
        var frozen: [FrozenRequest] = []
        frozen.reserveCapacity(requests.count)
        for index in requests.indices {
            do {
                frozen.append(try await FrozenRequest.make(requests[index], bodyLimit: bodyLimit, wait: makeRequestWait))
            } catch {
                throw OutboxError.cannotEncode(requestType: typeName, FrozenRequest.describe(error))
            }
        }
        let entries = try makeEntries(requests, frozen: frozen, typeName: typeName, lane: lane, expiresAt: expiresAt)
        let payloads = entries.map(OutboxRecord.encode)
        let stored: Result<[UInt64], JournalError> = await withCheckedContinuation { continuation in
            journal.append(payloads) { continuation.resume(returning: $0) }
        }
        do {
            return schedule(entries, ids: try stored.get(), requests: requests)
        } catch {
            throw Self.outboxError(error, directory: directory)
        }
    }

    /// The name `type` is registered under, or ``OutboxError/unregisteredType(_:)``.
    func registeredName<R: OutboxRequest>(of type: R.Type) throws -> String {
        let name = typeNames[ObjectIdentifier(R.self)] ?? R.outboxName
        guard types[name] != nil else { throw OutboxError.unregisteredType(name) }
        return name
    }

    /// The largest body an entry may hold: what the journal accepts for a whole record.
    var bodyLimit: Int { journal.options.maximumPayloadSize }

    /// How long enqueueing waits for a `makeURLRequest` that completes later.
    var makeRequestWait: TimeInterval {
        options.attemptTimeout > 0 ? options.attemptTimeout : OutboxOptions().attemptTimeout
    }

    /// The entries for `requests`, each with a new key, not yet stored (id 0).
    func makeEntries<R: OutboxRequest>(
        _ requests: [R], frozen: [FrozenRequest], typeName: String, lane: String?, expiresAt: Date?
    ) throws -> [OutboxEntry] {
        let now = Date()
        let expiry = expiresAt ?? options.expiresAfter.map { now.addingTimeInterval($0) }
        let encoder = OutboxRecord.jsonEncoder
        var entries: [OutboxEntry] = []
        entries.reserveCapacity(requests.count)
        // Index loops: `zip` over `[R]` is not specialized here (`R` is the caller's), and cost more than the rest.
        for index in requests.indices {
            let encoded: Data
            do {
                encoded = try encoder.encode(requests[index])
            } catch {
                throw OutboxError.cannotEncode(requestType: typeName, OutboxVerdict.describe(error))
            }
            entries.append(
                OutboxEntry(
                    id: 0, idempotencyKey: OutboxRecord.newKey(), lane: lane, requestType: typeName, enqueuedAt: now,
                    expiresAt: expiry, attempts: 0, deadLetter: nil, encodedRequest: encoded, frozen: frozen[index]))
        }
        return entries
    }

    /// Gives stored entries their ids and schedules them, each with its request value for its attempts.
    func schedule<R: OutboxRequest>(_ entries: [OutboxEntry], ids: [UInt64], requests: [R]) -> [OutboxEntry] {
        let stored = entries.indices.map { entries[$0].with(id: ids[$0]) }
        let made = requests.indices.map { OutboxLanes.Made(request: requests[$0], urlRequest: nil) }
        let starts: [UInt64] = lock.withLock {
            guard !isClosed else { return [] }
            for index in stored.indices {
                // Stored by this process, hashed while copied.
                if stored[index].files != nil { checkedFiles.insert(stored[index].id) }
                lanes.addPending(stored[index], made: made[index])
                emit(.enqueued, stored[index])
            }
            return schedule()
        }
        starts.forEach(start)
        return stored
    }
}
