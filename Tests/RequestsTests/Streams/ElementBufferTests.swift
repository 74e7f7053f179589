import Foundation
@testable import Requests
import XCTest

final class ElementBufferTests: XCTestCase {
    func testAConsumerAlwaysOneBehindDoesNotKeepWhatItRead() async throws {
        // Given a buffer whose consumer always leaves one element waiting
        let buffer = ElementBuffer<Int>()
        buffer.push(0)
        // When 10,000 elements go through it
        for n in 1...10_000 {
            buffer.push(n)
            let taken = try await buffer.next()
            XCTAssertEqual(taken, n - 1)
        }
        // Then it holds a bounded number of them, not every one it handed over
        XCTAssertLessThanOrEqual(buffer.storedCount, 2 * ElementBuffer<Int>.capacity)
    }

    func testTheFailureComesAfterTheElementsBeforeIt() async throws {
        let buffer = ElementBuffer<Int>()
        buffer.push(1)
        buffer.finish(.failure(StreamError.eventTooLarge(limit: 1)))
        let first = try await buffer.next()
        XCTAssertEqual(first, 1)
        do {
            _ = try await buffer.next()
            XCTFail("no failure")
        } catch {
            XCTAssertEqual(error as? StreamError, .eventTooLarge(limit: 1))
        }
        let after = try await buffer.next()
        XCTAssertNil(after)
    }

    func testALineLimitOfIntMaxMeansNoLimitAndDoesNotTrap() throws {
        var decoder = LineDecoder(maximumLineLength: .max)
        XCTAssertEqual(try decoder.decode(Data("a\nb".utf8)), ["a"])
        XCTAssertEqual(try decoder.finish(), ["b"])
    }
}
