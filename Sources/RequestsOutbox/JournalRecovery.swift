import Foundation
import Requests

/// Where a live record is in the journal file: the offset of its header, and its payload's length. Sixteen bytes,
/// the journal's whole memory per live record besides its dictionary slot; the payload stays on disk.
struct JournalLocation: Equatable {
    var offset: UInt64
    var length: UInt32
    /// Header and payload.
    var size: UInt64 { UInt64(JournalFormat.recordHeaderSize) + UInt64(length) }
}

/// What the bytes of a journal file hold, read the way `Journal` recovers them: records in file order, a call's
/// records (a batch: those with the `continues` flag and the one after them) applied only when the batch is whole,
/// a damaged stretch skipped with the batch it fell in, up to the next intact record that starts a batch, and
/// whatever follows the last intact batch cut off, or kept without an event when it is zeros only (the space written
/// ahead).
/// Never traps, whatever the bytes.
struct JournalScan: Equatable {
    /// The live records.
    var index: [UInt64: JournalLocation] = [:]
    /// The floor of the file header (1 if the header is damaged).
    var floor: UInt64 = 1
    /// The file id of the file header (0 if the header is damaged, or written before file ids).
    var fileID: UInt32 = 0
    /// The highest id of any intact record, removals and updates included (0 if none).
    var highestID: UInt64 = 0
    /// Where the file must end: after the last whole batch, or 0 if the file is too short for a header.
    var validLength: UInt64 = 0
    /// The end of the last whole batch read, or of the header if it is intact and no batch follows; 0 if neither.
    /// Unlike `validLength`, never counts bytes that hold no record (after a damaged header): how far the file's
    /// content demonstrably goes, which the checkpoint's durable length is compared with.
    var recordsEnd: UInt64 = 0
    /// The header is missing (a file shorter than a header) or damaged: the file must be rewritten.
    var needsNewHeader = false
    /// A damaged stretch was skipped: the file should be rewritten (compacted) without it.
    var skippedDamage = false
    /// Whether what follows the last whole batch is zeros only (space written ahead): kept, not cut off.
    var zeroTail = false
    /// What was found, in file order, for the journal's event handler.
    var events: [JournalEvent] = []
    /// The version of a well-formed header of an unknown format, which must not be touched.
    var unsupportedVersion: UInt32?
    /// How many bytes of records went through CRC-32C: the file's size once if it is undamaged, and a small
    /// multiple of it at most whatever the bytes (see `JournalFormat.RecordReader`).
    var checksummedBytes = 0

    /// The sum of the live records' sizes.
    var liveBytes: UInt64 { index.values.reduce(0) { $0 + $1.size } }

    /// Reads `bytes`, the whole file; `file` names it in events.
    init(_ bytes: UnsafeRawBufferPointer, file: String) {
        let count = bytes.count
        guard count >= JournalFormat.fileHeaderSize else {
            needsNewHeader = true
            if count > 0 { events.append(.discardedTornTail(file: file, offset: 0)) }
            return
        }
        var position = JournalFormat.fileHeaderSize
        // Taking records again after damage: only at one that starts a call.
        var resuming = false
        var anyRecordStarts = false
        var reader = JournalFormat.RecordReader(bytes)
        defer { checksummedBytes = reader.checksummedBytes }
        switch JournalFormat.parseFileHeader(bytes) {
        case let .valid(floor, version, fileID):
            self.floor = floor
            self.fileID = fileID
            recordsEnd = UInt64(position)
            // Format 1 did not mark the first record of a call: after damage, any intact record is taken.
            anyRecordStarts = version == 1
        case let .unsupported(version):
            unsupportedVersion = version
            return
        case .corrupt:
            needsNewHeader = true
            events.append(.skippedCorruptRecord(file: file, offset: 0))
            position = reader.nextRecord(from: 0) ?? count
            resuming = true
        }
        validLength = UInt64(position)
        var removed = Set<UInt64>()
        var batch: [(header: JournalFormat.RecordHeader, offset: Int)] = []
        while position < count {
            if let header = reader.record(at: position) {
                let starts = header.starts || anyRecordStarts
                // After damage, the rest of a damaged call: skipped with it.
                if resuming, !starts {
                    position += header.size
                    continue
                }
                resuming = false
                // A call that starts before the last one ended: that one lost its end to damage.
                if starts, !anyRecordStarts, let first = batch.first {
                    events.append(.skippedCorruptRecord(file: file, offset: UInt64(first.offset)))
                    skippedDamage = true
                    batch.removeAll()
                }
                batch.append((header, position))
                position += header.size
                if !header.continues {
                    for (header, offset) in batch { apply(header, at: offset, removed: &removed) }
                    batch.removeAll()
                    validLength = UInt64(position)
                    recordsEnd = validLength
                }
            } else if let next = reader.nextRecord(from: position + 1) {
                events.append(.skippedCorruptRecord(file: file, offset: UInt64(position)))
                skippedDamage = true
                // The call the damage fell in exists only as a whole: what was read of it is dropped, and what
                // follows the damage is taken from the next record that starts a call.
                batch.removeAll()
                resuming = true
                position = next
            } else {
                break
            }
        }
        // Anything after the last whole batch: an unfinished batch, a torn record, or bytes that are no record; but
        // zeros only are the space the journal writes ahead (`Journal.Options.preallocation`), not damage.
        if validLength < UInt64(count) {
            zeroTail = UnsafeRawBufferPointer(rebasing: bytes[Int(validLength)...]).allSatisfy { $0 == 0 }
            if !zeroTail { events.append(.discardedTornTail(file: file, offset: validLength)) }
        }
    }

