import Foundation

/// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's `crc32` instruction), table-driven with
/// slicing by 8: eight 256-entry tables let the loop consume eight bytes per step. Internal, for the journal's
/// records.
///
/// Check values (RFC 3720, B.4): `"123456789"` gives `0xE3069283`, 32 zero bytes give `0x8A9136AA`.
enum CRC32C {
    /// The reflected Castagnoli polynomial.
    private static let polynomial: UInt32 = 0x82F6_3B78

    /// `tables[k * 256 + b]`: the CRC of byte `b` followed by `k` zero bytes.
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ polynomial : crc >> 1 }
            tables[byte] = crc
        }
        for slice in 1..<8 {
            for byte in 0..<256 {
                let previous = tables[(slice - 1) * 256 + byte]
                tables[slice * 256 + byte] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// The CRC-32C of `bytes`, continuing from `crc` (the checksum of the bytes before them; 0 to start).
    static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        var crc = ~crc
        tables.withUnsafeBufferPointer { table in
            var index = 0
            let count = bytes.count
            while count - index >= 8 {
                let low = crc ^ UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self))
                let high = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index + 4, as: UInt32.self))
                crc =
                    table[7 * 256 + Int(low & 0xFF)] ^ table[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ table[5 * 256 + Int((low >> 16) & 0xFF)] ^ table[4 * 256 + Int(low >> 24)]
                    ^ table[3 * 256 + Int(high & 0xFF)] ^ table[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ table[1 * 256 + Int((high >> 16) & 0xFF)] ^ table[Int(high >> 24)]
                index += 8
            }
            while index < count {
                crc = (crc >> 8) ^ table[Int((crc ^ UInt32(bytes[index])) & 0xFF)]
                index += 1
            }
        }
        return ~crc
    }

    /// The CRC-32C of `data`, continuing from `crc`.
    static func checksum(_ data: Data, continuing crc: UInt32 = 0) -> UInt32 {
        data.withUnsafeBytes { checksum($0, continuing: crc) }
    }
}
