import Foundation

/// Rewrites a journal file with only its live records, so that its size stays proportional to what is live.
///
/// The steps, and why a crash at any of them loses nothing:
/// 1. remove a leftover `journal.compacting` and create it anew (`0600`): the journal file is untouched;
/// 2. write a header (whose id floor is the next id to give) and each live record, read back from the journal
///    file and checked, as a put of its own: still untouched;
/// 3. `fdatasync` the new file: still untouched; a crash leaves a leftover, removed at the next open;
/// 4. `rename` it over the journal file: atomic; after a crash the name holds the old file or the new one, both
///    complete (the new one is synced);
/// 5. `fsync` the folder (the caller's step): the rename is durable. Until it is, the journal writes nothing more.
enum JournalCompaction {
    static let temporaryName = "journal.compacting"

    /// The new file, open, in place of the old one.
    struct Outcome {
        var file: Int32
        var index: [UInt64: JournalLocation]
        var length: UInt64
        /// Offsets in the old file of live records that were found damaged, and left out.
        var damaged: [UInt64]
    }

    /// Writes `live` (records of `old`, in id order) to a new file and renames it to `journalName`; steps 1 to 4
    /// above. On failure, before the rename, removes the new file and throws, leaving the journal as it was.
    static func run(
        fileSystem: JournalFileSystem, directory: Int32, directoryURL: URL, journalName: String,
        old: Int32, live: [(id: UInt64, location: JournalLocation)], floor: UInt64
    ) throws -> Outcome {
        let url = directoryURL.appendingPathComponent(temporaryName)
        try fileSystem.removeFile(temporaryName, in: directory)
        let file = try fileSystem.openFile(temporaryName, in: directory, at: url, exclusive: true)
        do {
            var outcome = Outcome(file: file, index: Dictionary(minimumCapacity: live.count), length: 0, damaged: [])
            var buffer = JournalFormat.fileHeader(floor: floor)
            for (id, location) in live {
                let record = try fileSystem.read(old, at: location.offset, count: Int(location.size))
                let parsed = record.withUnsafeBytes { JournalFormat.parseRecord($0, at: 0) }
                guard var header = parsed, header.id == id, header.length == Int(location.length) else {
                    outcome.damaged.append(location.offset)
                    continue
                }
                header.kind = .put
                header.continues = false
                header.starts = true
                outcome.index[id] = JournalLocation(offset: outcome.length + UInt64(buffer.count), length: location.length)
                JournalFormat.appendRecordHeader(header, to: &buffer)
                buffer.append(record.dropFirst(JournalFormat.recordHeaderSize))
                if buffer.count >= 1 << 20 {
                    try fileSystem.write(file, buffer, at: outcome.length)
                    outcome.length += UInt64(buffer.count)
                    buffer.removeAll(keepingCapacity: true)
                }
            }
            try fileSystem.write(file, buffer, at: outcome.length)
            outcome.length += UInt64(buffer.count)
            try fileSystem.syncData(file)
            try fileSystem.rename(temporaryName, to: journalName, in: directory)
            return outcome
        } catch {
            fileSystem.close(file)
            try? fileSystem.removeFile(temporaryName, in: directory)
            throw error
        }
    }
}
