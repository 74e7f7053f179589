import Foundation
import Requests

/// The journal's bytes on disk (described for maintainers in docs/outbox-journal.md), and `RecordReader`, which reads
/// them back. All integers are little-endian.
///
/// The file starts with a 32-byte header:
///
/// | Offset | Size | Field                                                        |
/// |--------|------|--------------------------------------------------------------|
/// | 0      | 8    | magic `RQJOURNL`                                             |
/// | 8      | 4    | format version, 2 (1 is read too: see `RecordHeader.starts`) |
/// | 12     | 4    | file id: random, new with each file (0 in older files)       |
/// | 16     | 8    | id floor: every id given from this file on is at least this  |
/// | 24     | 4    | CRC-32C of bytes 0..<24                                      |
/// | 28     | 4    | reserved, 0                                                  |
///
/// Then records, one after the other, each a 28-byte header and its payload:
///
/// | Offset | Size | Field                                                        |
/// |--------|------|--------------------------------------------------------------|
/// | 0      | 4    | magic `RQJR`                                                 |
/// | 4      | 1    | kind: 1 put, 2 update, 3 remove (a tombstone, no payload)    |
/// | 5      | 1    | flags: bit 0 the next record belongs to the same call; bit 1 |
/// |        |      | the record is the first of its call (format 2)               |
/// | 6      | 2    | reserved, 0                                                  |
/// | 8      | 8    | record id                                                    |
/// | 16     | 4    | payload length                                               |
/// | 20     | 4    | CRC-32C of the payload                                       |
/// | 24     | 4    | CRC-32C of bytes 0..<24 of this header                       |
enum JournalFormat {
    static let fileMagic: [UInt8] = Array("RQJOURNL".utf8)
    static let version: UInt32 = 2
    static let fileHeaderSize = 32
    /// `RQJR` as it is stored.
    static let recordMagic: [UInt8] = Array("RQJR".utf8)
    static let recordHeaderSize = 28
    /// The largest payload a record may hold unless the journal is given a smaller limit.
    static let maximumPayloadSize = 64 << 20

    /// What a record does to the id it names.
    enum Kind: UInt8 {
        /// A new record with its payload.
        case put = 1
        /// A new payload for a live record.
        case update = 2
        /// The record is removed.
        case remove = 3
    }

    /// A record header that passed its checksum.
    struct RecordHeader: Equatable {
        var kind: Kind
        /// The next record belongs to the same call (`append`, `remove`), which exists only as a whole.
        var continues: Bool
        var id: UInt64
        var length: Int
        var payloadCRC: UInt32
        /// The record is the first of its call (flag bit 1, written since format 2): after damage, recovery resumes
        /// only at such a record, so that the rest of a damaged call never counts as a whole call.
        var starts = true
        /// The whole record's size: header and payload.
        var size: Int { recordHeaderSize + length }
    }

    /// What the first bytes of a file say.
    enum FileHeader: Equatable {
        /// `fileID` tells this file from another with the same floor (0 in files written before it existed).
        case valid(floor: UInt64, version: UInt32, fileID: UInt32)
        /// A well-formed header of a format this code does not know.
        case unsupported(version: UInt32)
        /// Too short, or not a header, or damaged.
        case corrupt
    }

    /// The file header for a file whose ids start at `floor`, with `fileID` (random for each new file, so that the
    /// checkpoint tells it from the file it replaced: see `JournalCheckpoint`).
    static func fileHeader(floor: UInt64, fileID: UInt32 = 0) -> Data {
        var header = Data(capacity: fileHeaderSize)
        header.append(contentsOf: fileMagic)
        append(version, to: &header)
        append(fileID, to: &header)
        append(floor, to: &header)
        append(header.withUnsafeBytes { CRC32C.checksum($0) }, to: &header)
        append(UInt32(0), to: &header)
        return header
    }

