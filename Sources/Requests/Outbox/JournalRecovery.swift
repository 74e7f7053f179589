import Foundation

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
/// a damaged stretch skipped up to the next intact record, and whatever follows the last intact batch cut off.
/// Never traps, whatever the bytes.
struct JournalScan: Equatable {
    /// The live records.
    var index: [UInt64: JournalLocation] = [:]
    /// The floor of the file header (1 if the header is damaged).
    var floor: UInt64 = 1
    /// The highest id of any intact record, removals and updates included (0 if none).
    var highestID: UInt64 = 0
    /// Where the file must end: after the last whole batch, or 0 if the file is too short for a header.
    var validLength: UInt64 = 0
    /// The header is missing (a file shorter than a header) or damaged: the file must be rewritten.
    var needsNewHeader = false
    /// A damaged stretch was skipped: the file should be rewritten (compacted) without it.
    var skippedDamage = false
    /// What was found, in file order, for the journal's event handler.
    var events: [JournalEvent] = []
    /// The version of a well-formed header of an unknown format, which must not be touched.
    var unsupportedVersion: UInt32?

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
        switch JournalFormat.parseFileHeader(bytes) {
        case let .valid(floor): self.floor = floor
        case let .unsupported(version):
            unsupportedVersion = version
            return
        case .corrupt:
            needsNewHeader = true
            events.append(.skippedCorruptRecord(file: file, offset: 0))
            position = JournalFormat.nextRecord(bytes, from: 0) ?? count
        }
        validLength = UInt64(position)
        var removed = Set<UInt64>()
        var batch: [(header: JournalFormat.RecordHeader, offset: Int)] = []
        while position < count {
            if let header = JournalFormat.parseRecord(bytes, at: position) {
                batch.append((header, position))
                position += header.size
                if !header.continues {
                    for (header, offset) in batch { apply(header, at: offset, removed: &removed) }
                    batch.removeAll()
                    validLength = UInt64(position)
                }
            } else if let next = JournalFormat.nextRecord(bytes, from: position + 1) {
                events.append(.skippedCorruptRecord(file: file, offset: UInt64(position)))
                skippedDamage = true
                position = next
            } else {
                break
            }
        }
        // Anything after the last whole batch: an unfinished batch, a torn record, or bytes that are no record.
        if validLength < UInt64(count) {
            events.append(.discardedTornTail(file: file, offset: validLength))
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
