import Foundation
@testable import Requests
import XCTest

// Attacks on the outbox's one-pass JSON encoder: values whose encoding `StreamingJSONEncoder` must either write as
// `JSONEncoder` would (same JSON once parsed) or hand to `JSONEncoder` (same result, same error).
// The first tests are the contract violations an attack found in the first version (66ac4a2), fixed since.

final class StreamingJSONEncoderAttackTests: XCTestCase {
    /// Both succeed with the same JSON once parsed (keys may come in another order), or both throw the same error.
    private func assertSameOutcome<T: Encodable>(_ value: T, onePass expected: Bool? = nil, file: StaticString = #filePath, line: UInt = #line) {
        let text = { (result: Result<Data, any Error>) in result.map { String(decoding: $0.prefix(300), as: UTF8.self) } }
        let parse = { (data: Data) in try? JSONSerialization.jsonObject(with: data, options: .fragmentsAllowed) as? NSObject }
        let reference = Result { try JSONEncoder().encode(value) }
        let ours = Result { try StreamingJSONEncoder.encode(value) }
        let message = "JSONEncoder: \(text(reference))\nStreamingJSONEncoder: \(text(ours))"
        switch (reference, ours) {
        case (.success(let left), .success(let right)): XCTAssertTrue(parse(left) != nil && parse(left) == parse(right), message, file: file, line: line)
        case (.failure(let left), .failure(let right)): XCTAssertEqual("\(left)", "\(right)", message, file: file, line: line)
        default: XCTFail(message, file: file, line: line)
        }
        if let expected { XCTAssertEqual(StreamingJSONEncoder.onePass(value) != nil, expected, "one pass", file: file, line: line) }
    }

    // MARK: - Violations found by an attack, fixed

    /// `try? container.encode(value, forKey:)` where `value` writes part of itself and then throws: `JSONEncoder`
    /// drops the member (`{"b":1}`); the one pass keeps what was written (`{"b":1,"a":5}`) and never falls back,
    /// because a user error caught by user code does not mark the pass failed.
    func testSwallowedUserErrorLeavesNoPartialMemberInKeyedContainer() {
        for payload in PartialThrower.Payload.allCases {
            assertSameOutcome(SwallowsInKeyed(payload: payload))
        }
    }

    /// The same in an unkeyed container: `JSONEncoder` gives `[2]`, the one pass `[{"x":1},2]` (and every later
    /// element's coding path is one index off).
    func testSwallowedUserErrorLeavesNoPartialElementInUnkeyedContainer() {
        assertSameOutcome(SwallowsInUnkeyed())
    }

    /// `Int128`/`UInt128` go through the containers' 128-bit requirements, which the one pass leaves to the
    /// standard library's defaults: they throw a plain `EncodingError` without marking the pass failed. Uncaught,
    /// it falls back; caught with `try?`, the one pass silently drops the value (`{"b":1}` for `{"a":5,"b":1}`,
    /// `{}` for `5` in a single-value container).
    func testInt128AndUInt128InEveryContainer() {
        for position in WideInteger.Position.allCases {
            assertSameOutcome([WideInteger(position: position)])
        }
    }

    /// `JSONEncoder` refuses 512 nested containers ("Unable to encode the given top-level value to JSON.");
    /// the one pass writes them, and from 513 levels on writes JSON that `JSONDecoder` itself rejects, so the
    /// outbox stores a request it can never decode instead of failing the enqueue.
    func testNestingJSONEncoderRefusesIsRefused() throws {
        XCTAssertNoThrow(try JSONEncoder().encode(Nest(levels: 511)))
        assertSameOutcome(Nest(levels: 511), onePass: true)
        XCTAssertThrowsError(try JSONEncoder().encode(Nest(levels: 512)))
        XCTAssertThrowsError(try StreamingJSONEncoder.encode(Nest(levels: 512)))
        let deeper = try? StreamingJSONEncoder.encode(Nest(levels: 600))
        XCTAssertNil(deeper, "written: \(deeper.map { "\($0.count) bytes" } ?? "")")
        if let deeper { XCTAssertThrowsError(try JSONDecoder().decode(Ignored.self, from: deeper)) }
    }

