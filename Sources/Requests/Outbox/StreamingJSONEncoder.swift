import Foundation

/// Writes a value as JSON in one pass, for the requests the outbox stores: `JSONEncoder` first builds a tree of the
/// whole value and then writes it, about three times the work for a small request (callgrind: 17,500 instructions
/// for a three-field request, most of an enqueue's own work).
///
/// The output decodes with `JSONDecoder` (default strategies) to what `JSONEncoder`'s output decodes to: dates as
/// `deferredToDate` (the date's own encoding), data as Base64, URLs as their absolute string, floats without a
/// trailing `.0`. Only the order of keys (here, the order they were encoded in) and the escaping of `/` differ.
///
/// What one pass cannot write is encoded again by `JSONEncoder`, so that the result, or the error, is its own: a
/// container written to after a container opened after it, a key written twice, a super-encoder, a `Decimal`, a
/// non-finite float, nothing encoded at the top, and any error thrown during the pass, even one the value's own code
/// catches. The value's `encode(to:)` then runs twice. Containers nested 512 deep throw `JSONEncoder`'s error at
/// once (`JSONDecoder` could not read them back).
///
/// One difference remains, by choice: a value inside a nested container sees its full coding path (`z/Index 0`),
/// where `JSONEncoder` (swift-foundation) leaves out the nested containers' keys (`Index 0`).
enum StreamingJSONEncoder {
    /// The JSON of `value`.
    static func encode<T: Encodable>(_ value: T) throws -> Data {
        let writer = StreamingJSONWriter()
        if (try? writer.encodeValue(value, path: nil)) != nil, let bytes = writer.finish() { return Data(bytes) }
        if writer.isTooDeep {
            // `JSONEncoder`'s own error: it refuses this depth (`JSONDecoder` could not read it), and past a few
            // ten thousand levels it would overflow the stack instead.
            throw EncodingError.invalidValue(value, EncodingError.Context(codingPath: [], debugDescription: "Unable to encode the given top-level value to JSON."))
        }
        return try JSONEncoder().encode(value)
    }

    /// The JSON of `value` written in one pass, or `nil` where one pass cannot write it.
    static func onePass<T: Encodable>(_ value: T) -> [UInt8]? {
        let writer = StreamingJSONWriter()
        guard (try? writer.encodeValue(value, path: nil)) != nil else { return nil }
        return writer.finish()
    }
}

/// A coding path, shared by the containers and values below it.
final class StreamingCodingPath {
    let parent: StreamingCodingPath?
    let key: any CodingKey

    init(_ parent: StreamingCodingPath?, _ key: any CodingKey) {
        self.parent = parent
        self.key = key
    }

    static func keys(of node: StreamingCodingPath?) -> [any CodingKey] {
        var keys: [any CodingKey] = []
        var node = node
        while let current = node {
            keys.append(current.key)
            node = current.parent
        }
        return keys.reversed()
    }
}