    /// Reads the file header at the start of `bytes`.
    static func parseFileHeader(_ bytes: UnsafeRawBufferPointer) -> FileHeader {
        guard bytes.count >= fileHeaderSize, bytes.starts(with: fileMagic) else { return .corrupt }
        let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[0..<24]))
        guard checksum == load(UInt32.self, bytes, 24), load(UInt32.self, bytes, 28) == 0 else { return .corrupt }
        let version = load(UInt32.self, bytes, 8)
        guard version == 1 || version == self.version else { return .unsupported(version: version) }
        return .valid(floor: load(UInt64.self, bytes, 16), version: version, fileID: load(UInt32.self, bytes, 12))
    }

    /// Appends a record header to `buffer`; `patch(id:in:at:)` may change its id later.
    static func appendRecordHeader(_ header: RecordHeader, to buffer: inout [UInt8]) {
        let start = buffer.count
        buffer.append(contentsOf: repeatElement(0, count: recordHeaderSize))
        buffer.withUnsafeMutableBytes { all in
            let raw = UnsafeMutableRawBufferPointer(rebasing: all[start...])
            for (index, byte) in recordMagic.enumerated() { raw[index] = byte }
            raw[4] = header.kind.rawValue
            raw[5] = (header.continues ? 1 : 0) | (header.starts ? 2 : 0)
            raw.storeBytes(of: header.id.littleEndian, toByteOffset: 8, as: UInt64.self)
            raw.storeBytes(of: UInt32(header.length).littleEndian, toByteOffset: 16, as: UInt32.self)
            raw.storeBytes(of: header.payloadCRC.littleEndian, toByteOffset: 20, as: UInt32.self)
            let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<24]))
            raw.storeBytes(of: checksum.littleEndian, toByteOffset: 24, as: UInt32.self)
        }
    }

    /// Appends a record header to `buffer`.
    static func appendRecordHeader(_ header: RecordHeader, to buffer: inout Data) {
        // Built in an array and appended once: appending small pieces to `Data` costs several times more.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(recordHeaderSize)
        appendRecordHeader(header, to: &bytes)
        buffer.append(contentsOf: bytes)
    }

    /// Sets the `continues` flag of the record header at `offset` of `buffer`, and its checksum.
    static func patch(continues: Bool, in buffer: inout [UInt8], at offset: Int) {
        buffer.withUnsafeMutableBytes { bytes in
            bytes[offset + 5] = bytes[offset + 5] & ~1 | (continues ? 1 : 0)
            let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 24]))
            bytes.storeBytes(of: checksum.littleEndian, toByteOffset: offset + 24, as: UInt32.self)
        }
    }

    /// Sets the id of the record header at `offset` of `buffer`, and its checksum.
    static func patch(id: UInt64, in buffer: inout [UInt8], at offset: Int) {
        buffer.withUnsafeMutableBytes { bytes in
            bytes.storeBytes(of: id.littleEndian, toByteOffset: offset + 8, as: UInt64.self)
            let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 24]))
            bytes.storeBytes(of: checksum.littleEndian, toByteOffset: offset + 24, as: UInt32.self)
        }
    }

    /// The record header at `offset` of `bytes` if it is one: the magic, a matching checksum, a known kind, zero
    /// reserved bits, and a remove without payload. Whether the payload fits in `bytes` is the caller's to check.
    static func parseRecordHeader(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> RecordHeader? {
        guard offset >= 0, bytes.count - offset >= recordHeaderSize else { return nil }
        let header = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + recordHeaderSize])
        guard header.starts(with: recordMagic) else { return nil }
        guard CRC32C.checksum(UnsafeRawBufferPointer(rebasing: header[0..<24])) == load(UInt32.self, header, 24) else { return nil }
        guard let kind = Kind(rawValue: header[4]), header[5] & ~3 == 0, header[6] == 0, header[7] == 0 else { return nil }
        let length = Int(load(UInt32.self, header, 16))
        guard kind != .remove || length == 0 else { return nil }
        return RecordHeader(
            kind: kind, continues: header[5] & 1 != 0, id: load(UInt64.self, header, 8), length: length, payloadCRC: load(UInt32.self, header, 20),
            starts: header[5] & 2 != 0)
    }

    /// The complete, intact record at `offset` of `bytes`: a valid header whose payload is within `bytes` and
    /// matches its checksum. Recovery reads through a `RecordReader`, which answers the same.
    static func parseRecord(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> RecordHeader? {
        guard let header = parseRecordHeader(bytes, at: offset), bytes.count - offset >= header.size else { return nil }
        let payload = UnsafeRawBufferPointer(rebasing: bytes[offset + recordHeaderSize..<offset + header.size])
        return CRC32C.checksum(payload) == header.payloadCRC ? header : nil
    }

    static func append<Integer: FixedWidthInteger>(_ value: Integer, to buffer: inout Data) {
        withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
    }

    static func load<Integer: FixedWidthInteger>(_ type: Integer.Type, _ bytes: UnsafeRawBufferPointer, _ offset: Int) -> Integer {
        Integer(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Integer.self))
    }
}

