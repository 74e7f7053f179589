import Foundation
@testable import Requests
import XCTest

// The outbox's one-pass JSON encoder against `JSONEncoder`: for every value, the same JSON (as parsed by
// `JSONSerialization`) and the same value back from `JSONDecoder`; what one pass cannot write goes to `JSONEncoder`.

private struct Flat: Codable, Equatable {
    var text = "plain"
    var int = -42
    var yes = true
    var double = 0.1
    var float: Float = 3.25
    var int8 = Int8.min, int16 = Int16.max, int32 = Int32.min, int64 = Int64.max
    var uint = UInt.max, uint8 = UInt8.max, uint16 = UInt16.max, uint32 = UInt32.max, uint64 = UInt64.max
    var absent: String?
    var present: Int? = 7
}

private struct Nested: Codable, Equatable {
    var name: String
    var children: [Nested]
    var numbers: [Int]
    var words: [String]
    var matrix: [[Double]]
    var byName: [String: Int]
    var byNumber: [Int: String]
    var byUUID: [UUID: Bool]
    var empty: Empty
    var choice: Choice
    var kind: Kind
    var date: Date
    var data: Data
    var url: URL
    var uuid: UUID
    var maybeDate: Date?
    var maybeData: Data?
    var wrapped: Wrapper
}

private struct Empty: Codable, Equatable {}

private enum Choice: Codable, Equatable {
    case none
    case one(String)
    case pair(Int, label: Double)
}

private enum Kind: String, Codable, Equatable { case small, large }

/// A single value that holds a struct.
private struct Wrapper: Codable, Equatable {
    var inner: Flat
    init(inner: Flat) { self.inner = inner }
    init(from decoder: any Decoder) throws { inner = try decoder.singleValueContainer().decode(Flat.self) }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(inner)
    }
}

private func sample(_ depth: Int = 2) -> Nested {
    Nested(
        name: "say \"hi\" \\ /path\n\t\u{0}\u{1F}\u{7F} é 🙂 e\u{301}",
        children: depth > 0 ? [sample(depth - 1), sample(depth - 1)] : [],
        numbers: [0, -1, Int.max, Int.min], words: ["", "a", "\u{8}\u{C}\r"],
        matrix: [[], [1e300, -0.0, .leastNonzeroMagnitude, 123_456_789, Double.greatestFiniteMagnitude, 1e-7]],
        byName: ["one": 1, "": 0, "quote\"": 2], byNumber: [3: "three", -1: "minus"],
        byUUID: [UUID(): true], empty: Empty(), choice: depth % 2 == 0 ? .pair(4, label: 0.5) : .one("x"),
        kind: .large, date: Date(timeIntervalSinceReferenceDate: 12_345.678), data: Data([0, 1, 2, 250, 255]),
        url: URL(string: "https://example.com/a%20b?q=1&r=/x#frag")!, uuid: UUID(), maybeDate: nil,
        maybeData: Data("hello".utf8), wrapped: Wrapper(inner: Flat()))
}

final class StreamingJSONEncoderTests: XCTestCase {
    /// Both encodings parse to the same JSON, and the one-pass one decodes to the value.
    private func assertSameJSON<T: Codable & Equatable>(
        _ value: T, onePass expected: Bool = true, roundTrips: Bool = true, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let reference = try JSONEncoder().encode(value)
        let ours = try StreamingJSONEncoder.encode(value)
        XCTAssertEqual(StreamingJSONEncoder.onePass(value) != nil, expected, "one pass", file: file, line: line)
        let parsedReference = try JSONSerialization.jsonObject(with: reference, options: .fragmentsAllowed) as? NSObject
        let parsedOurs = try JSONSerialization.jsonObject(with: ours, options: .fragmentsAllowed) as? NSObject
        XCTAssertEqual(parsedOurs, parsedReference, "\(String(decoding: ours, as: UTF8.self))", file: file, line: line)
        let back = try JSONDecoder().decode(T.self, from: ours)
        XCTAssertEqual(back, try JSONDecoder().decode(T.self, from: reference), file: file, line: line)
        if roundTrips { XCTAssertEqual(back, value, file: file, line: line) }
    }

    func testPrimitivesAndTheirLimits() throws {
        try assertSameJSON(Flat())
        try assertSameJSON(Flat(text: "", int: 0, yes: false, double: -1e-300, float: .greatestFiniteMagnitude, absent: "here", present: nil))
        try assertSameJSON("a top-level string \"quoted\"")
        try assertSameJSON(12)
        try assertSameJSON([1.5, 2, -0.0])
        try assertSameJSON(Optional<Int>.none)
    }