    private mutating func apply(_ header: JournalFormat.RecordHeader, at offset: Int, removed: inout Set<UInt64>) {
        highestID = max(highestID, header.id)
        let location = JournalLocation(offset: UInt64(offset), length: UInt32(header.length))
        switch header.kind {
        case .put:
            index[header.id] = location
        case .update:
            // An update of a removed record lost a race with its removal. One whose put was damaged still holds
            // the record's whole current payload: it brings the record back.
            if !removed.contains(header.id) { index[header.id] = location }
        case .remove:
            index[header.id] = nil
            removed.insert(header.id)
        }
    }
}

extension Journal {
    /// What opening found, and the open descriptors.
    struct Opened {
        var path: String
        var directory: Int32
        var lock: Int32
        var file: Int32
        var checkpoint: JournalCheckpoint
        var scan: JournalScan
        var records: [JournalRecord]
        var nextID: UInt64
        var length: UInt64
        /// The file's size: `length`, or more when a tail of zeros was kept.
        var allocated: UInt64
        var rewrite: Bool
    }

    /// Opens the folder, takes the lock, reads the checkpoint and the journal file, repairs the file (a header for a
    /// new file, a torn tail cut off), judges it against the checkpoint, writes the new checkpoint; tells what it
    /// found. On failure closes what it opened.
    static func open(_ directory: URL, fileSystem: JournalFileSystem, events: (@Sendable (JournalEvent) -> Void)?) throws -> Opened {
        let journalURL = directory.appendingPathComponent(journalName)
        let checkpointURL = directory.appendingPathComponent(JournalCheckpoint.name)
        let folder = try fileSystem.openDirectory(directory)
        var descriptors = [folder]
        do {
            let lock = try fileSystem.openFile(lockName, in: folder, at: directory.appendingPathComponent(lockName), exclusive: false)
            descriptors.append(lock)
            guard try fileSystem.lock(lock) else { throw JournalError.lockedByAnotherProcess(directory) }
            // The folder too: a lock file removed while its lock is held would let a second journal create and lock
            // a new one, and two writers at their own offsets overwrite each other's records.
            guard try fileSystem.lock(folder) else { throw JournalError.lockedByAnotherProcess(directory) }
            try fileSystem.removeFile(JournalCompaction.temporaryName, in: folder)
            // The checkpoint, checked like every file (a link, a folder, another user's file are refused). Only its
            // first bytes are read, whatever its size.
            let state = try fileSystem.openFile(JournalCheckpoint.name, in: folder, at: checkpointURL, exclusive: false)
            descriptors.append(state)
            let stateSize = try fileSystem.size(of: state)
            let stored = JournalCheckpoint.read(try fileSystem.read(state, at: 0, count: JournalCheckpoint.fileSize))
            // Created exclusively first: whether the file existed, which a checkpoint may say it did.
            let created = try? fileSystem.openFile(journalName, in: folder, at: journalURL, exclusive: true)
            let file = try created ?? fileSystem.openFile(journalName, in: folder, at: journalURL, exclusive: false)
            descriptors.append(file)
            let size = try fileSystem.size(of: file)
            let bytes = try fileSystem.read(file, at: 0, count: Int(size))
            let scan = bytes.withUnsafeBytes { JournalScan($0, file: journalURL.path) }
            if let version = scan.unsupportedVersion { throw JournalError.unsupportedVersion(journalURL, version: version) }
            let lost = bytes.withUnsafeBytes { JournalCheckpoint.judge(stored, existed: created == nil, bytes: $0, scan: scan) }
            let records = scan.index.sorted { $0.key < $1.key }.map { id, location in
                let start = Int(location.offset) + JournalFormat.recordHeaderSize
                return JournalRecord(id: id, payload: bytes.subdata(in: start..<start + Int(location.length)))
            }
            // Ids continue after the checkpoint's highest too: those of a lost file, or of a damaged header's floor,
            // are not given again.
            var highestAtCheckpoint: UInt64 = 0
            var recordsAtCheckpoint: Int?
            if case let .valid(checkpoint, _) = stored {
                highestAtCheckpoint = checkpoint.highestID
                recordsAtCheckpoint = Int(clamping: checkpoint.liveRecords)
            }
            let nextID = max(scan.floor, scan.highestID + 1, 1, highestAtCheckpoint &+ 1)
            var length = scan.validLength
            var identity: JournalFileIdentity? = scan.needsNewHeader ? nil : JournalFileIdentity(floor: scan.floor, fileID: scan.fileID)
            if scan.validLength < JournalFormat.fileHeaderSize {
                // A new file, or one too short for a header: it holds nothing, and gets a header.
                let fresh = JournalFileIdentity.new(floor: nextID, replacing: nil)
                try fileSystem.truncate(file, to: 0)
                try fileSystem.write(file, JournalFormat.fileHeader(floor: fresh.floor, fileID: fresh.fileID), at: 0)
                length = UInt64(JournalFormat.fileHeaderSize)
                identity = fresh
            } else if scan.validLength < size, !scan.zeroTail {
                try fileSystem.truncate(file, to: scan.validLength)
            }
            // What was recovered, and the file's name, are durable before anything is reported or acknowledged: a
            // process that died after creating the file, or after writing without syncing, left them in doubt.
            try fileSystem.syncData(file)
            try fileSystem.syncDirectory(folder)
            // Then the checkpoint says so: the journal file's name and content are durable by now.
            let checkpoint = try JournalCheckpoint(
                fileSystem: fileSystem, descriptor: state, stored: stored, size: stateSize, file: identity, length: length,
                liveRecords: records.count, highestID: nextID - 1)
            var found = scan.events
            if let lost {
                // A file that is no journal was not damaged: the header "skipped" or "torn" is the replacement.
                if lost == .replaced {
                    found.removeAll { $0 == .skippedCorruptRecord(file: journalURL.path, offset: 0) || $0 == .discardedTornTail(file: journalURL.path, offset: 0) }
                }
                let path = lost == .checkpointDamaged ? checkpointURL.path : journalURL.path
                found.insert(.lost(file: path, kind: lost, recordsAtCheckpoint: recordsAtCheckpoint, recordsFound: records.count), at: 0)
            }
            for event in found { events?(event) }
            let rewrite = scan.skippedDamage || (scan.needsNewHeader && scan.validLength >= JournalFormat.fileHeaderSize)
            return Opened(
                path: journalURL.path, directory: folder, lock: lock, file: file, checkpoint: checkpoint, scan: scan, records: records,
                nextID: nextID, length: length, allocated: length == scan.validLength && scan.zeroTail ? size : length, rewrite: rewrite)
        } catch {
            for descriptor in descriptors.reversed() { fileSystem.close(descriptor) }
            throw error
        }
    }
}