    /// The one difference kept by choice (see `StreamingJSONEncoder`): a value inside a nested container sees its
    /// full coding path, `z/Index 0`, where `JSONEncoder` (swift-foundation) gives `Index 0`.
    func testCodingPathInsideNestedContainerIsTheFullPath() throws {
        let bytes = try XCTUnwrap(StreamingJSONEncoder.onePass(EchoInNested()))
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), #"{"z":["z/Index 0"]}"#)
    }

    // MARK: - Coverage the existing tests lack (passing)

    /// Every finite `Float16`, random `Float` and `Double` bit patterns: byte for byte `JSONEncoder`'s text.
    func testFloatingPointTextIsJSONEncodersByteForByte() throws {
        var generator = SplitMix(state: 0xF10A7)
        let halves = (0...UInt16.max).map { Float16(bitPattern: $0) }.filter(\.isFinite)
        XCTAssertEqual(try StreamingJSONEncoder.encode(halves), try JSONEncoder().encode(halves))
        var floats: [Float] = [.leastNonzeroMagnitude, .leastNormalMagnitude, -0.0, 16_777_218, 1e10, 0.1]
        var doubles: [Double] = [.leastNonzeroMagnitude, Double.leastNormalMagnitude.nextDown, 9_007_199_254_740_994, 1e21, 1e-7, -0.0]
        while floats.count < 20_000 {
            let float = Float(bitPattern: UInt32(truncatingIfNeeded: generator.next()))
            if float.isFinite { floats.append(float) }
            let double = Double(bitPattern: generator.next())
            if double.isFinite { doubles.append(double) }
        }
        XCTAssertEqual(try StreamingJSONEncoder.encode(floats), try JSONEncoder().encode(floats))
        XCTAssertEqual(try StreamingJSONEncoder.encode(doubles), try JSONEncoder().encode(doubles))
    }

    /// Every Unicode scalar (U+2028, U+FEFF, NUL, `/` included) decodes back to itself.
    func testEveryUnicodeScalarRoundTrips() throws {
        let every = String(String.UnicodeScalarView((0...0x10FFFF).compactMap(Unicode.Scalar.init)))
        let ours = try StreamingJSONEncoder.encode([every: every])
        XCTAssertEqual(try JSONDecoder().decode([String: String].self, from: ours), [every: every])
    }

    /// Foundation's special cases at the top, in optionals, behind a single value holding `any Encodable`, and
    /// their own `encode(to:)` when a wrapper calls it directly (then `JSONEncoder` does not special-case them).
    func testFoundationTypesInEveryPosition() {
        let url = URL(string: "path?q=/", relativeTo: URL(string: "https://example.com/a/"))
        assertSameOutcome(Optional(Data([1, 2, 3])), onePass: true)
        assertSameOutcome(Optional<Data>.none, onePass: true)
        assertSameOutcome(url, onePass: true)
        assertSameOutcome(Optional(Date(timeIntervalSinceReferenceDate: -1.5)), onePass: true)
        let erased: [any Encodable] = [Data([250]), url, Date.distantPast, UUID(), Optional(Data()), [Data()]]
        assertSameOutcome(erased.map(SingleValueOfAny.init), onePass: true)
        assertSameOutcome(erased.map(DirectEncodeOfAny.init), onePass: true)
        assertSameOutcome([SingleValueOfAny(Decimal(sign: .minus, exponent: -3, significand: 1))], onePass: false)
        assertSameOutcome([DirectEncodeOfAny(Decimal(sign: .minus, exponent: -3, significand: 1))], onePass: true)
        assertSameOutcome([Int128.min: UInt128.max], onePass: true)
    }

    /// Dictionaries by `Int`, by a `CodingKeyRepresentable` enum, by `Bool` (an array of pairs), and a large one.
    func testDictionaryKeys() {
        assertSameOutcome([-1: "minus", 0: "zero", Int.max: "max"], onePass: true)
        assertSameOutcome([Side.left: 1, .right: 2], onePass: true)
        assertSameOutcome([true: [false: 1]], onePass: true)
        assertSameOutcome(Dictionary(uniqueKeysWithValues: (0..<2_000).map { ("k\($0)", $0) }), onePass: true)
        assertSameOutcome(Array(0..<100_000), onePass: true)
    }

    /// Unusual container orders: each goes to `JSONEncoder` (or stays in one pass) with `JSONEncoder`'s result.
    func testUnusualContainerOrdersGiveJSONEncodersResult() {
        let onePass: [Unusual.Order: Bool] = [.conditionalAndIfPresent: true, .emptyValueThroughSingleValue: true]
        for order in Unusual.Order.allCases {
            assertSameOutcome(["v": Unusual(order: order)], onePass: onePass[order] ?? false)
        }
    }

    /// Coding paths (string and integer values) seen through single values, nested unkeyed and keyed containers,
    /// dictionaries by `String`, `Int` and a `CodingKeyRepresentable`, and optionals.
    func testCodingPathsInEveryPositionAreJSONEncoders() throws {
        let values: [(PathLog) -> any Encodable] = [
            { ["k": PathWalker(log: $0)] }, { ["3": PathWalker(log: $0)] }, { [3: PathWalker(log: $0)] },
            { [Side.left: PathWalker(log: $0)] }, { [Optional(PathWalker(log: $0)), nil] }, { PathWalker(log: $0) },
        ]
        for make in values {
            let reference = PathLog()
            let ours = PathLog()
            _ = try JSONEncoder().encode(SingleValueOfAny(make(reference)))
            XCTAssertNotNil(StreamingJSONEncoder.onePass(SingleValueOfAny(make(ours))))
            XCTAssertEqual(ours.entries, reference.entries)
            XCTAssertEqual(reference.entries.count, 7, "\(reference.entries)")
        }
    }
}

