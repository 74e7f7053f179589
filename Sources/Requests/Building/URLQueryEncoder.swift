import Foundation

/// Encodes an `Encodable` value, or a dictionary, as a percent-encoded query string such as `a=1&b=x%20y`.
///
/// The result serves as a URL's `percentEncodedQuery` and as an `application/x-www-form-urlencoded` body.
/// - Keys and values are escaped with ``percentEncode(_:)`` (strict RFC 3986). That includes the brackets of
///   nested and array keys: `user[name]=ada` is written `user%5Bname%5D=ada`, which servers decode back
///   to brackets before they parse the key.
/// - Nested objects use bracket notation (`user[name]=ada&user[address][city]=London`); arrays follow
///   ``ArrayEncoding``.
/// - The keys of every object are sorted (by the mapped key, in `String` order) at every level, so the output is
///   deterministic; array elements keep their order, and the fields of each array element stay together.
/// - `nil` values are omitted (so are `nil` array elements, and `.indexed` counts only the elements kept).
///   Empty arrays and empty nested objects produce nothing.
/// - `Data` is written as standard Base64 (then percent-encoded), `URL` as its `absoluteString`, and `Decimal`,
///   integers and floating-point numbers as their `description`: `1.5` → `1.5`, `2.0` → `2.0`.
/// - Non-finite numbers (`.nan`, `.infinity`) and a top-level value that is not keyed (a bare string, number or
///   array) throw `EncodingError.invalidValue`.
public struct URLQueryEncoder: Sendable {
    /// How arrays are written.
    public enum ArrayEncoding: Sendable {
        /// `tags[]=a&tags[]=b` (the default).
        case brackets
        /// `tags=a&tags=b`.
        case noBrackets
        /// `tags[0]=a&tags[1]=b`.
        case indexed
    }

    /// How `Bool` values are written.
    public enum BoolEncoding: Sendable {
        /// `1` and `0` (the default).
        case numeric
        /// `true` and `false`.
        case literal
    }

    /// How `Date` values are written.
    public enum DateEncoding: Sendable {
        /// Internet date-time in UTC, such as `2026-11-21T10:00:00Z` (the default).
        /// Fractional seconds are dropped (rounded down to the whole second).
        case iso8601
        /// Seconds since 1970: `1795255200` when whole, otherwise with decimals such as `1795255200.5`.
        case secondsSince1970
        /// Milliseconds since 1970, rounded to the nearest whole millisecond, such as `1795255200500`.
        case millisecondsSince1970
        /// The string the formatter makes.
        case formatted(DateFormatter)
        /// The string the closure returns.
        case custom(@Sendable (Date) -> String)
    }

    /// How coding keys are turned into query keys. Like JSONEncoder, it leaves the keys of `String`-keyed
    /// dictionaries (including the dictionary passed to `encode(_:)`) as they are.
    public enum KeyEncoding: Sendable {
        /// Keys as they are (the default).
        case useDefaultKeys
        /// JSONEncoder's rules, quirks included: `accessToken` → `access_token`, `myURLValue` → `my_url_value`,
        /// but a leading acronym splits oddly (`URLValue` → `u_rl_value`).
        case convertToSnakeCase
        /// The string the closure returns for each key.
        case custom(@Sendable (String) -> String)
    }

    /// How arrays are written; `.brackets` by default.
    public var arrayEncoding: ArrayEncoding
    /// How `Bool` values are written; `.numeric` by default.
    public var boolEncoding: BoolEncoding
    /// How `Date` values are written; `.iso8601` by default.
    public var dateEncoding: DateEncoding
    /// How keys are mapped; `.useDefaultKeys` by default.
    public var keyEncoding: KeyEncoding

    /// Creates an encoder; every option has the default shown.
    public init(
        arrayEncoding: ArrayEncoding = .brackets,
        boolEncoding: BoolEncoding = .numeric,
        dateEncoding: DateEncoding = .iso8601,
        keyEncoding: KeyEncoding = .useDefaultKeys
    ) {
        self.arrayEncoding = arrayEncoding
        self.boolEncoding = boolEncoding
        self.dateEncoding = dateEncoding
        self.keyEncoding = keyEncoding
    }

    /// Encodes a keyed value (a struct, class or dictionary) as `key=value` pairs joined by `&`.
    public func encode<T: Encodable>(_ value: T) throws -> String {
        let root = Node()
        try box(value, into: root, at: [])
        guard root.shape == .object else {
            let message = "URLQueryEncoder needs a keyed top-level value (a struct, class or dictionary), not \(T.self)."
            throw EncodingError.invalidValue(value, EncodingError.Context(codingPath: [], debugDescription: message))
        }
        return render(root)
    }

