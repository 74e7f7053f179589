import Foundation
import Requests

/// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's `crc32` instruction), table-driven with
/// slicing by 8: eight 256-entry tables let the loop consume eight bytes per step; and the combination of two
/// checksums (`combine`, `shifted`), which recovery uses to check a stretch from two prefixes' checksums. Internal,
/// for the journal's records.
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

    // MARK: - Combination

    // A CRC is linear over GF(2): running the register over `length` more bytes multiplies it by x^(8 length) modulo
    // the polynomial, and the initial and final inversions cancel out of the sum. So for any `A` and `B`:
    //
    //     checksum(A + B) == shifted(checksum(A), by: B.count) ^ checksum(B)
    //
    // which gives any stretch's checksum from the checksums of two prefixes, without reading the stretch. Values
    // are in the reflected form of the checksums themselves: bit 31 is the coefficient of x^0, bit 0 that of x^31.

    /// `powers[k]`: x^(8 · 2^k) modulo the polynomial, what running over 2^k bytes multiplies the register by.
    private static let powers: [UInt32] = {
        var powers: [UInt32] = [1 << 23]  // x^8
        for _ in 1..<63 { powers.append(multiply(powers[powers.count - 1], powers[powers.count - 1])) }
        return powers
    }()

    /// `a · b` modulo the polynomial, both reflected.
    private static func multiply(_ a: UInt32, _ b: UInt32) -> UInt32 {
        var a = a
        var b = b
        var product: UInt32 = 0
        // For each term x^i of `a`, from x^0 (bit 31) up, add `b · x^i`: `b` is multiplied by x at each step.
        while a != 0 {
            if a & 0x8000_0000 != 0 { product ^= b }
            a <<= 1
            b = b & 1 == 1 ? (b >> 1) ^ polynomial : b >> 1
        }
        return product
    }

    /// `crc` multiplied by x^(8 · length): the part a prefix whose checksum is `crc` contributes to the checksum of
    /// itself followed by `length` more bytes. One multiplication per bit set in `length`; 0 or less leaves `crc`.
    static func shifted(_ crc: UInt32, by length: Int) -> UInt32 {
        var crc = crc
        var length = length
        var power = 0
        while length > 0 {
            if length & 1 == 1 { crc = multiply(powers[power], crc) }
            length >>= 1
            power += 1
        }
        return crc
    }

    /// The CRC-32C of `A` followed by `B`, from `first` (the checksum of `A`), `second` (that of `B`) and `B`'s
    /// length.
    static func combine(_ first: UInt32, _ second: UInt32, secondLength: Int) -> UInt32 {
        shifted(first, by: secondLength) ^ second
    }
}