// MARK: - Values for the violations

private struct AttackError: Error {}

private struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { (stringValue, self.intValue) = ("\(intValue)", intValue) }
}

/// Writes part of itself, then throws.
private struct PartialThrower: Encodable {
    enum Payload: CaseIterable { case single, keyed, unkeyed }
    var payload: Payload
    func encode(to encoder: any Encoder) throws {
        switch payload {
        case .single:
            try 5.encode(to: encoder)
        case .keyed:
            var keyed = encoder.container(keyedBy: AnyKey.self)
            try keyed.encode(1, forKey: AnyKey("x"))
        case .unkeyed:
            var unkeyed = encoder.unkeyedContainer()
            try unkeyed.encode(1)
        }
        throw AttackError()
    }
}

private struct SwallowsInKeyed: Encodable {
    var payload: PartialThrower.Payload
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        try container.encode(1, forKey: AnyKey("b"))
        try? container.encode(PartialThrower(payload: payload), forKey: AnyKey("a"))
    }
}

private struct SwallowsInUnkeyed: Encodable {
    func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        try? container.encode(PartialThrower(payload: .keyed))
        try container.encode(2)
    }
}

private struct WideInteger: Encodable {
    enum Position: CaseIterable { case keyedThenMore, moreThenKeyed, unkeyed, single }
    var position: Position
    func encode(to encoder: any Encoder) throws {
        switch position {
        case .keyedThenMore:
            var keyed = encoder.container(keyedBy: AnyKey.self)
            try? keyed.encode(Int128(5), forKey: AnyKey("a"))
            try keyed.encode(1, forKey: AnyKey("b"))
        case .moreThenKeyed:
            var keyed = encoder.container(keyedBy: AnyKey.self)
            try keyed.encode(1, forKey: AnyKey("b"))
            try? keyed.encode(UInt128(5), forKey: AnyKey("a"))
        case .unkeyed:
            var unkeyed = encoder.unkeyedContainer()
            try? unkeyed.encode(UInt128.max)
            try unkeyed.encode(1)
        case .single:
            var single = encoder.singleValueContainer()
            try? single.encode(Int128(5))
        }
    }
}

/// `levels` arrays nested by `nestedUnkeyedContainer()` in a loop (no recursion), `1` in the innermost.
private struct Nest: Encodable {
    var levels: Int
    func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        for _ in 1..<levels { container = container.nestedUnkeyedContainer() }
        try container.encode(1)
    }
}

/// Encodes its own coding path, from inside a nested unkeyed container.
private struct EchoInNested: Encodable {
    struct Echo: Encodable {
        func encode(to encoder: any Encoder) throws { try encoder.codingPath.map(\.stringValue).joined(separator: "/").encode(to: encoder) }
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        var nested = container.nestedUnkeyedContainer(forKey: AnyKey("z"))
        try nested.encode(Echo())
    }
}

/// Decodes anything, without looking.
private struct Ignored: Decodable {
    init(from decoder: any Decoder) throws { _ = try decoder.singleValueContainer() }
}

// MARK: - Values for the coverage

private struct SplitMix {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = (state ^ (state >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }
}

private enum Side: String, CodingKeyRepresentable, Hashable, Encodable { case left, right }

/// Encodes `any Encodable` through a single-value container: the encoder opens the existential, as for a `T`.
private struct SingleValueOfAny: Encodable {
    let value: any Encodable
    init(_ value: any Encodable) { self.value = value }
    func encode(to encoder: any Encoder) throws {
        var single = encoder.singleValueContainer()
        try single.encode(value)
    }
}

/// Calls the wrapped value's own `encode(to:)` with this encoder.
private struct DirectEncodeOfAny: Encodable {
    let value: any Encodable
    init(_ value: any Encodable) { self.value = value }
    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}

private final class Shared: Encodable {
    func encode(to encoder: any Encoder) throws { try "shared".encode(to: encoder) }
}

private struct Silence: Encodable { func encode(to encoder: any Encoder) throws {} }

/// Containers used in orders the one pass cannot follow, or barely can.
private struct Unusual: Encodable {
    enum Order: CaseIterable {
        case sameNestedKeyedTwice, sameNestedUnkeyedTwice, superEncoderInUnkeyed, superEncoderForKey, unkeyedInUnkeyedWrittenLate
        case copyWrittenAfterParentMoved, sameKeyThroughTwoContainers, nonFiniteSwallowed, conditionalAndIfPresent
        case emptyValueThroughSingleValue
    }
    var order: Order

