import Foundation
import Requests

/// One call's records, encoded, waiting for a group commit. Its `var`s are changed under the journal's lock only,
/// `bytes`, `changes` and `completion` only before the batch is queued.
final class JournalBatch {
    /// What a non-blocking call is told: the ids of the batch's records (those given, for puts), or the error.
    typealias Completion = @Sendable (Result<[UInt64], JournalError>) -> Void

    /// What one record of a batch does.
    struct Change {
        var kind: JournalFormat.Kind
        var id: UInt64
        /// Where its header starts in the batch's bytes.
        var offset: Int
        var length: Int
    }

    /// The records, in the file's format (an array: `Data` costs several times more per append).
    var bytes: [UInt8] = []
    var changes: [Change] = []
    /// Set when the batch is durable or failed.
    var result: Result<Void, JournalError>?
    /// The caller is to lead the next group commit (a blocking call's only).
    var leads = false
    /// Wakes the caller of a blocking call: its result is set, or it is to lead.
    let wakeup = DispatchSemaphore(value: 0)
    /// A non-blocking call's completion; `nil` for a blocking call, whose caller waits on `wakeup`.
    var completion: Completion?

    /// What `completion` is to be told, once `result` is set.
    var outcome: Result<[UInt64], JournalError>? { result.map { result in result.map { changes.map(\.id) } } }

    /// Whether the batch adds records (puts, updates), which need the reserve of zeros after them; removals do not.
    var grows: Bool { changes.first?.kind != .remove }

    /// Records of `kind` for `id` (patched later for puts), one per payload, each payload at most `limit` bytes.
    init(kind: JournalFormat.Kind, id: UInt64, payloads: [Data], limit: Int) throws {
        bytes.reserveCapacity(payloads.reduce(0) { $0 + JournalFormat.recordHeaderSize + $1.count })
        changes.reserveCapacity(payloads.count)
        for (position, payload) in payloads.enumerated() {
            guard payload.count <= min(limit, Int(UInt32.max)) else { throw JournalError.recordTooLarge(size: payload.count, limit: limit) }
            changes.append(Change(kind: kind, id: id, offset: bytes.count, length: payload.count))
            let header = JournalFormat.RecordHeader(
                kind: kind, continues: position < payloads.count - 1, id: id, length: payload.count, payloadCRC: CRC32C.checksum(payload),
                starts: position == 0)
            JournalFormat.appendRecordHeader(header, to: &bytes)
            bytes.append(contentsOf: payload)
        }
    }

    /// Gives the puts the ids from `first` on, in order.
    func assignIDs(from first: UInt64) {
        for position in changes.indices {
            changes[position].id = first + UInt64(position)
            JournalFormat.patch(id: first + UInt64(position), in: &bytes, at: changes[position].offset)
        }
    }

    /// Adds a tombstone for each of `ids`, all one call: the batch's call, continued after its records if it has
    /// some (a put replacing records, see `Journal.replace(_:with:)`), which then exist only with the tombstones.
    func addRemovals(_ ids: [UInt64]) {
        let continuing = !changes.isEmpty
        if continuing, !ids.isEmpty, let last = changes.last { JournalFormat.patch(continues: true, in: &bytes, at: last.offset) }
        for (position, id) in ids.enumerated() {
            changes.append(Change(kind: .remove, id: id, offset: bytes.count, length: 0))
            let header = JournalFormat.RecordHeader(
                kind: .remove, continues: position < ids.count - 1, id: id, length: 0, payloadCRC: 0, starts: position == 0 && !continuing)
            JournalFormat.appendRecordHeader(header, to: &bytes)
        }
    }

    /// The bytes of `group`, one after the other, and where each batch's start in them.
    static func concatenate(_ group: [JournalBatch]) -> (bytes: Data, starts: [Int]) {
        if group.count == 1 { return (Data(group[0].bytes), [0]) }
        var bytes = Data(capacity: group.reduce(0) { $0 + $1.bytes.count })
        var starts: [Int] = []
        starts.reserveCapacity(group.count)
        for batch in group {
            starts.append(bytes.count)
            bytes.append(contentsOf: batch.bytes)
        }
        return (bytes, starts)
    }
}
