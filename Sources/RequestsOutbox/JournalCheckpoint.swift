import Foundation
import Requests

/// Which journal file a checkpoint speaks of: its header's id floor and file id. A compaction's new file has a new
/// random file id (and its floor is the next id), so the identity changes whenever the file is replaced.
struct JournalFileIdentity: Equatable, Sendable {
    var floor: UInt64
    var fileID: UInt32

    /// A new file's identity: `floor`, and a random file id other than 0 (the id of files written before file ids)
    /// and other than `previous`'s.
    static func new(floor: UInt64, replacing previous: JournalFileIdentity?) -> JournalFileIdentity {
        var identity = JournalFileIdentity(floor: floor, fileID: .random(in: 1...UInt32.max))
        while identity == previous { identity.fileID = .random(in: 1...UInt32.max) }
        return identity
    }
}

/// How far the journal got, as one slot of the checkpoint file holds it: a lower bound of what the journal file
/// durably held when the slot was written.
struct JournalCheckpointState: Equatable, Sendable {
    /// A journal file, and the length of its content known durable.
    struct File: Equatable, Sendable {
        /// `nil`: the file's header is damaged, so its identity is unknown (the journal went on with it).
        var identity: JournalFileIdentity?
        var length: UInt64
    }

    /// Grows with each slot written: the newest valid slot is the checkpoint.
    var sequence: UInt64 = 0
    /// The journal file.
    var file: File
    /// While a compaction's rename may not be durable: the new file, which the name may hold after a crash.
    var replacement: File?
    /// Live records in the journal file.
    var liveRecords: UInt64
    /// The highest id of any record durably written, or below the floor of a durable file header: recovery must find
    /// at least this (it gives ids after it).
    var highestID: UInt64
}

/// What a checkpoint file holds.
enum JournalStoredCheckpoint: Equatable {
    /// No checkpoint: the file is missing, empty, or zeros only (a crash while it was first written). A folder of an
    /// earlier version, or a new one.
    case none
    /// Neither slot is valid: how far the journal got is not known.
    case damaged
    /// The newest valid slot, and where it is (0 or 1).
    case valid(JournalCheckpointState, slot: Int)
}

/// The checkpoint file `journal.state`: how far the journal got, so that a journal file that was deleted, emptied,
/// replaced or shortened is reported rather than taken for a new one (docs/outbox-journal.md).
///
/// The file holds two slots of `slotSize` bytes, at offsets 0 and 512 (each in a sector of its own), each with a
/// sequence number and a CRC-32C; the newest valid slot is the checkpoint. One slot is the last synced one; every
/// write goes to the other slot, so a torn write never destroys the synced slot:
/// - after each group commit's sync, one `pwrite` of the other slot, with no sync of its own (after a crash it holds
///   that state or an older one, both lower bounds of what the journal durably held);
/// - at open and at compaction, where the journal syncs anyway, a write and an `fdatasync`: the written slot becomes
///   the synced one.
///
/// Used by one thread at a time: during opening, then by the journal's leader (group commits, compaction).
final class JournalCheckpoint: @unchecked Sendable {
    static let name = "journal.state"
    static let magic: [UInt8] = Array("RQJSTATE".utf8)
    static let version: UInt32 = 1
    static let slotSize = 96
    static let slotOffsets: [UInt64] = [0, 512]
    static let fileSize = 512 + slotSize
    /// Above any id a journal gives: a slot with a higher `highestID` is not valid.
    static let maximumID: UInt64 = 1 << 62

    let fileSystem: JournalFileSystem
    let descriptor: Int32
    /// The slot whose content is synced; writes go to the other one.
    private var syncedSlot: Int
    private var sequence: UInt64
    /// The journal file's identity now (`nil`: its header is damaged).
    var file: JournalFileIdentity?
    /// The highest id durably written (see `JournalCheckpointState.highestID`).
    var highestID: UInt64

    /// Writes the checkpoint of a journal just opened, and syncs it: `stored` is what the file held (`size` bytes).
    /// Throws if it cannot be written.
    init(
        fileSystem: JournalFileSystem, descriptor: Int32, stored: JournalStoredCheckpoint, size: UInt64,
        file: JournalFileIdentity?, length: UInt64, liveRecords: Int, highestID: UInt64
    ) throws {
        self.fileSystem = fileSystem
        self.descriptor = descriptor
        self.file = file
        self.highestID = highestID
        let state = JournalCheckpointState(file: .init(identity: file, length: length), liveRecords: UInt64(liveRecords), highestID: highestID)
        if case let .valid(found, slot) = stored {
            // The newest slot may be a write that a process which died left unsynced: synced first, so that it is the
            // synced one before the other is overwritten. The file keeps its size (cut if it grew).
            syncedSlot = slot
            sequence = found.sequence
            if size > UInt64(Self.fileSize) { try fileSystem.truncate(descriptor, to: UInt64(Self.fileSize)) }
            try fileSystem.syncData(descriptor)
            try write(state, sync: true)
        } else {
            // A new file, or one whose slots are all unreadable: written whole, slot 0 the new state.
            syncedSlot = 0
            sequence = 1
            var image = Self.encode(state, sequence: sequence)
            image.append(Data(count: Self.fileSize - image.count))
            try fileSystem.truncate(descriptor, to: 0)
            try fileSystem.write(descriptor, image, at: 0)
            try fileSystem.syncData(descriptor)
        }
    }

