import Foundation
import Requests

/// Rewrites a journal file with only its live records, so that its size stays proportional to what is live.
///
/// The steps, and why a crash at any of them loses nothing:
/// 1. remove a leftover `journal.compacting` and create it anew (`0600`): the journal file is untouched;
/// 2. write a header (whose id floor is the next id to give) and each live record, read back from the journal
///    file and checked, as a put of its own: still untouched;
/// 3. sync the new file (`fdatasync`; as `Options.sync` asks on Apple systems): still untouched; a crash leaves a
///    leftover, removed at the next open;
/// 3b. write the checkpoint naming both files, and sync it (the caller's `beforeRename`): after a crash from here
///    on, whichever file the name holds is one the checkpoint knows, so neither is taken for a replaced journal;
/// 4. `rename` it over the journal file: atomic; after a crash the name holds the old file or the new one, both
///    complete (the new one is synced);
/// 5. `fsync` the folder (the caller's step): the rename is durable. Until it is, the journal writes nothing more,
///    and the checkpoint names the new file alone only once it is.
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

    /// Writes `live` (records of `old`, in id order) to a new file of identity `identity` and renames it to
    /// `journalName`; steps 1 to 4 above, `beforeRename` (given the new file's length) between 3 and 4. On failure,
    /// before the rename, removes the new file and throws, leaving the journal as it was.
    static func run(
        fileSystem: JournalFileSystem, directory: Int32, directoryURL: URL, journalName: String,
        old: Int32, live: [(id: UInt64, location: JournalLocation)], identity: JournalFileIdentity, sync: JournalSync,
        beforeRename: (UInt64) throws -> Void
    ) throws -> Outcome {
        let url = directoryURL.appendingPathComponent(temporaryName)
        try fileSystem.removeFile(temporaryName, in: directory)
        let file = try fileSystem.openFile(temporaryName, in: directory, at: url, exclusive: true)
        do {
            var outcome = Outcome(file: file, index: Dictionary(minimumCapacity: live.count), length: 0, damaged: [])
            var buffer = JournalFormat.fileHeader(floor: identity.floor, fileID: identity.fileID)
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
            try fileSystem.syncData(file, mode: sync)
            try beforeRename(outcome.length)
            try fileSystem.rename(temporaryName, to: journalName, in: directory)
            return outcome
        } catch {
            fileSystem.close(file)
            try? fileSystem.removeFile(temporaryName, in: directory)
            throw error
        }
    }
}

/// When and how the journal compacts: the state it reads and changes is the journal's, behind its lock.
extension Journal {
    /// Whether the dead bytes exceed the live ones and the minimum. Under the lock.
    func shouldCompact() -> Bool {
        let header = UInt64(JournalFormat.fileHeaderSize)
        guard length >= header + liveBytes, length >= nextCompactionLength else { return false }
        let dead = length - header - liveBytes
        return dead > liveBytes && dead >= options.compactionMinimum
    }

    /// Rewrites the file with the live records (`JournalCompaction`) and returns what to tell. Runs as the leader or
    /// during `init`, without the lock: no other thread uses the file or changes the index meanwhile. A failure
    /// leaves the journal as it was; compaction is tried again once the file has grown by `compactionMinimum`.
    func compact() -> [JournalEvent] {
        let (live, floor, old, before) = lock.withLock {
            (index.sorted { $0.key < $1.key }.map { (id: $0.key, location: $0.value) }, nextID, file, length)
        }
        let identity = JournalFileIdentity.new(floor: floor, replacing: checkpoint.file)
        let outcome: JournalCompaction.Outcome
        do {
            outcome = try JournalCompaction.run(
                fileSystem: fileSystem, directory: directoryFile, directoryURL: directory, journalName: Self.journalName,
                old: old, live: live, identity: identity, sync: options.sync
            ) { newLength in
                // Either file may hold the name after a crash from here on: the synced checkpoint names both.
                try checkpoint.write(
                    JournalCheckpointState(
                        file: .init(identity: checkpoint.file, length: before), replacement: .init(identity: identity, length: newLength),
                        liveRecords: UInt64(live.count), highestID: checkpoint.highestID),
                    sync: true)
            }
        } catch {
            lock.withLock { nextCompactionLength = before + options.compactionMinimum }
            return []
        }
        // Renamed: the new file is the journal from now on. Until the rename is durable, no record is written (the
        // reserve's zeros are), and the checkpoint still names the old file too.
        let synced = (try? fileSystem.syncDirectory(directoryFile)) != nil
        checkpoint.file = identity
        if synced {
            try? checkpoint.write(
                JournalCheckpointState(
                    file: .init(identity: identity, length: outcome.length), liveRecords: UInt64(outcome.index.count), highestID: checkpoint.highestID),
                sync: true)
        }
        fileSystem.close(old)
        let reserved = JournalSpace.keepReserve(in: outcome.file, with: fileSystem, length: outcome.length, allocated: outcome.length, options: options)
        lock.withLock {
            file = outcome.file
            index = outcome.index
            liveBytes = outcome.index.values.reduce(0) { $0 + $1.size }
            length = outcome.length
            allocated = reserved
            folderUnsynced = !synced
            nextCompactionLength = 0
        }
        return outcome.damaged.map { .skippedCorruptRecord(file: journalPath, offset: $0) } + [.compacted(bytesBefore: before, bytesAfter: outcome.length)]
    }
}
