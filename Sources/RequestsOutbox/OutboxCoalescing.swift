#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// Coalescing: an entry enqueued with a key replaces the entries with the same key that are not in flight, so that
/// the latest draft wins. The new entry and the removal of those it replaces are one call of the journal: after a
/// crash the folder holds either the old entries or the new one, never both and never neither.
extension Outbox {
    /// Stores `request` durably in place of the entries enqueued with the same coalescing `key` that wait to be sent
    /// (pending, in backoff, or parked), and schedules it; returns once it is on disk. Each entry it replaces leaves
    /// with ``OutboxChange/Kind/dropped(_:)`` ``OutboxDropReason/replaced(by:)``, and its files are removed. An entry
    /// with the key whose attempt is in flight is not replaced: the new entry waits behind it in its lane, so the
    /// server never gets an older draft after a newer one. So keep the entries of one key in one lane: by default
    /// (`lane` `nil`) the lane is the key.
    ///
    /// A form saved as the user types is the case: each save is stored, at most one attempt is in flight, and the
    /// next one sends the latest save.
    ///
    /// - Parameters:
    ///   - request: the request, stored as its JSON and as the URL request it makes.
    ///   - lane: the entry's lane; `nil`: the lane named `key`.
    ///   - expiresAt: the entry is dropped unsent after this date (default: ``OutboxOptions/expiresAfter`` from
    ///     now, or never).
    ///   - key: the coalescing key, kept as the entry's ``OutboxEntry/coalescingKey``.
    /// - Returns: the entry.
    /// - Throws: ``OutboxError``, as ``enqueue(_:lane:expiresAt:)-a7f9`` does. Nothing is stored or replaced then.
    @discardableResult
    public func enqueue<R: OutboxRequest>(_ request: R, lane: String? = nil, expiresAt: Date? = nil, replacing key: String) throws -> OutboxEntry {
        try enqueueOne(request, lane: lane, expiresAt: expiresAt, files: nil, replacing: key)
    }

    /// Stores `request` in place of the waiting entries with the coalescing `key`, like
    /// ``enqueue(_:lane:expiresAt:replacing:)-1fzf9``, but suspends instead of blocking a thread.
    @discardableResult
    public func enqueue<R: OutboxRequest>(
        _ request: R, lane: String? = nil, expiresAt: Date? = nil, replacing key: String
    ) async throws -> OutboxEntry {
        try await enqueueOne(request, lane: lane, expiresAt: expiresAt, files: nil, replacing: key)
    }

    /// Writes `entry` and the removal of the entries it replaces as one journal call, under the lock (so that none
    /// of them starts meanwhile), then settles those and schedules it.
    func replace<R: OutboxRequest>(_ key: String, with entry: OutboxEntry, request: R) throws -> OutboxEntry {
        let (stored, replaced, starts): (OutboxEntry, [UInt64], [UInt64]) = try lock.withLock {
            guard !isClosed else { throw OutboxError.closed }
            let replaced = lanes.waiting(withKey: key)
            let id: UInt64
            do {
                id = try journal.replace(replaced, with: OutboxRecord.encode(entry))
            } catch {
                throw Self.outboxError(error, directory: directory)
            }
            let stored = entry.with(id: id)
            for old in replaced { settle(old, .dropped(.replaced(by: id))) }
            if stored.files != nil { checkedFiles.insert(id) }
            lanes.addPending(stored, made: OutboxLanes.Made(request: request, urlRequest: nil))
            emit(.enqueued, stored)
            return (stored, replaced, schedule())
        }
        // Their removal is durable with the new entry.
        removeFiles(of: replaced)
        starts.forEach(start)
        return stored
    }
}