    /// Writes `state` (its sequence set here) to the slot that is not the synced one, and with `sync` syncs it, so
    /// that it becomes the synced one.
    func write(_ state: JournalCheckpointState, sync: Bool) throws {
        sequence += 1
        let slot = 1 - syncedSlot
        try fileSystem.write(descriptor, Self.encode(state, sequence: sequence), at: Self.slotOffsets[slot])
        if sync {
            try fileSystem.syncData(descriptor)
            syncedSlot = slot
        }
    }

    /// After a group commit's sync: the journal file's content is durable up to `length`, with `liveRecords` live
    /// records and the ids of `batches`. One write, no sync; a failure leaves an older, still true, checkpoint.
    func recordCommit(_ batches: [JournalBatch], length: UInt64, liveRecords: Int) {
        for batch in batches {
            for change in batch.changes where change.id > highestID { highestID = change.id }
        }
        let state = JournalCheckpointState(file: .init(identity: file, length: length), liveRecords: UInt64(liveRecords), highestID: highestID)
        try? write(state, sync: false)
    }

    func close() { fileSystem.close(descriptor) }

    // MARK: - The bytes

    /// One slot, `slotSize` bytes (all integers little-endian):
    ///
    /// | Offset | Size | Field                                                                      |
    /// |--------|------|----------------------------------------------------------------------------|
    /// | 0      | 8    | magic `RQJSTATE`                                                           |
    /// | 8      | 4    | version, 1                                                                 |
    /// | 12     | 4    | flags: bit 0 the file's header is damaged; bit 1 a replacement is named    |
    /// | 16     | 8    | sequence number                                                            |
    /// | 24     | 8    | live records                                                               |
    /// | 32     | 8    | highest id                                                                 |
    /// | 40     | 8    | the file's id floor (0 if its header is damaged)                           |
    /// | 48     | 4    | the file's file id (0 if its header is damaged)                            |
    /// | 52     | 4    | reserved, 0                                                                |
    /// | 56     | 8    | the file's durable length                                                  |
    /// | 64     | 8    | the replacement's id floor (0 if none)                                     |
    /// | 72     | 4    | the replacement's file id (0 if none)                                      |
    /// | 76     | 4    | reserved, 0                                                                |
    /// | 80     | 8    | the replacement's length (0 if none)                                       |
    /// | 88     | 4    | CRC-32C of bytes 0..<88                                                    |
    /// | 92     | 4    | reserved, 0                                                                |
    static func encode(_ state: JournalCheckpointState, sequence: UInt64) -> Data {
        // Stored in place in one buffer: appending small pieces to `Data` costs several times more, after every
        // group commit.
        var slot = [UInt8](repeating: 0, count: slotSize)
        slot.withUnsafeMutableBytes { raw in
            func store<Integer: FixedWidthInteger>(_ value: Integer, at offset: Int) {
                raw.storeBytes(of: value.littleEndian, toByteOffset: offset, as: Integer.self)
            }
            for (index, byte) in magic.enumerated() { raw[index] = byte }
            store(version, at: 8)
            store((state.file.identity == nil ? 1 : 0) | (state.replacement != nil ? 2 : 0) as UInt32, at: 12)
            store(sequence, at: 16)
            store(state.liveRecords, at: 24)
            store(state.highestID, at: 32)
            func store(_ file: JournalCheckpointState.File, at offset: Int) {
                store(file.identity?.floor ?? 0, at: offset)
                store(file.identity?.fileID ?? 0, at: offset + 8)
                store(file.length, at: offset + 16)
            }
            store(state.file, at: 40)
            if let replacement = state.replacement { store(replacement, at: 64) }
            store(CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<88])), at: 88)
        }
        return Data(slot)
    }

    /// The slot at the start of `bytes`, if it is valid: its magic, version, checksum and reserved fields.
    static func decode(_ bytes: UnsafeRawBufferPointer) -> JournalCheckpointState? {
        guard bytes.count >= slotSize, bytes.starts(with: magic) else { return nil }
        func load<Integer: FixedWidthInteger>(_ type: Integer.Type, _ offset: Int) -> Integer { JournalFormat.load(type, bytes, offset) }
        guard CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[0..<88])) == load(UInt32.self, 88) else { return nil }
        let flags = load(UInt32.self, 12)
        guard load(UInt32.self, 8) == version, flags & ~3 == 0, load(UInt32.self, 52) == 0, load(UInt32.self, 76) == 0, load(UInt32.self, 92) == 0
        else { return nil }
        // Ids are given one by one from 1: a highest id this large is no journal's, and would overflow the next ids.
        guard load(UInt64.self, 32) < maximumID else { return nil }
        func file(at offset: Int, damaged: Bool) -> JournalCheckpointState.File {
            .init(
                identity: damaged ? nil : JournalFileIdentity(floor: load(UInt64.self, offset), fileID: load(UInt32.self, offset + 8)),
                length: load(UInt64.self, offset + 16))
        }
        return JournalCheckpointState(
            sequence: load(UInt64.self, 16), file: file(at: 40, damaged: flags & 1 != 0),
            replacement: flags & 2 != 0 ? file(at: 64, damaged: false) : nil, liveRecords: load(UInt64.self, 24),
            highestID: load(UInt64.self, 32))
    }

    /// What `bytes`, the start of a checkpoint file (at most `fileSize` bytes are read), hold. Never traps.
    static func read(_ bytes: Data) -> JournalStoredCheckpoint {
        bytes.withUnsafeBytes { raw in
            guard raw.contains(where: { $0 != 0 }) else { return .none }
            var newest: (JournalCheckpointState, Int)?
            for (slot, offset) in slotOffsets.enumerated() where raw.count >= Int(offset) + slotSize {
                let bytes = UnsafeRawBufferPointer(rebasing: raw[Int(offset)..<Int(offset) + slotSize])
                guard let state = decode(bytes) else { continue }
                if newest.map({ state.sequence > $0.0.sequence }) ?? true { newest = (state, slot) }
            }
            return newest.map { .valid($0.0, slot: $0.1) } ?? .damaged
        }
    }
}