    /// Encodes a dictionary of parameters, with the same rules as the generic `encode(_:)`.
    public func encode(_ parameters: [String: any Encodable & Sendable]) throws -> String {
        let root = Node()
        root.makeObject()
        for (key, value) in parameters { try box(value, into: root.child(key), at: [AnyKey(stringValue: key)]) }
        return render(root)
    }

    /// Percent-encodes `text` per RFC 3986: only `A–Z a–z 0–9 - . _ ~` pass through; every other UTF-8 byte
    /// becomes `%XX` with uppercase hex (a space becomes `%20`, never `+`).
    public static func percentEncode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".unicodeScalars)
        var result = String.UnicodeScalarView()
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "_"), UInt8(ascii: "~"):
                result.append(Unicode.Scalar(byte))
            default:
                result.append("%")
                result.append(hex[Int(byte >> 4)])
                result.append(hex[Int(byte & 0x0F)])
            }
        }
        return String(result)
    }

    // MARK: - Values

    /// Stores `value` in `node`: leaf types become scalars, anything else encodes itself into the node.
    fileprivate func box<T: Encodable>(_ value: T, into node: Node, at path: [any CodingKey]) throws {
        func nonFinite(_ number: Any) -> EncodingError {
            .invalidValue(value, EncodingError.Context(codingPath: path, debugDescription: "Non-finite number \(number) cannot be encoded in a query string."))
        }
        switch value {
        case let bool as Bool:
            node.set(boolEncoding == .numeric ? (bool ? "1" : "0") : (bool ? "true" : "false"))
        case let string as String:
            node.set(string)
        case let double as Double:
            guard double.isFinite else { throw nonFinite(double) }
            node.set(double.description)
        case let float as Float:
            guard float.isFinite else { throw nonFinite(float) }
            node.set(float.description)
        case let decimal as Decimal:
            guard !decimal.isNaN else { throw nonFinite(decimal) }
            node.set(decimal.description)
        case let integer as any BinaryInteger:
            node.set("\(integer)")
        case let date as Date:
            node.set(try format(date, orThrow: nonFinite))
        case let data as Data:
            node.set(data.base64EncodedString())
        case let url as URL:
            node.set(url.absoluteString)
        case let dictionary as [String: any Encodable]:
            node.makeObject()
            for (key, element) in dictionary {
                try box(element, into: node.child(key), at: path + [AnyKey(stringValue: key)])
            }
        default:
            try value.encode(to: QueryEncoder(node: node, codingPath: path, options: self))
        }
    }

    private func format(_ date: Date, orThrow error: (Any) -> EncodingError) throws -> String {
        let seconds = date.timeIntervalSince1970
        guard seconds.isFinite else { throw error(seconds) }
        func plain(_ number: Double) -> String {
            number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : number.description
        }
        switch dateEncoding {
        case .iso8601: return ISO8601DateFormatter().string(from: date)
        case .secondsSince1970: return plain(seconds)
        case .millisecondsSince1970: return plain((seconds * 1000).rounded())
        case .formatted(let formatter): return formatter.string(from: date)
        case .custom(let format): return format(date)
        }
    }

    fileprivate func mapKey(_ key: String) -> String {
        switch keyEncoding {
        case .useDefaultKeys: return key
        case .custom(let map): return map(key)
        case .convertToSnakeCase:
            // JSONEncoder's algorithm: a word ends before each capital after the first character; in a run of
            // capitals followed by lowercase letters, the last capital starts the next word.
            let characters = Array(key)
            guard !characters.isEmpty else { return key }
            var words: [ArraySlice<Character>] = []
            var (wordStart, searchStart) = (0, 1)
            while let upper = characters[searchStart...].firstIndex(where: \.isUppercase) {
                words.append(characters[wordStart..<upper])
                guard let lower = characters[upper...].firstIndex(where: \.isLowercase) else { wordStart = upper; break }
                if lower == upper + 1 {
                    wordStart = upper
                } else {
                    words.append(characters[upper..<lower - 1])
                    wordStart = lower - 1
                }
                searchStart = lower + 1
            }
            words.append(characters[wordStart...])
            return words.map { String($0).lowercased() }.joined(separator: "_")
        }
    }

    private func render(_ root: Node) -> String {
        var pairs: [(key: String, value: String)] = []
        flatten(root, name: nil, into: &pairs)
        return pairs.map { Self.percentEncode($0.key) + "=" + Self.percentEncode($0.value) }.joined(separator: "&")
    }

    /// Appends the pairs under `node`; `name` is the key built so far (`nil` at the top level).
    private func flatten(_ node: Node, name: String?, into pairs: inout [(key: String, value: String)]) {
        switch node.shape {
        case .empty: break
        case .scalar: pairs.append((name ?? "", node.scalar))
        case .object:
            for (key, child) in node.fields.sorted(by: { $0.key < $1.key }) {
                flatten(child, name: name.map { "\($0)[\(key)]" } ?? key, into: &pairs)
            }
        case .array:
            for (index, element) in node.elements.filter(\.producesPairs).enumerated() {
                let suffix: String
                switch arrayEncoding {
                case .brackets: suffix = "[]"
                case .noBrackets: suffix = ""
                case .indexed: suffix = "[\(index)]"
                }
                flatten(element, name: (name ?? "") + suffix, into: &pairs)
            }
        }
    }
}

