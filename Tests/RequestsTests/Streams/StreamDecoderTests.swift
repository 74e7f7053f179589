import Foundation
import Requests
import XCTest

/// The decoders on their own, fed byte by byte and in one piece: both must give the same elements.
final class StreamDecoderTests: XCTestCase {
    private func feed<D: StreamDecoder>(_ decoder: D, _ text: String, byteByByte: Bool) throws -> [D.Element] {
        var decoder = decoder
        let bytes = Data(text.utf8)
        var elements: [D.Element] = []
        if byteByByte {
            for byte in bytes { elements += try decoder.decode(Data([byte])) }
        } else {
            elements += try decoder.decode(bytes)
        }
        return elements + (try decoder.finish())
    }

    private func both<D: StreamDecoder>(_ decoder: D, _ text: String) throws -> [D.Element] where D.Element: Equatable {
        let whole = try feed(decoder, text, byteByByte: false)
        XCTAssertEqual(try feed(decoder, text, byteByByte: true), whole, "byte by byte differs")
        return whole
    }

    // MARK: - Lines

    func testLinesEndWithLFOrCRLFAndALastLineNeedsNoBreak() throws {
        XCTAssertEqual(try both(LineDecoder(), "one\ntwo\r\n\r\nthree"), ["one", "two", "", "three"])
        XCTAssertEqual(try both(LineDecoder(), "\u{FEFF}first\nsecond\n"), ["first", "second"])
        XCTAssertEqual(try both(LineDecoder(), "a lone \r stays\n"), ["a lone \r stays"])
    }

    func testAnInvalidLineFailsWithItsNumber() {
        var decoder = LineDecoder()
        var bytes = Data("fine\nalso fine\n".utf8)
        bytes.append(contentsOf: [0x62, 0xFF, 0x0A])
        XCTAssertThrowsError(try decoder.decode(bytes)) { error in
            XCTAssertEqual(error as? StreamError, .invalidUTF8(line: 3))
        }
    }

    func testALineThatPassesTheLimitFailsBeforeItsEnd() throws {
        var decoder = LineDecoder(maximumLineLength: 10)
        XCTAssertEqual(try decoder.decode(Data("0123456789\r\n".utf8)), ["0123456789"])
        XCTAssertEqual(try decoder.decode(Data("0123456789".utf8)), [])
        XCTAssertThrowsError(try decoder.decode(Data("ab".utf8))) { error in
            XCTAssertEqual(error as? StreamError, .lineTooLong(line: 2, limit: 10))
        }
    }

    // MARK: - JSON lines

    private struct Tick: Decodable, Equatable {
        let n: Int
    }

    func testJSONLinesSkipBlankLinesAndNameABadLine() throws {
        XCTAssertEqual(try both(JSONLinesDecoder<Tick>(), "{\"n\":1}\n\n  \n{\"n\":2}\r\n{\"n\":3}"), [Tick(n: 1), Tick(n: 2), Tick(n: 3)])
        var decoder = JSONLinesDecoder<Tick>()
        XCTAssertThrowsError(try decoder.decode(Data("{\"n\":1}\n{\"n\":2}\n{\"n\":\"three\"}\n".utf8))) { error in
            guard case let .invalidJSON(line, _)? = error as? StreamError else { return XCTFail("\(error)") }
            XCTAssertEqual(line, 3)
        }
    }

    func testOnlyJSONWhitespaceMakesABlankLine() throws {
        XCTAssertEqual(try both(JSONLinesDecoder<Tick>(), " \t\r\r\n{\"n\":1}"), [Tick(n: 1)])
        // Other whitespace is not JSON: the line fails, named.
        for line in ["\u{0C}", "\u{A0}", "\u{2028}"] {
            var decoder = JSONLinesDecoder<Tick>()
            XCTAssertThrowsError(try decoder.decode(Data("\(line)\n{\"n\":1}\n".utf8))) { error in
                guard case let .invalidJSON(number, _)? = error as? StreamError else { return XCTFail("\(error)") }
                XCTAssertEqual(number, 1)
            }
        }
    }

    // MARK: - Server-sent events (WHATWG HTML, 9.2.6)

    func testTheStandardsExamples() throws {
        // "data: YHOO\ndata: +2\ndata: 10" is one event whose data has two line feeds.
        XCTAssertEqual(try both(ServerSentEventDecoder(), "data: YHOO\ndata: +2\ndata: 10\n\n"), [ServerSentEvent(data: "YHOO\n+2\n10")])
        // A comment, an event with an id, an event without one (the id stays), and an empty id that resets it.
        let stream = ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
        XCTAssertEqual(
            try both(ServerSentEventDecoder(), stream),
            [
                ServerSentEvent(data: "first event", id: "1"),
                ServerSentEvent(data: "second event", id: nil),
                ServerSentEvent(data: " third event", id: nil),
            ])
        // A field without a colon has an empty value: two events, "" and "\n"; a last block without a blank line is dropped.
        XCTAssertEqual(
            try both(ServerSentEventDecoder(), "data\n\ndata\ndata\n\ndata:"),
            [
                ServerSentEvent(data: ""), ServerSentEvent(data: "\n"),
            ])
        // One space after the colon is dropped, not more.
        XCTAssertEqual(try both(ServerSentEventDecoder(), "data:test\n\ndata: test\n\n"), [ServerSentEvent(data: "test"), ServerSentEvent(data: "test")])
    }