// MARK: - Judging a journal file against the checkpoint

extension JournalCheckpoint {
    /// What was lost, judged from the checkpoint `stored` and the journal file as opening found it: whether it
    /// `existed`, its `bytes` and what recovery read in them. `nil`: nothing known to be lost.
    ///
    /// - With no checkpoint (a folder of an earlier version, or a new one), only a file that holds no journal at all
    ///   (neither the magic, nor a record after the header, nor zeros only) is reported, as replaced.
    /// - With a damaged checkpoint: a missing, empty or foreign file is reported as such; any other as
    ///   `checkpointDamaged`.
    /// - With a checkpoint: missing, emptied; replaced when the header is intact but names another file than the
    ///   checkpoint's (or the replacement of a compaction in progress), or when the file holds no journal at all
    ///   (zeros only included); shortened when the content ends before the checkpoint's durable length, or the ids
    ///   found stop below its highest id. A damaged header on a file whose records go as far as the checkpoint's
    ///   length is damage, reported as such by recovery, not a loss.
    static func judge(_ stored: JournalStoredCheckpoint, existed: Bool, bytes: UnsafeRawBufferPointer, scan: JournalScan) -> JournalLossKind? {
        let state: JournalCheckpointState
        switch stored {
        case .none:
            guard existed, !bytes.isEmpty, !holdsJournal(bytes, zerosCount: true) else { return nil }
            return .replaced
        case .damaged:
            if !existed { return .missing }
            if bytes.isEmpty { return .emptied }
            return holdsJournal(bytes, zerosCount: true) ? .checkpointDamaged : .replaced
        case let .valid(found, _):
            state = found
        }
        if !existed { return .missing }
        if bytes.isEmpty { return .emptied }
        let files = [state.file] + (state.replacement.map { [$0] } ?? [])
        if case let .valid(floor, _, fileID) = JournalFormat.parseFileHeader(bytes) {
            let identity = JournalFileIdentity(floor: floor, fileID: fileID)
            let same = files.filter { $0.identity == identity }
            if same.isEmpty { return .replaced }
            let highest = max(scan.floor - 1, scan.highestID)
            return same.contains(where: { scan.recordsEnd >= $0.length }) && highest >= state.highestID ? nil : .shortened
        }
        guard holdsJournal(bytes, zerosCount: false) else { return .replaced }
        // A damaged header of this journal (its floor lost: the ids are not compared): the records after it must
        // still reach the length.
        guard bytes.count >= JournalFormat.fileHeaderSize else { return .shortened }
        let reach = max(scan.recordsEnd, UInt64(JournalFormat.fileHeaderSize))
        return files.contains(where: { reach >= $0.length }) ? nil : .shortened
    }

    /// Whether `bytes` (a journal file's, not empty) are, or were, a journal: they start with the magic (or are a
    /// start of it), or a record header follows where the file header ends, or (with `zerosCount`) they are zeros
    /// only, which a crash can leave of a new file.
    static func holdsJournal(_ bytes: UnsafeRawBufferPointer, zerosCount: Bool) -> Bool {
        let magic = JournalFormat.fileMagic
        if bytes.count < magic.count ? bytes.elementsEqual(magic.prefix(bytes.count)) : bytes.starts(with: magic) { return true }
        if JournalFormat.parseRecordHeader(bytes, at: JournalFormat.fileHeaderSize) != nil { return true }
        return zerosCount && !bytes.contains(where: { $0 != 0 })
    }
}
