import Foundation
@testable import Requests
import XCTest

final class SHA256Tests: XCTestCase {
    // MARK: FIPS 180-2 test vectors

    func testEmptyMessage() {
        XCTAssertEqual(
            SHA256.hexDigest(Data()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        )
    }

    func testOneBlockMessage() {
        XCTAssertEqual(
            SHA256.hexDigest(Data("abc".utf8)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        )
    }

    func testTwoBlockMessage() {
        // 448 bits: the length no longer fits in the first block, so padding spills into a second one.
        let message = Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        XCTAssertEqual(message.count, 56)
        XCTAssertEqual(
            SHA256.hexDigest(message),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        )
    }

    func testOneMillionA() {
        XCTAssertEqual(
            SHA256.hexDigest(Data(repeating: UInt8(ascii: "a"), count: 1_000_000)),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        )
    }

    func testFinalizeReturnsThirtyTwoBytesMatchingTheHexDigest() {
        var hasher = SHA256()
        hasher.update(Data("abc".utf8))
        let digest = hasher.finalize()
        XCTAssertEqual(digest.count, 32)
        XCTAssertEqual(Array(digest.prefix(4)), [0xba, 0x78, 0x16, 0xbf])
        XCTAssertEqual(Array(digest.suffix(4)), [0xf2, 0x00, 0x15, 0xad])
    }

    // MARK: Incremental hashing

    func testRandomSizedPiecesGiveTheSameDigestAsOneUpdate() {
        // The expected digest of these 20,000 bytes comes from an independent implementation (Python's hashlib).
        let message = Self.pseudoRandomBytes(count: 20_000, seed: 1)
        let expected = "c908bb71592c2fbf8127cb37ad7cdc557cd3602494d16cbf2114b2b102c06055"
        XCTAssertEqual(SHA256.hexDigest(message), expected)

        // Sizes around the 55/56-byte padding limit and the 64-byte block, mixed with random ones.
        let special = [0, 1, 55, 56, 63, 64, 65]
        for seed in UInt64(10)..<20 {
            var random = SplitMix64(seed: seed)
            var hasher = SHA256()
            var offset = 0
            var pieces = 0
            while offset < message.count {
                let wanted =
                    pieces % 2 == 0
                    ? special[Int(random.next() % UInt64(special.count))]
                    : Int(random.next() % 300)
                let size = min(wanted, message.count - offset)
                hasher.update(message.subdata(in: offset..<offset + size))
                offset += size
                pieces += 1
            }
            XCTAssertEqual(Self.hex(hasher.finalize()), expected, "split with seed \(seed) into \(pieces) pieces")
        }
    }

    func testEveryLengthUpToOneHundredThirtyAndEverySplitPoint() {
        let bytes = Self.pseudoRandomBytes(count: 130, seed: 2)
        var allDigests = Data()
        for length in 0...130 {
            let message = bytes.prefix(length)
            var whole = SHA256()
            whole.update(message)
            let digest = whole.finalize()
            allDigests.append(contentsOf: digest)

            for split in 0...length {
                var pieces = SHA256()
                message.withUnsafeBytes { raw in
                    pieces.update(UnsafeRawBufferPointer(rebasing: raw[0..<split]))
                    pieces.update(UnsafeRawBufferPointer(rebasing: raw[split..<length]))
                }
                XCTAssertEqual(pieces.finalize(), digest, "length \(length) split at \(split)")
            }
        }
        // Pins the 131 one-shot digests to values from an independent implementation (Python's hashlib).
        XCTAssertEqual(
            SHA256.hexDigest(allDigests),
            "c53b8792e2f68e64fb47bc89a28d34e7ef0e2a93318e4c8323c074b96327dce3"
        )
    }

    func testFinalizeLeavesTheHasherUsable() {
        var hasher = SHA256()
        hasher.update(Data("ab".utf8))
        XCTAssertEqual(hasher.finalize(), hasher.finalize())
        hasher.update(Data("c".utf8))
        XCTAssertEqual(
            Self.hex(hasher.finalize()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        )
    }

    // MARK: Files

    func testFileDigestEqualsDataDigest() throws {
        // Over three 1 MiB reads, ending in a partial one.
        let data = Self.pseudoRandomBytes(count: 3 * 1_048_576 + 12_345, seed: 3)
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("SHA256Tests-\(UUID().uuidString).bin")
        try data.write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }

        let expected = "6e54b88463372b112e666e1bee511a7450ca434122be44faaf97145aa81a8374"
        XCTAssertEqual(SHA256.hexDigest(data), expected)
        XCTAssertEqual(try SHA256.hexDigest(ofFileAt: url), expected)
    }

    func testEmptyFile() throws {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("SHA256Tests-\(UUID().uuidString).bin")
        try Data().write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        XCTAssertEqual(
            try SHA256.hexDigest(ofFileAt: url),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        )
    }

    func testMissingFileThrows() {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("SHA256Tests-missing-\(UUID().uuidString).bin")
        XCTAssertThrowsError(try SHA256.hexDigest(ofFileAt: url))
    }

    // MARK: Helpers

    /// SplitMix64, so the test bytes are the same on every run and can be reproduced outside Swift.
    private struct SplitMix64 {
        var state: UInt64

        init(seed: UInt64) {
            state = seed
        }

        mutating func next() -> UInt64 {
            state &+= 0x9e37_79b9_7f4a_7c15
            var z = state
            z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
            z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
            return z ^ (z >> 31)
        }
    }

    /// `count` non-periodic bytes: the little-endian bytes of successive SplitMix64 outputs.
    private static func pseudoRandomBytes(count: Int, seed: UInt64) -> Data {
        var random = SplitMix64(seed: seed)
        var bytes = [UInt8]()
        bytes.reserveCapacity(count + 8)
        while bytes.count < count {
            withUnsafeBytes(of: random.next().littleEndian) { bytes.append(contentsOf: $0) }
        }
        return Data(bytes.prefix(count))
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    func testKeyedDigestMatchesRFC4231() {
        // RFC 4231, test cases 2 (a short key) and 6 (a key longer than a block).
        XCTAssertEqual(
            KeyedDigest(key: Array("Jefe".utf8)).hex("what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        XCTAssertEqual(
            KeyedDigest(key: [UInt8](repeating: 0xaa, count: 131)).hex("Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }
}