    func testNestedValuesCollectionsEnumsAndFoundationTypes() throws {
        try assertSameJSON(sample())
        try assertSameJSON(Empty())
        try assertSameJSON([Choice.none, .one(""), .pair(-3, label: 1e10)])
        try assertSameJSON(["dates": [Date.distantPast, Date.distantFuture]])
        try assertSameJSON([Data(), Data(repeating: 0xAB, count: 1000)])
    }

    func testControlCharactersAreEscaped() throws {
        let every = String(decoding: (0..<0x80).map { UInt8($0) }, as: UTF8.self)
        try assertSameJSON([every: every])
        let bytes = try XCTUnwrap(StreamingJSONEncoder.onePass("\u{0}\u{1F}\"\\"))
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), #""\u0000\u001f\"\\""#)
    }

    /// Random trees of objects, arrays and scalars: the same JSON as `JSONEncoder`'s, all in one pass. (`JSONDecoder`
    /// reads some integers beyond 2^53 back as a `Tree.double`, from either encoding.)
    func testRandomTrees() throws {
        var generator = SplitMix64(seed: 0x5EED)
        for _ in 0..<2_000 {
            try assertSameJSON(Tree.random(depth: 4, using: &generator), roundTrips: false)
        }
    }

    // MARK: - What one pass leaves to JSONEncoder

    func testSuperEncoderGoesToJSONEncoder() throws {
        try assertSameJSON(Child(base: 1, own: "x"), onePass: false)
    }

    func testKeyWrittenTwiceGoesToJSONEncoder() throws {
        try assertSameJSON(Custom(mode: .duplicateKey), onePass: false)
    }

    func testContainerWrittenAfterALaterOneGoesToJSONEncoder() throws {
        try assertSameJSON(Custom(mode: .interleavedNested), onePass: false)
        try assertSameJSON(Custom(mode: .interleavedNestedIgnoringErrors), onePass: false)
    }

    func testSameContainerAskedForTwiceStaysInOnePass() throws {
        try assertSameJSON(Custom(mode: .containerTwice))
    }

    func testNestedValueEncodingNothingIsAnEmptyObject() throws {
        let bytes = try XCTUnwrap(StreamingJSONEncoder.onePass(["a": Silent()]))
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), #"{"a":{}}"#)
    }

    /// Past 16 keys an object's keys are kept in a set (a linear search made a large object quadratic): a key
    /// repeated after many others still goes to `JSONEncoder`, and a large dictionary stays in one pass.
    func testManyKeysAndADuplicateAfterThem() throws {
        for repeated in [3, 17, 39] {
            XCTAssertNil(StreamingJSONEncoder.onePass(ManyKeys(count: 40, repeating: repeated)), "key \(repeated) repeated")
            XCTAssertNoThrow(try StreamingJSONEncoder.encode(ManyKeys(count: 40, repeating: repeated)))
        }
        XCTAssertNotNil(StreamingJSONEncoder.onePass(ManyKeys(count: 40, repeating: nil)))
        try assertSameJSON(Dictionary(uniqueKeysWithValues: (0..<20_000).map { ("key-\($0)", $0) }))
    }

    func testDecimalGoesToJSONEncoder() throws {
        try assertSameJSON([Decimal(string: "3.14159")!], onePass: false)
    }

    func testErrorsAreJSONEncoders() {
        XCTAssertThrowsError(try StreamingJSONEncoder.encode([Double.nan])) { error in
            guard case EncodingError.invalidValue = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try StreamingJSONEncoder.encode(Silent())) { error in
            guard case EncodingError.invalidValue = error else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try StreamingJSONEncoder.encode(Custom(mode: .throwsOwnError))) { error in
            XCTAssertEqual(error as? CustomError, CustomError())
        }
    }

    func testCodingPathsAreJSONEncoders() throws {
        let recorder = PathRecorder()
        _ = try JSONEncoder().encode(["outer": [PathProbe(recorder: recorder)]])
        let reference = recorder.paths
        recorder.paths = []
        _ = try XCTUnwrap(StreamingJSONEncoder.onePass(["outer": [PathProbe(recorder: recorder)]]))
        XCTAssertEqual(recorder.paths, reference)
        XCTAssertFalse(reference.isEmpty)
    }
}

// MARK: - Types for the fallback cases

private class Base: Codable, Equatable {
    var base: Int
    init(base: Int) { self.base = base }
    static func == (left: Base, right: Base) -> Bool { left.base == right.base && type(of: left) == type(of: right) }
}

private final class Child: Base {
    var own: String
    private enum Keys: String, CodingKey { case own }
    init(base: Int, own: String) {
        self.own = own
        super.init(base: base)
    }
    required init(from decoder: any Decoder) throws {
        own = try decoder.container(keyedBy: Keys.self).decode(String.self, forKey: .own)
        try super.init(from: try decoder.container(keyedBy: Keys.self).superDecoder())
    }
    override func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(own, forKey: .own)
        try super.encode(to: container.superEncoder())
    }
    static func == (left: Child, right: Child) -> Bool { left.base == right.base && left.own == right.own }
}

