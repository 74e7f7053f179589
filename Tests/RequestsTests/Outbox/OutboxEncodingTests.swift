import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// What an enqueue stores: the `Idempotency-Key` it draws.
final class OutboxEncodingTests: XCTestCase {
    /// Keys are random version 4 UUIDs in lower case, 122 random bits each: none repeats in 20,000, and every
    /// random position takes both values of each of its bits.
    func testKeysAreLowercaseVersion4UUIDs() {
        var seen = Set<String>()
        var ones = [Int](repeating: 0, count: 128)
        let count = 20_000
        for _ in 0..<count {
            let key = OutboxRecord.newKey()
            XCTAssertTrue(seen.insert(key).inserted, "repeated key \(key)")
            guard let uuid = UUID(uuidString: key) else { return XCTFail("not a UUID: \(key)") }
            XCTAssertEqual(uuid.uuidString.lowercased(), key)
            withUnsafeBytes(of: uuid.uuid) { bytes in
                XCTAssertEqual(bytes[6] >> 4, 4, "version nibble of \(key)")
                XCTAssertEqual(bytes[8] >> 6, 0b10, "variant bits of \(key)")
                for bit in 0..<128 where bytes[bit / 8] & (0x80 >> UInt8(bit % 8)) != 0 { ones[bit] += 1 }
            }
        }
        let fixed: Set<Int> = [48, 49, 50, 51, 64, 65]
        for bit in 0..<128 where !fixed.contains(bit) {
            // A fair bit is set 10,000 ± 71 times (one standard deviation); 9,000 and 11,000 are 14 deviations out.
            XCTAssertTrue((9_000...11_000).contains(ones[bit]), "bit \(bit) set \(ones[bit]) times in \(count)")
        }
    }
}
