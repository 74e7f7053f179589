#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// Enqueueing an entry with files: the request is made and fixed as usual, its files are copied into the outbox's
/// folder and synced, then the entry is stored with one group commit, then scheduled. A failure at any step leaves
/// nothing: no entry, no file.
extension Outbox {
    /// Stores `request` durably with `files`, and schedules it; returns once the entry and its files are on disk.
    /// Each file is copied into the outbox's folder first (a clone where the file system makes one; else a copy,
    /// synced), so the app may delete or change its own file at once. Every attempt sends the copies, streamed from
    /// disk, with the same bytes; they are removed when the entry leaves (sent, dropped, expired or replaced). The
    /// calling thread waits for the copies and the sync: from the main thread, use the asynchronous form.
    ///
    /// - Parameters:
    ///   - request: the request, stored as its JSON and as the URL request it makes.
    ///   - lane: entries with the same lane are sent one at a time, in enqueue order; `nil`: no order (with `key`:
    ///     the lane named `key`).
    ///   - expiresAt: the entry is dropped unsent after this date (default: ``OutboxOptions/expiresAfter`` from
    ///     now, or never).
    ///   - files: the files, and whether they are the body or parts of a multipart body.
    ///   - key: a coalescing key: the entry replaces those with this key that are not in flight (see
    ///     ``enqueue(_:lane:expiresAt:replacing:)-1fzf9``); `nil`: none.
    /// - Returns: the entry, with its ``OutboxEntry/attachments``.
    /// - Throws: ``OutboxError``: as ``enqueue(_:lane:expiresAt:)-a7f9`` does, and
    ///   ``OutboxError/attachmentTooLarge(size:limit:)``, ``OutboxError/attachmentsFull(size:limit:)`` or
    ///   ``OutboxError/unusableAttachment(_:_:)`` for the files. Nothing is stored then.
    @discardableResult
    public func enqueue<R: OutboxRequest>(
        _ request: R, lane: String? = nil, expiresAt: Date? = nil, files: OutboxFiles, replacing key: String? = nil
    ) throws -> OutboxEntry {
        try enqueueOne(request, lane: lane, expiresAt: expiresAt, files: files, replacing: key)
    }

    /// Stores `request` durably with `files`, like ``enqueue(_:lane:expiresAt:files:replacing:)-2790c``, but
    /// suspends instead of blocking a thread while the request is made, the files are copied and the sync runs.
    @discardableResult
    public func enqueue<R: OutboxRequest>(
        _ request: R, lane: String? = nil, expiresAt: Date? = nil, files: OutboxFiles, replacing key: String? = nil
    ) async throws -> OutboxEntry {
        try await enqueueOne(request, lane: lane, expiresAt: expiresAt, files: files, replacing: key)
    }

    /// Makes and fixes the request, then stores it (``store(_:frozen:typeName:lane:expiresAt:files:replacing:)``).
    func enqueueOne<R: OutboxRequest>(_ request: R, lane: String?, expiresAt: Date?, files: OutboxFiles?, replacing key: String?) throws -> OutboxEntry {
        let typeName = try registeredName(of: R.self)
        let frozen: FrozenRequest
        do {
            frozen = try FrozenRequest.make(request, bodyLimit: bodyLimit, wait: makeRequestWait)
        } catch {
            throw OutboxError.cannotEncode(requestType: typeName, FrozenRequest.describe(error))
        }
        return try store(request, frozen: frozen, typeName: typeName, lane: lane, expiresAt: expiresAt, files: files, replacing: key)
    }

    /// The same, suspending: the request is made without blocking, and the copies and the sync run on another
    /// thread.
    func enqueueOne<R: OutboxRequest>(
        _ request: R, lane: String?, expiresAt: Date?, files: OutboxFiles?, replacing key: String?
    ) async throws -> OutboxEntry {
        let typeName = try registeredName(of: R.self)
        let frozen: FrozenRequest
        do {
            frozen = try await FrozenRequest.make(request, bodyLimit: bodyLimit, wait: makeRequestWait)
        } catch {
            throw OutboxError.cannotEncode(requestType: typeName, FrozenRequest.describe(error))
        }
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(
                    with: Result {
                        try self.store(request, frozen: frozen, typeName: typeName, lane: lane, expiresAt: expiresAt, files: files, replacing: key)
                    })
            }
        }
    }

    /// Copies the files, then stores and schedules the entry (replacing the entries with its coalescing key).
    private func store<R: OutboxRequest>(
        _ request: R, frozen: FrozenRequest, typeName: String, lane: String?, expiresAt: Date?, files: OutboxFiles?, replacing key: String?
    ) throws -> OutboxEntry {
        if lock.withLock({ isClosed }) { throw OutboxError.closed }
        var frozen = frozen
        let stored = try files.map { try store($0, frozen: &frozen) }
        do {
            var entries = try makeEntries([request], frozen: [frozen], typeName: typeName, lane: lane ?? key, expiresAt: expiresAt)
            entries[0].files = stored
            entries[0].coalescingKey = key
            if let key { return try replace(key, with: entries[0], request: request) }
            let ids = try journal.append(entries.map(OutboxRecord.encode))
            return schedule(entries, ids: ids, requests: [request])[0]
        } catch {
            if let stored { discard(stored) }
            if let error = error as? OutboxError { throw error }
            throw Self.outboxError(error, directory: directory)
        }
    }
}