    func encode(to encoder: any Encoder) throws {
        switch order {
        case .sameNestedKeyedTwice, .sameNestedUnkeyedTwice, .superEncoderForKey, .copyWrittenAfterParentMoved, .sameKeyThroughTwoContainers:
            try keyed(encoder.container(keyedBy: AnyKey.self), encoder)
        case .superEncoderInUnkeyed:
            var unkeyed = encoder.unkeyedContainer()
            try unkeyed.encode(0)
            try 5.encode(to: unkeyed.superEncoder())
            try unkeyed.encode(9)
        case .unkeyedInUnkeyedWrittenLate:
            var unkeyed = encoder.unkeyedContainer()
            var inner = unkeyed.nestedUnkeyedContainer()
            try unkeyed.encode(1)
            try? inner.encode(2)
            try unkeyed.encode(3)
        case .nonFiniteSwallowed:
            var keyed = encoder.container(keyedBy: AnyKey.self)
            try? keyed.encode(Float.infinity, forKey: AnyKey("a"))
            try keyed.encode(1, forKey: AnyKey("b"))
        case .conditionalAndIfPresent:
            var keyed = encoder.container(keyedBy: AnyKey.self)
            let shared = Shared()
            try keyed.encodeIfPresent(nil as Int?, forKey: AnyKey("absent"))
            try keyed.encodeIfPresent(3 as Int?, forKey: AnyKey("present"))
            try keyed.encodeConditional(shared, forKey: AnyKey("conditional"))
            var unkeyed = keyed.nestedUnkeyedContainer(forKey: AnyKey("list"))
            try unkeyed.encodeConditional(shared)
        case .emptyValueThroughSingleValue:
            var single = encoder.singleValueContainer()
            try single.encode(Silence())
        }
    }

    private func keyed(_ container: KeyedEncodingContainer<AnyKey>, _ encoder: any Encoder) throws {
        var container = container
        switch order {
        case .sameNestedKeyedTwice:
            var first = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("n"))
            try first.encode(1, forKey: AnyKey("x"))
            var second = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("n"))
            try second.encode(2, forKey: AnyKey("y"))
        case .sameNestedUnkeyedTwice:
            var first = container.nestedUnkeyedContainer(forKey: AnyKey("n"))
            try first.encode(1)
            var second = container.nestedUnkeyedContainer(forKey: AnyKey("n"))
            try second.encode(2)
        case .superEncoderForKey:
            var parent = container.superEncoder(forKey: AnyKey("super")).container(keyedBy: AnyKey.self)
            try parent.encode(1, forKey: AnyKey("q"))
            try container.encode(2, forKey: AnyKey("t"))
        case .copyWrittenAfterParentMoved:
            var nested = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("a"))
            var copy = nested
            try nested.encode(1, forKey: AnyKey("x"))
            try container.encode(2, forKey: AnyKey("b"))
            try? copy.encode(3, forKey: AnyKey("y"))
        default:
            try container.encode(1, forKey: AnyKey("a"))
            var again = encoder.container(keyedBy: AnyKey.self)
            try again.encode(2, forKey: AnyKey("a"))
        }
    }
}

private final class PathLog: @unchecked Sendable {
    var entries: [String] = []
    func record(_ label: String, _ path: [any CodingKey]) {
        entries.append(label + ":" + path.map { "\($0.stringValue)#\($0.intValue.map(String.init) ?? "-")" }.joined(separator: "/"))
    }
}

/// Records the coding paths of a single value, an unkeyed container, nested keyed and unkeyed containers, and a
/// value inside them.
private struct PathWalker: Encodable {
    let log: PathLog
    func encode(to encoder: any Encoder) throws {
        log.record("encoder", encoder.codingPath)
        var single = encoder.singleValueContainer()
        log.record("single", single.codingPath)
        try single.encode(Inner(log: log))
    }

    struct Inner: Encodable {
        let log: PathLog
        func encode(to encoder: any Encoder) throws {
            var unkeyed = encoder.unkeyedContainer()
            log.record("unkeyed", unkeyed.codingPath)
            try unkeyed.encode(0)
            var keyed = unkeyed.nestedContainer(keyedBy: AnyKey.self)
            log.record("unkeyed.keyed", keyed.codingPath)
            var list = keyed.nestedUnkeyedContainer(forKey: AnyKey("z"))
            log.record("unkeyed.keyed.unkeyed", list.codingPath)
            try list.encode(1)
            let inner = unkeyed.nestedUnkeyedContainer()
            log.record("unkeyed.unkeyed", inner.codingPath)
            try unkeyed.encode(Leaf(log: log))
        }
    }

    struct Leaf: Encodable {
        let log: PathLog
        func encode(to encoder: any Encoder) throws {
            log.record("leaf", encoder.codingPath)
            try 1.encode(to: encoder)
        }
    }
}