/// The key of an array element in a coding path, as `JSONEncoder` names it.
struct StreamingIndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "Index \(intValue ?? 0)" }
    init(index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

/// The bytes written so far and the containers still open. Containers and value encoders refer to it; every write
/// checks that it goes where one pass can still put it, and otherwise marks the pass failed (throwing where the API
/// throws), so that a caller who ignores the error still gets `JSONEncoder`'s result.
///
/// The state is a struct behind a pointer the writer owns: each access to a class's stored `var` costs a dynamic
/// exclusivity check (about 200 instructions here, forty times per small request), a pointer's none. Its methods
/// are leaves (they never call back into a value's `encode(to:)`), so no two accesses overlap.
final class StreamingJSONWriter {
    /// A container's place: its identifier and how deep it is among the open containers.
    struct Container {
        let identifier: Int
        let depth: Int
        static let none = Container(identifier: -1, depth: -1)
    }

    /// Thrown where a pass cannot go on.
    struct Unsupported: Error {}

    private let output: UnsafeMutablePointer<StreamingJSONOutput>

    init() {
        output = .allocate(capacity: 1)
        output.initialize(to: StreamingJSONOutput())
    }

    deinit {
        output.deinitialize(count: 1)
        output.deallocate()
    }

    /// Marks the pass failed; returns the error to throw where the API throws.
    @discardableResult
    func fail() -> Unsupported {
        output.pointee.failed = true
        return Unsupported()
    }

    /// The bytes, with the open containers closed; `nil` if the pass failed or encoded nothing.
    func finish() -> [UInt8]? { output.pointee.finish() }

    /// Starts the next element of `container`: closes the containers opened after it, writes the comma.
    func element(of container: Container) throws {
        guard output.pointee.element(of: container) else { throw fail() }
    }

    /// Starts the member `key` of `container`, up to its colon.
    func member(of container: Container, key: String) throws {
        guard output.pointee.member(of: container, key: key) else { throw fail() }
    }

    /// The number of elements `container` holds, while it is open.
    func count(of container: Container) -> Int? { output.pointee.count(of: container) }

    /// A new value slot, to be filled next.
    func expectValue() -> Int { output.pointee.expectValue() }

    /// Fills the slot `token`; throws if it is not the slot to fill.
    func fill(_ token: Int) throws {
        guard output.pointee.fill(token) else { throw fail() }
    }

    /// Whether `token` is the slot to fill: the value left nothing in it.
    func isEmpty(_ token: Int) -> Bool { output.pointee.isEmpty(token) }

    /// Opens a container in the slot `token`.
    func openContainer(in token: Int, keyed: Bool) -> Container { output.pointee.openContainer(in: token, keyed: keyed) }

    /// Whether the pass failed on containers nested deeper than `JSONEncoder` writes.
    var isTooDeep: Bool { output.pointee.isTooDeep }

    /// Encodes `value` into a new slot: the special cases of `JSONEncoder`, or the value's own encoding.
    func encodeValue<T: Encodable>(_ value: T, path: StreamingCodingPath?) throws {
        let token = expectValue()
        if T.self == Data.self, let data = value as? Data {
            try fill(token)
            string(data.base64EncodedString())
        } else if T.self == URL.self, let url = value as? URL {
            try fill(token)
            string(url.absoluteString)
        } else if T.self == Decimal.self {
            throw fail()
        } else {
            let encoder = StreamingValueEncoder(writer: self, token: token, path: path)
            do {
                try value.encode(to: encoder)
            } catch {
                // Even if the caller catches it, what the value wrote before throwing must not stay.
                fail()
                throw error
            }
            // Nothing encoded: `JSONEncoder` writes an empty object, except at the top, where it throws.
            if isEmpty(token) {
                guard path != nil else { throw fail() }
                _ = openContainer(in: token, keyed: true)
            }
        }
    }

    func null() { output.pointee.bytes.append(contentsOf: "null".utf8) }

    func bool(_ value: Bool) { output.pointee.bytes.append(contentsOf: (value ? "true" : "false").utf8) }

    func integer<T: FixedWidthInteger>(_ value: T) { output.pointee.bytes.append(contentsOf: value.description.utf8) }

    /// A finite float as `JSONEncoder` writes it; a non-finite one fails the pass (its error is `JSONEncoder`'s).
    func float<T: BinaryFloatingPoint & LosslessStringConvertible>(_ value: T) throws {
        guard value.isFinite else { throw fail() }
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        output.pointee.bytes.append(contentsOf: text.utf8)
    }

    /// `value` quoted, with `"`, `\` and the control characters escaped.
    func string(_ value: String) { output.pointee.string(value) }
}

/// What a `StreamingJSONWriter` has written, and where it is.
struct StreamingJSONOutput {
    private struct Open {
        let identifier: Int
        let keyed: Bool
        var count: Int
        /// Where its keys start in `keys`.
        let firstKey: Int
        /// Its keys once it has more than `fewKeys` (a linear search would make a large object quadratic).
        var manyKeys: Set<String>?
    }

    /// Up to this many keys per object are searched linearly.
    private static let fewKeys = 16

    var bytes: [UInt8] = []
    private var open: [Open] = []
    /// The keys written in the open keyed containers, each container's after its parent's.
    private var keys: [String] = []
    private var nextIdentifier = 0
    /// The value slot a key or an array element's start left, to be filled by one value: its token, or 0.
    private var expecting = 0
    private var nextToken = 0
    var failed = false
    private(set) var isTooDeep = false
    /// The deepest nesting `JSONEncoder` writes (and `JSONDecoder` reads).
    static let maximumDepth = 511

    init() {
        bytes.reserveCapacity(256)
    }

    mutating func finish() -> [UInt8]? {
        guard !failed, expecting == 0, !bytes.isEmpty else { return nil }
        while !open.isEmpty { close() }
        return bytes
    }

    mutating func element(of container: StreamingJSONWriter.Container) -> Bool {
        guard !failed, expecting == 0, container.depth >= 0, container.depth < open.count,
            open[container.depth].identifier == container.identifier
        else { return false }
        while open.count > container.depth + 1 { close() }
        if open[container.depth].count > 0 { bytes.append(UInt8(ascii: ",")) }
        open[container.depth].count += 1
        return true
    }

    mutating func member(of container: StreamingJSONWriter.Container, key: String) -> Bool {
        guard element(of: container), isNew(key, at: container.depth) else { return false }
        string(key)
        bytes.append(UInt8(ascii: ":"))
        return true
    }

    /// Whether `key` is new in the open object at `depth` (the deepest open one), which then records it.
    private mutating func isNew(_ key: String, at depth: Int) -> Bool {
        let first = open[depth].firstKey
        if open[depth].manyKeys != nil { return open[depth].manyKeys?.insert(key).inserted ?? false }
        guard !keys[first...].contains(key) else { return false }
        if keys.count - first < Self.fewKeys {
            keys.append(key)
        } else {
            open[depth].manyKeys = Set(keys[first...]).union([key])
            keys.removeSubrange(first...)
        }
        return true
    }

    func count(of container: StreamingJSONWriter.Container) -> Int? {
        guard container.depth >= 0, container.depth < open.count, open[container.depth].identifier == container.identifier else { return nil }
        return open[container.depth].count
    }

    mutating func expectValue() -> Int {
        nextToken += 1
        expecting = nextToken
        return nextToken
    }

    mutating func fill(_ token: Int) -> Bool {
        guard !failed, token != 0, expecting == token else { return false }
        expecting = 0
        return true
    }

    func isEmpty(_ token: Int) -> Bool { !failed && expecting == token }

    mutating func openContainer(in token: Int, keyed: Bool) -> StreamingJSONWriter.Container {
        guard open.count < Self.maximumDepth else {
            isTooDeep = true
            failed = true
            return .none
        }
        guard fill(token) else {
            failed = true
            return .none
        }
        bytes.append(UInt8(ascii: keyed ? "{" : "["))
        nextIdentifier += 1
        open.append(Open(identifier: nextIdentifier, keyed: keyed, count: 0, firstKey: keys.count))
        return StreamingJSONWriter.Container(identifier: nextIdentifier, depth: open.count - 1)
    }

    private mutating func close() {
        let last = open.removeLast()
        bytes.append(UInt8(ascii: last.keyed ? "}" : "]"))
        keys.removeSubrange(last.firstKey...)
    }

    mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var start = 0
            for (index, byte) in utf8.enumerated() where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                escape(byte)
                start = index + 1
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func escape(_ byte: UInt8) {
        bytes.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
        case 0x08: bytes.append(UInt8(ascii: "b"))
        case 0x0C: bytes.append(UInt8(ascii: "f"))
        case 0x0A: bytes.append(UInt8(ascii: "n"))
        case 0x0D: bytes.append(UInt8(ascii: "r"))
        case 0x09: bytes.append(UInt8(ascii: "t"))
        default:
            let hex = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
        }
    }
}
