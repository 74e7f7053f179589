import Foundation
import Requests

/// The zeros a group commit writes ahead of its records: up to the step of `preallocation` that holds the records,
/// and for a group that adds records (puts, updates), `reserve` bytes more, kept for removals. A later sync of
/// records within the file's size commits no change of size, which costs a third less here
/// (docs/outbox-journal.md); recovery ignores a tail of zeros. When the zeros cannot be written (a full disk), the
/// calls that add records fail with nothing of them written, and removals still go on: entries can leave a full disk.
struct JournalSpace {
    /// Where the group's records start: the end of the file's intact content.
    let start: UInt64
    /// The end of what the file holds, records or zeros.
    var allocated: UInt64
    let options: Journal.Options

    /// The zeros to write before `group`'s records, or `nil` when the file already holds enough.
    func zeros(before group: [JournalBatch]) -> Range<UInt64>? {
        guard options.preallocation > 0 else { return nil }
        let end = start + UInt64(group.reduce(0) { $0 + $1.bytes.count })
        let needed = end + (group.contains(where: \.grows) ? options.reserve : 0)
        guard allocated < needed else { return nil }
        // Over the records' place too (they are written over these zeros): the disk's space for the whole group is
        // taken by this one write, so a full disk fails it before any record is written, and the removals then
        // written go where space is already taken.
        return max(allocated, start)..<Self.roundedUp(needed, to: options.preallocation)
    }

    /// Writes the zeros `group` needs. Returns the error that refuses the calls adding records when their zeros
    /// could not be written; zeros for removals alone are optional (their records may still fit).
    mutating func writeZeros(before group: [JournalBatch], in file: Int32, with fileSystem: JournalFileSystem) -> JournalError? {
        guard let zeros = zeros(before: group) else { return nil }
        do {
            try Self.writeZeros(zeros, in: file, with: fileSystem)
            allocated = zeros.upperBound
            return nil
        } catch {
            return group.contains(where: \.grows) ? JournalError(error) : nil
        }
    }

    /// Writes zeros after `length` up to `length + reserve` where the file holds less (after an open or a
    /// compaction), so that removals have room. Best effort; returns what the file then holds.
    static func keepReserve(in file: Int32, with fileSystem: JournalFileSystem, length: UInt64, allocated: UInt64, options: Journal.Options) -> UInt64 {
        guard options.preallocation > 0, allocated < length + options.reserve else { return allocated }
        guard (try? writeZeros(max(allocated, length)..<length + options.reserve, in: file, with: fileSystem)) != nil else { return allocated }
        return length + options.reserve
    }

    /// Writes zeros over `range`, at most 1 MiB at a time (a large call's place is zeroed too).
    private static func writeZeros(_ range: Range<UInt64>, in file: Int32, with fileSystem: JournalFileSystem) throws {
        let chunk = Data(count: Int(min(UInt64(range.count), 1 << 20)))
        var offset = range.lowerBound
        while offset < range.upperBound {
            let count = Int(min(UInt64(chunk.count), range.upperBound - offset))
            try fileSystem.write(file, count == chunk.count ? chunk : chunk.prefix(count), at: offset)
            offset += UInt64(count)
        }
    }

    /// What `close()` keeps of a file holding `allocated` bytes, `length` of them records: the reserve after them.
    static func kept(length: UInt64, allocated: UInt64, options: Journal.Options) -> UInt64 {
        options.preallocation == 0 ? length : min(allocated, length + options.reserve)
    }

    /// `end` rounded up to a multiple of `step`.
    static func roundedUp(_ end: UInt64, to step: UInt64) -> UInt64 {
        (end + step - 1) / step * step
    }
}
