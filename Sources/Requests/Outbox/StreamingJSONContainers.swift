import Foundation

// The `Encoder` and the three containers of `StreamingJSONEncoder`. Each writes through the shared writer, which
// checks that the write goes where one pass can still put it.

/// The encoder a value's `encode(to:)` is given: it fills one slot, with one container or one single value.
final class StreamingValueEncoder: Encoder {
    private let writer: StreamingJSONWriter
    /// The slot this encoder fills.
    private let token: Int
    private let path: StreamingCodingPath?
    /// The container it opened, to give again if asked again while it is open.
    private var opened: (container: StreamingJSONWriter.Container, keyed: Bool)?

    init(writer: StreamingJSONWriter, token: Int, path: StreamingCodingPath?) {
        self.writer = writer
        self.token = token
        self.path = path
    }

    var codingPath: [any CodingKey] { StreamingCodingPath.keys(of: path) }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(StreamingKeyedContainer<Key>(writer: writer, container: containerToUse(keyed: true), path: path))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        StreamingUnkeyedContainer(writer: writer, container: containerToUse(keyed: false), path: path)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        StreamingSingleValueContainer(writer: writer, token: token, path: path)
    }

    /// The container opened in this encoder's slot: a new one, or the one asked for before while it is open.
    private func containerToUse(keyed: Bool) -> StreamingJSONWriter.Container {
        if let opened {
            guard opened.keyed == keyed, writer.count(of: opened.container) != nil else {
                writer.fail()
                return .none
            }
            return opened.container
        }
        let container = writer.openContainer(in: token, keyed: keyed)
        opened = (container, keyed)
        return container
    }
}

/// An encoder for what a pass cannot write (a super-encoder): it fails the pass.
private struct StreamingFailedEncoder: Encoder {
    let writer: StreamingJSONWriter
    let path: StreamingCodingPath?

    var codingPath: [any CodingKey] { StreamingCodingPath.keys(of: path) }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        writer.fail()
        return KeyedEncodingContainer(StreamingKeyedContainer<Key>(writer: writer, container: .none, path: path))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        writer.fail()
        return StreamingUnkeyedContainer(writer: writer, container: .none, path: path)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        writer.fail()
        return StreamingSingleValueContainer(writer: writer, token: 0, path: path)
    }
}

struct StreamingKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: StreamingJSONWriter
    let container: StreamingJSONWriter.Container
    let path: StreamingCodingPath?

    var codingPath: [any CodingKey] { StreamingCodingPath.keys(of: path) }

    private func member(_ key: Key) throws { try writer.member(of: container, key: key.stringValue) }

    mutating func encodeNil(forKey key: Key) throws {
        try member(key)
        writer.null()
    }
    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try member(key)
        writer.bool(value)
    }
    mutating func encode(_ value: String, forKey key: Key) throws {
        try member(key)
        writer.string(value)
    }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        try member(key)
        try writer.float(value)
    }
    mutating func encode(_ value: Float, forKey key: Key) throws {
        try member(key)
        try writer.float(value)
    }
    mutating func encode(_ value: Int, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try integer(value, key) }
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
    mutating func encode(_ value: Int128, forKey key: Key) throws { try integer(value, key) }
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
    mutating func encode(_ value: UInt128, forKey key: Key) throws { try integer(value, key) }

    private func integer<T: FixedWidthInteger>(_ value: T, _ key: Key) throws {
        try member(key)
        writer.integer(value)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try member(key)
        try writer.encodeValue(value, path: StreamingCodingPath(path, key))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(StreamingKeyedContainer<NestedKey>(writer: writer, container: nested(key, keyed: true), path: StreamingCodingPath(path, key)))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        StreamingUnkeyedContainer(writer: writer, container: nested(key, keyed: false), path: StreamingCodingPath(path, key))
    }

    private func nested(_ key: Key, keyed: Bool) -> StreamingJSONWriter.Container {
        guard (try? member(key)) != nil else { return .none }
        return writer.openContainer(in: writer.expectValue(), keyed: keyed)
    }

    mutating func superEncoder() -> any Encoder {
        writer.fail()
        return StreamingFailedEncoder(writer: writer, path: path)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        writer.fail()
        return StreamingFailedEncoder(writer: writer, path: StreamingCodingPath(path, key))
    }
}

struct StreamingUnkeyedContainer: UnkeyedEncodingContainer {
    let writer: StreamingJSONWriter
    let container: StreamingJSONWriter.Container
    let path: StreamingCodingPath?

    var codingPath: [any CodingKey] { StreamingCodingPath.keys(of: path) }
    var count: Int { writer.count(of: container) ?? 0 }