// MARK: - Encoder

/// One value of the tree the encoder builds; the last write to a node wins.
private final class Node {
    /// Whether flattening gives at least one pair: an empty array or object, or one holding only such, gives none.
    var producesPairs: Bool {
        switch shape {
        case .empty: return false
        case .scalar: return true
        case .object: return fields.values.contains(where: \.producesPairs)
        case .array: return elements.contains(where: \.producesPairs)
        }
    }

    enum Shape { case empty, scalar, array, object }
    private(set) var shape = Shape.empty
    private(set) var scalar = ""
    private(set) var elements: [Node] = []
    private(set) var fields: [String: Node] = [:]

    private func become(_ newShape: Shape) {
        guard shape != newShape else { return }
        (shape, scalar, elements, fields) = (newShape, "", [], [:])
    }
    func clear() { become(.empty) }
    func set(_ text: String) { become(.scalar); scalar = text }
    func makeObject() { become(.object) }
    func makeArray() { become(.array) }
    func child(_ name: String) -> Node {
        become(.object)
        if let existing = fields[name] { return existing }
        let node = Node()
        fields[name] = node
        return node
    }
    func append() -> Node {
        become(.array)
        let node = Node()
        elements.append(node)
        return node
    }
}

private struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) { (stringValue, self.intValue) = ("\(intValue)", intValue) }
}

/// The `Encoder` handed to values; it also serves as their single-value container.
/// Its generic `encode` methods stand in for the per-type requirements of the container protocols.
private final class QueryEncoder: Encoder, SingleValueEncodingContainer {
    let node: Node
    let codingPath: [any CodingKey]
    let options: URLQueryEncoder
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(node: Node, codingPath: [any CodingKey], options: URLQueryEncoder) {
        (self.node, self.codingPath, self.options) = (node, codingPath, options)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        node.makeObject()
        return KeyedEncodingContainer(KeyedContainer<Key>(encoder: self))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        node.makeArray()
        return UnkeyedContainer(encoder: self)
    }
    func singleValueContainer() -> any SingleValueEncodingContainer { self }
    func encodeNil() { node.clear() }
    func encode<T: Encodable>(_ value: T) throws { try options.box(value, into: node, at: codingPath) }

    /// An encoder for a new child of this node, named `key` (objects) or appended (arrays).
    func child(_ key: any CodingKey, appending: Bool = false) -> QueryEncoder {
        let childNode = appending ? node.append() : node.child(options.mapKey(key.stringValue))
        return QueryEncoder(node: childNode, codingPath: codingPath + [key], options: options)
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: QueryEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    mutating func encodeNil(forKey key: Key) { encoder.child(key).node.clear() }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try encoder.child(key).encode(value) }
    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        encoder.child(key).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        encoder.child(key).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder { encoder.child(AnyKey(stringValue: "super")) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { encoder.child(key) }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let encoder: QueryEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }
    var count: Int { encoder.node.elements.count }

    private func next() -> QueryEncoder { encoder.child(AnyKey(intValue: count), appending: true) }
    mutating func encodeNil() { _ = next() }
    mutating func encode<T: Encodable>(_ value: T) throws { try next().encode(value) }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        next().container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { next().unkeyedContainer() }
    mutating func superEncoder() -> any Encoder { next() }
}
