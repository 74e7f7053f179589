import Foundation

/// The journal's bytes on disk (described for maintainers in docs/outbox-journal.md). All integers are
/// little-endian.
///
/// The file starts with a 32-byte header:
///
/// | Offset | Size | Field                                                        |
/// |--------|------|--------------------------------------------------------------|
/// | 0      | 8    | magic `RQJOURNL`                                             |
/// | 8      | 4    | format version, 1                                            |
/// | 12     | 4    | reserved, 0                                                  |
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
/// | 5      | 1    | flags: bit 0 set if the next record belongs to the same call |
/// | 6      | 2    | reserved, 0                                                  |
/// | 8      | 8    | record id                                                    |
/// | 16     | 4    | payload length                                               |
/// | 20     | 4    | CRC-32C of the payload                                       |
/// | 24     | 4    | CRC-32C of bytes 0..<24 of this header                       |
enum JournalFormat {
    static let fileMagic: [UInt8] = Array("RQJOURNL".utf8)
    static let version: UInt32 = 1
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
        /// The whole record's size: header and payload.
        var size: Int { recordHeaderSize + length }
    }

    /// What the first bytes of a file say.
    enum FileHeader: Equatable {
        case valid(floor: UInt64)
        /// A well-formed header of a format this code does not know.
        case unsupported(version: UInt32)
        /// Too short, or not a header, or damaged.
        case corrupt
    }

    /// The file header for a file whose ids start at `floor`.
    static func fileHeader(floor: UInt64) -> Data {
        var header = Data(capacity: fileHeaderSize)
        header.append(contentsOf: fileMagic)
        append(version, to: &header)
        append(UInt32(0), to: &header)
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
        guard version == self.version else { return .unsupported(version: version) }
        return .valid(floor: load(UInt64.self, bytes, 16))
    }

    /// Appends a record header to `buffer`; `patch(id:in:at:)` may change its id later.
    static func appendRecordHeader(_ header: RecordHeader, to buffer: inout Data) {
        // Built in a fixed array and appended once: appending small pieces to `Data` costs several times more.
        var bytes = [UInt8](repeating: 0, count: 28)
        bytes.withUnsafeMutableBytes { raw in
            for (index, byte) in recordMagic.enumerated() { raw[index] = byte }
            raw[4] = header.kind.rawValue
            raw[5] = header.continues ? 1 : 0
            raw.storeBytes(of: header.id.littleEndian, toByteOffset: 8, as: UInt64.self)
            raw.storeBytes(of: UInt32(header.length).littleEndian, toByteOffset: 16, as: UInt32.self)
            raw.storeBytes(of: header.payloadCRC.littleEndian, toByteOffset: 20, as: UInt32.self)
            let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[0..<24]))
            raw.storeBytes(of: checksum.littleEndian, toByteOffset: 24, as: UInt32.self)
        }
        buffer.append(contentsOf: bytes)
    }

    /// Sets the id of the record header at `offset` of `buffer`, and its checksum.
    static func patch(id: UInt64, in buffer: inout Data, at offset: Int) {
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
        guard let kind = Kind(rawValue: header[4]), header[5] & ~1 == 0, header[6] == 0, header[7] == 0 else { return nil }
        let length = Int(load(UInt32.self, header, 16))
        guard kind != .remove || length == 0 else { return nil }
        return RecordHeader(kind: kind, continues: header[5] == 1, id: load(UInt64.self, header, 8), length: length, payloadCRC: load(UInt32.self, header, 20))
    }

    /// The complete, intact record at `offset` of `bytes`: a valid header whose payload is within `bytes` and
    /// matches its checksum.
    static func parseRecord(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> RecordHeader? {
        guard let header = parseRecordHeader(bytes, at: offset), bytes.count - offset >= header.size else { return nil }
        let payload = UnsafeRawBufferPointer(rebasing: bytes[offset + recordHeaderSize..<offset + header.size])
        return CRC32C.checksum(payload) == header.payloadCRC ? header : nil
    }

    /// The offset of the first intact record at or after `offset`, if any.
    static func nextRecord(_ bytes: UnsafeRawBufferPointer, from offset: Int) -> Int? {
        var candidate = offset
        let first = recordMagic[0]
        while bytes.count - candidate >= recordHeaderSize {
            if bytes[candidate] == first, parseRecord(bytes, at: candidate) != nil { return candidate }
            candidate += 1
        }
        return nil
    }

    private static func append<Integer: FixedWidthInteger>(_ value: Integer, to buffer: inout Data) {
        withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
    }

    private static func load<Integer: FixedWidthInteger>(_ type: Integer.Type, _ bytes: UnsafeRawBufferPointer, _ offset: Int) -> Integer {
        Integer(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Integer.self))
    }
}