private struct CustomError: Error, Equatable {}

private struct Custom: Codable, Equatable {
    enum Mode: String, Codable { case duplicateKey, interleavedNested, interleavedNestedIgnoringErrors, containerTwice, throwsOwnError }
    var mode: Mode
    private enum Keys: String, CodingKey { case mode, a, b, c }

    init(mode: Mode) { self.mode = mode }
    init(from decoder: any Decoder) throws {
        mode = try decoder.container(keyedBy: Keys.self).decode(Mode.self, forKey: .mode)
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(mode, forKey: .mode)
        switch mode {
        case .duplicateKey:
            try container.encode(1, forKey: .a)
            try container.encode(2, forKey: .a)
        case .interleavedNested, .interleavedNestedIgnoringErrors:
            var first = container.nestedUnkeyedContainer(forKey: .a)
            var second = container.nestedUnkeyedContainer(forKey: .b)
            try second.encode(2)
            if mode == .interleavedNested {
                try first.encode(1)
            } else {
                try? first.encode(1)
            }
            try container.encode(3, forKey: .c)
        case .containerTwice:
            var again = encoder.container(keyedBy: Keys.self)
            try again.encode(1, forKey: .a)
            try container.encode(2, forKey: .b)
        case .throwsOwnError:
            throw CustomError()
        }
    }
}

/// Writes `count` keys, then one of them again.
private struct ManyKeys: Encodable {
    let count: Int
    let repeating: Int?
    private struct Key: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        for index in 0..<count { try container.encode(index, forKey: Key(stringValue: "k\(index)")) }
        if let repeating { try container.encode(-1, forKey: Key(stringValue: "k\(repeating)")) }
    }
}

/// Encodes nothing.
private struct Silent: Encodable {
    func encode(to encoder: any Encoder) throws {}
}

private final class PathRecorder: @unchecked Sendable {
    var paths: [[String]] = []
}

private struct PathProbe: Encodable {
    let recorder: PathRecorder
    private enum Keys: String, CodingKey { case inner }
    func encode(to encoder: any Encoder) throws {
        recorder.paths.append(encoder.codingPath.map(\.stringValue))
        var container = encoder.container(keyedBy: Keys.self)
        recorder.paths.append(container.codingPath.map(\.stringValue))
        var nested = container.nestedUnkeyedContainer(forKey: .inner)
        try nested.encode(1)
        recorder.paths.append(nested.codingPath.map(\.stringValue))
    }
}

// MARK: - Random trees

private enum Tree: Codable, Equatable {
    case object([String: Tree])
    case array([Tree])
    case string(String)
    case integer(Int)
    case double(Double)
    case bool(Bool)
    case null

    static func random(depth: Int, using generator: inout SplitMix64) -> Tree {
        let pick = Int.random(in: 0..<(depth > 0 ? 9 : 5), using: &generator)
        switch pick {
        case 0: return .string(randomString(using: &generator))
        case 1: return .integer(Int.random(in: Int.min...Int.max, using: &generator) >> Int.random(in: 0..<64, using: &generator))
        case 2: return .double(Double(bitPattern: UInt64.random(in: 0...UInt64.max, using: &generator)).isFinite ? Double(bitPattern: generator.next()) : 0.5)
        case 3: return .bool(Bool.random(using: &generator))
        case 4: return .null
        case 5, 6:
            var members: [String: Tree] = [:]
            for _ in 0..<Int.random(in: 0..<5, using: &generator) { members[randomString(using: &generator)] = random(depth: depth - 1, using: &generator) }
            return .object(members)
        default:
            return .array((0..<Int.random(in: 0..<5, using: &generator)).map { _ in random(depth: depth - 1, using: &generator) })
        }
    }

    private static func randomString(using generator: inout SplitMix64) -> String {
        let alphabet: [Character] = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\u{0}", "\u{1F}", "é", "🙂", "\u{301}", "\u{2028}"]
        return String((0..<Int.random(in: 0..<8, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! })
    }

    init(from decoder: any Decoder) throws {
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(Int.self) {
            self = .integer(value)
        } else if let value = try? single.decode(Double.self) {
            self = .double(value)
        } else if let value = try? single.decode(String.self) {
            self = .string(value)
        } else if let value = try? single.decode([Tree].self) {
            self = .array(value)
        } else {
            self = .object(try single.decode([String: Tree].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var single = encoder.singleValueContainer()
        switch self {
        case .object(let members): try single.encode(members)
        case .array(let elements): try single.encode(elements)
        case .string(let value): try single.encode(value)
        case .integer(let value): try single.encode(value)
        case .double(let value): try single.encode(value)
        case .bool(let value): try single.encode(value)
        case .null: try single.encodeNil()
        }
    }
}
