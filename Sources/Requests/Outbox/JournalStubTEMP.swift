import Foundation

// TEMPORARY stand-in for the helper's Journal (same interface); deleted when s19-journal merges.
struct JournalRecord: Sendable, Equatable {
    let id: UInt64
    let payload: Data
}

enum JournalEvent: Sendable, Equatable {
    case skippedCorruptRecord(file: String, offset: UInt64)
    case discardedTornTail(file: String, offset: UInt64)
    case compacted(bytesBefore: UInt64, bytesAfter: UInt64)
}

enum JournalError: Error, Equatable {
    case lockedByAnotherProcess(URL)
    case notADirectory(URL), notOwnedByUser(URL), isSymbolicLink(URL)
    case recordTooLarge(size: Int, limit: Int)
    case writeFailed(errno: Int32, operation: String)
    case closed
}

final class Journal: @unchecked Sendable {
    nonisolated(unsafe) static var stores: [String: [UInt64: Data]] = [:]
    nonisolated(unsafe) static var open: Set<String> = []
    static let storesLock = NSLock()
    let key: String
    let lock = NSLock()
    var live: [UInt64: Data]
    var next: UInt64
    var closed = false
    let recovered: [JournalRecord]

    init(directory: URL, events: (@Sendable (JournalEvent) -> Void)? = nil) throws {
        let key = directory.standardizedFileURL.path
        self.key = key
        let (records, busy): ([UInt64: Data], Bool) = Self.storesLock.withLock {
            if Self.open.contains(key) { return ([:], true) }
            Self.open.insert(key)
            return (Self.stores[key] ?? [:], false)
        }
        if busy { throw JournalError.lockedByAnotherProcess(directory) }
        live = records
        next = (records.keys.max() ?? 0) + 1
        recovered = records.sorted { $0.key < $1.key }.map { JournalRecord(id: $0.key, payload: $0.value) }
    }

    func append(_ payloads: [Data]) throws -> [UInt64] {
        try lock.withLock {
            if closed { throw JournalError.closed }
            var ids: [UInt64] = []
            for payload in payloads {
                live[next] = payload
                ids.append(next)
                next += 1
            }
            save()
            return ids
        }
    }

    func update(_ id: UInt64, payload: Data) throws {
        try lock.withLock {
            if closed { throw JournalError.closed }
            live[id] = payload
            save()
        }
    }

    func remove(_ ids: [UInt64]) throws {
        try lock.withLock {
            if closed { throw JournalError.closed }
            ids.forEach { live[$0] = nil }
            save()
        }
    }

    var liveCount: Int { lock.withLock { live.count } }

    func close() {
        lock.withLock {
            guard !closed else { return }
            closed = true
            _ = Self.storesLock.withLock { Self.open.remove(key) }
        }
    }

    private func save() {
        let copy = live
        Self.storesLock.withLock { Self.stores[key] = copy }
    }
}