extension JournalFormat {
    /// Reads the records of a whole file's bytes the way `parseRecord` does, and after damage finds the next intact
    /// record, in time linear in the file's size whatever its bytes.
    ///
    /// After damage, every later offset is a candidate. A forged header (its own checksum right) can claim a payload
    /// up to the end of the file, and checking that payload directly costs its length: a file full of them would
    /// cost the square of its size. So once damage is seen, a payload longer than `directLimit` is checked from the
    /// checksums of two prefixes of the file (`CRC32C.combine`): the reader keeps the checksum of every prefix whose
    /// length is a multiple of `checkpointSpacing` (4 bytes per 64 of file), computed once, as far as needed, and
    /// ends a prefix at any offset by checksumming at most 63 more bytes. Until then (an undamaged file) it reads
    /// each payload once, directly, and keeps nothing.
    struct RecordReader {
        /// Payloads up to this length are checksummed directly even after damage: cheaper than two prefixes.
        static let defaultDirectLimit = 256
        /// The distance between two kept prefix checksums.
        static let checkpointSpacing = 64

        /// The whole file.
        let bytes: UnsafeRawBufferPointer
        private let directLimit: Int
        /// `prefixes[i]`: the CRC-32C of `bytes[0..<i * checkpointSpacing]`. Empty until a payload is checked from
        /// prefixes; then room for the whole file's (`bytes.count / 16` bytes) is reserved, and filled as needed.
        private var prefixes: [UInt32] = []
        private var damageSeen = false
        /// How many bytes went through CRC-32C so far: headers, payloads, prefixes. For tests: it must stay within a
        /// small multiple of the file's size.
        private(set) var checksummedBytes = 0

        /// A reader of `bytes`, the whole file. `directLimit` is for tests, which set 0 to check every payload
        /// after damage from prefixes.
        init(_ bytes: UnsafeRawBufferPointer, directLimit: Int = defaultDirectLimit) {
            self.bytes = bytes
            self.directLimit = directLimit
        }

        /// The intact record at `offset`, as `JournalFormat.parseRecord` finds it.
        mutating func record(at offset: Int) -> RecordHeader? {
            guard offset >= 0, bytes.count - offset >= recordHeaderSize else { return nil }
            // The header's checksum covers 24 bytes; counted when the first byte could start the magic.
            if bytes[offset] == recordMagic[0] { checksummedBytes += 24 }
            guard let header = parseRecordHeader(bytes, at: offset), bytes.count - offset >= header.size else { return nil }
            return checksum(from: offset + recordHeaderSize, to: offset + header.size) == header.payloadCRC ? header : nil
        }

        /// The offset of the first intact record at or after `offset`, if any. Marks damage as seen.
        mutating func nextRecord(from offset: Int) -> Int? {
            damageSeen = true
            var candidate = max(offset, 0)
            let first = recordMagic[0]
            while bytes.count - candidate >= recordHeaderSize {
                if bytes[candidate] == first, record(at: candidate) != nil { return candidate }
                candidate += 1
            }
            return nil
        }

        /// The CRC-32C of `bytes[start..<end]`.
        private mutating func checksum(from start: Int, to end: Int) -> UInt32 {
            let length = end - start
            guard damageSeen, length > directLimit else {
                checksummedBytes += length
                return CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
            }
            // checksum(prefix(end)) == shifted(checksum(prefix(start)), by: length) ^ checksum(bytes[start..<end])
            return CRC32C.shifted(prefixChecksum(start), by: length) ^ prefixChecksum(end)
        }

        /// The CRC-32C of `bytes[0..<end]`: the kept checkpoint at or before `end`, continued.
        private mutating func prefixChecksum(_ end: Int) -> UInt32 {
            let spacing = Self.checkpointSpacing
            let checkpoint = end / spacing
            if prefixes.isEmpty {
                prefixes.reserveCapacity(bytes.count / spacing + 1)
                prefixes.append(0)
            }
            while prefixes.count <= checkpoint {
                let start = (prefixes.count - 1) * spacing
                let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<start + spacing])
                prefixes.append(CRC32C.checksum(piece, continuing: prefixes[prefixes.count - 1]))
                checksummedBytes += spacing
            }
            let start = checkpoint * spacing
            checksummedBytes += end - start
            return CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), continuing: prefixes[checkpoint])
        }
    }
}