    func testEventTypesLineEndingsAndTheByteOrderMark() throws {
        let stream = "\u{FEFF}event: add\rdata: 1\r\n\r\nevent: remove\r\ndata: 2\r\rdata: 3\n\n"
        XCTAssertEqual(
            try both(ServerSentEventDecoder(), stream),
            [
                ServerSentEvent(type: "add", data: "1"), ServerSentEvent(type: "remove", data: "2"), ServerSentEvent(data: "3"),
            ])
        // Only one BOM is dropped; a second one is part of the field name, which is then unknown.
        XCTAssertEqual(try both(ServerSentEventDecoder(), "\u{FEFF}\u{FEFF}data: x\n\ndata: y\n\n"), [ServerSentEvent(data: "y")])
    }

    func testIDAndRetryRules() throws {
        var decoder = ServerSentEventDecoder()
        // An id with a NUL is ignored; retry counts only digits; an event without data still sets the last event ID.
        let events = try decoder.decode(Data("id: a\u{0}b\nretry: 12x\ndata: one\n\nretry: 2500\nid: 7\n\n".utf8))
        XCTAssertEqual(events, [ServerSentEvent(data: "one")])
        XCTAssertEqual(decoder.lastEventID, "7")
        XCTAssertEqual(decoder.reconnectionTime, 2.5)
        XCTAssertEqual(decoder.requestHeaders["Last-Event-ID"], "7")
        XCTAssertEqual(decoder.requestHeaders["Accept"], "text/event-stream")

        // An id inside an event the connection drops before its end is not the stream's yet.
        _ = try decoder.decode(Data("id: 8\ndata: half".utf8))
        var next = ServerSentEventDecoder()
        next.resume(after: decoder)
        XCTAssertEqual(next.lastEventID, "7")
        XCTAssertEqual(next.reconnectionDelay, 2.5)
        XCTAssertEqual(try next.decode(Data("data: nine\n\n".utf8)), [ServerSentEvent(data: "nine", id: "7")])
    }

    func testAnEventPastTheLimitFailsAndBadBytesAreReplacedUnlessRejected() throws {
        var small = ServerSentEventDecoder(maximumEventSize: 16)
        XCTAssertThrowsError(try small.decode(Data("data: 0123456789\ndata: 0123456789\n".utf8))) { error in
            XCTAssertEqual(error as? StreamError, .eventTooLarge(limit: 16))
        }
        var bytes = Data("data: a".utf8)
        bytes.append(contentsOf: [0xFF, 0x0A, 0x0A])
        var lenient = ServerSentEventDecoder()
        XCTAssertEqual(try lenient.decode(bytes), [ServerSentEvent(data: "a\u{FFFD}")])
        var strict = ServerSentEventDecoder(rejectsInvalidUTF8: true)
        XCTAssertThrowsError(try strict.decode(bytes)) { error in
            XCTAssertEqual(error as? StreamError, .invalidUTF8(line: 1))
        }
    }

    // MARK: - Any split of a body

    /// The outcome of `decoder` over `bytes` cut at `cuts`: its elements, then its error if it fails.
    private func outcome<D: StreamDecoder>(_ decoder: D, _ bytes: [UInt8], cuts: [Int]) -> String {
        var decoder = decoder
        var elements: [D.Element] = []
        var start = 0
        do {
            for end in cuts + [bytes.count] where end >= start {
                try decoder.decode(Data(bytes[start..<end])) { elements.append($0) }
                start = end
            }
            elements += try decoder.finish()
            return "\(elements)"
        } catch {
            return "\(elements) then \(error)"
        }
    }

    /// Line breaks of every kind, a byte-order mark, characters of two to four bytes, bad UTF-8, NULs, JSON and event
    /// fields, cut at random places (a seeded generator), give what the body in one piece gives.
    func testRandomCutsGiveWhatOnePieceGives() {
        var generator = SplitMix64(seed: 0x5EED)
        let parts: [[UInt8]] = [
            Array("data: x".utf8), Array("{\"n\":1}".utf8), Array("id: 7".utf8), Array("event: e".utf8), Array("retry: 30".utf8),
            [0x0A], [0x0D], [0x0D, 0x0A], [0xEF, 0xBB, 0xBF], Array("é€😀".utf8), [0xFF], [0xF0, 0x9F, 0x98], [0x00], Array(":c".utf8),
            Array("   ".utf8),
        ]
        for round in 0..<400 {
            var body: [UInt8] = []
            for _ in 0..<Int.random(in: 1...24, using: &generator) { body += parts[Int.random(in: 0..<parts.count, using: &generator)] }
            let cuts = (0..<Int.random(in: 0...6, using: &generator)).map { _ in Int.random(in: 0...body.count, using: &generator) }.sorted()
            let strict = round % 2 == 0
            XCTAssertEqual(outcome(LineDecoder(maximumLineLength: 40), body, cuts: cuts), outcome(LineDecoder(maximumLineLength: 40), body, cuts: []), "\(body) \(cuts)")
            XCTAssertEqual(outcome(JSONLinesDecoder<Tick>(), body, cuts: cuts), outcome(JSONLinesDecoder<Tick>(), body, cuts: []), "\(body) \(cuts)")
            let events = ServerSentEventDecoder(maximumEventSize: 60, rejectsInvalidUTF8: strict)
            XCTAssertEqual(outcome(events, body, cuts: cuts), outcome(events, body, cuts: []), "\(body) \(cuts)")
        }
    }
}