    mutating func encodeNil() throws {
        try writer.element(of: container)
        writer.null()
    }
    mutating func encode(_ value: Bool) throws {
        try writer.element(of: container)
        writer.bool(value)
    }
    mutating func encode(_ value: String) throws {
        try writer.element(of: container)
        writer.string(value)
    }
    mutating func encode(_ value: Double) throws {
        try writer.element(of: container)
        try writer.float(value)
    }
    mutating func encode(_ value: Float) throws {
        try writer.element(of: container)
        try writer.float(value)
    }
    mutating func encode(_ value: Int) throws { try integer(value) }
    mutating func encode(_ value: Int8) throws { try integer(value) }
    mutating func encode(_ value: Int16) throws { try integer(value) }
    mutating func encode(_ value: Int32) throws { try integer(value) }
    mutating func encode(_ value: Int64) throws { try integer(value) }
    mutating func encode(_ value: UInt) throws { try integer(value) }
    mutating func encode(_ value: UInt8) throws { try integer(value) }
    mutating func encode(_ value: UInt16) throws { try integer(value) }
    mutating func encode(_ value: UInt32) throws { try integer(value) }
    mutating func encode(_ value: UInt64) throws { try integer(value) }
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
    mutating func encode(_ value: Int128) throws { try integer(value) }
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
    mutating func encode(_ value: UInt128) throws { try integer(value) }

    private func integer<T: FixedWidthInteger>(_ value: T) throws {
        try writer.element(of: container)
        writer.integer(value)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try writer.element(of: container)
        try writer.encodeValue(value, path: StreamingCodingPath(path, StreamingIndexKey(index: count - 1)))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let index = StreamingIndexKey(index: count)
        return KeyedEncodingContainer(StreamingKeyedContainer<NestedKey>(writer: writer, container: nested(keyed: true), path: StreamingCodingPath(path, index)))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let index = StreamingIndexKey(index: count)
        return StreamingUnkeyedContainer(writer: writer, container: nested(keyed: false), path: StreamingCodingPath(path, index))
    }

    private func nested(keyed: Bool) -> StreamingJSONWriter.Container {
        guard (try? writer.element(of: container)) != nil else { return .none }
        return writer.openContainer(in: writer.expectValue(), keyed: keyed)
    }

    mutating func superEncoder() -> any Encoder {
        writer.fail()
        return StreamingFailedEncoder(writer: writer, path: StreamingCodingPath(path, StreamingIndexKey(index: count)))
    }
}

struct StreamingSingleValueContainer: SingleValueEncodingContainer {
    let writer: StreamingJSONWriter
    /// The slot it fills.
    let token: Int
    let path: StreamingCodingPath?

    var codingPath: [any CodingKey] { StreamingCodingPath.keys(of: path) }

    mutating func encodeNil() throws {
        try writer.fill(token)
        writer.null()
    }
    mutating func encode(_ value: Bool) throws {
        try writer.fill(token)
        writer.bool(value)
    }
    mutating func encode(_ value: String) throws {
        try writer.fill(token)
        writer.string(value)
    }
    mutating func encode(_ value: Double) throws {
        try writer.fill(token)
        try writer.float(value)
    }
    mutating func encode(_ value: Float) throws {
        try writer.fill(token)
        try writer.float(value)
    }
    mutating func encode(_ value: Int) throws { try integer(value) }
    mutating func encode(_ value: Int8) throws { try integer(value) }
    mutating func encode(_ value: Int16) throws { try integer(value) }
    mutating func encode(_ value: Int32) throws { try integer(value) }
    mutating func encode(_ value: Int64) throws { try integer(value) }
    mutating func encode(_ value: UInt) throws { try integer(value) }
    mutating func encode(_ value: UInt8) throws { try integer(value) }
    mutating func encode(_ value: UInt16) throws { try integer(value) }
    mutating func encode(_ value: UInt32) throws { try integer(value) }
    mutating func encode(_ value: UInt64) throws { try integer(value) }
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
    mutating func encode(_ value: Int128) throws { try integer(value) }
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, visionOS 2.0, *)
    mutating func encode(_ value: UInt128) throws { try integer(value) }

    private func integer<T: FixedWidthInteger>(_ value: T) throws {
        try writer.fill(token)
        writer.integer(value)
    }

    /// The value's own encoding (or a special case) in this slot, at the same path, as `JSONEncoder` does.
    mutating func encode<T: Encodable>(_ value: T) throws {
        try writer.fill(token)
        try writer.encodeValue(value, path: path)
    }
}
