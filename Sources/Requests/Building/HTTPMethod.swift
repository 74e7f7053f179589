#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// An HTTP method. The common ones are constants; any other token can be written as a string literal.
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The method as sent, such as `GET`.
    public let rawValue: String

    /// A method spelled `rawValue`; it is checked when the request is sent (see ``RequestBuildingError/invalidMethod(_:)``).
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// A method spelled `value`.
    public init(stringLiteral value: String) {
        self.init(rawValue: value)
    }

    /// The method as sent.
    public var description: String { rawValue }

    /// `GET`
    public static let get: HTTPMethod = "GET"
    /// `HEAD`
    public static let head: HTTPMethod = "HEAD"
    /// `POST`
    public static let post: HTTPMethod = "POST"
    /// `PUT`
    public static let put: HTTPMethod = "PUT"
    /// `PATCH`
    public static let patch: HTTPMethod = "PATCH"
    /// `DELETE`
    public static let delete: HTTPMethod = "DELETE"
    /// `OPTIONS`
    public static let options: HTTPMethod = "OPTIONS"
    /// `TRACE`
    public static let trace: HTTPMethod = "TRACE"
    /// `CONNECT`
    public static let connect: HTTPMethod = "CONNECT"
}

/// Header fields in order, with names compared without regard to case.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    /// One header field.
    public struct Field: Sendable, Equatable {
        /// The name as given.
        public var name: String
        /// The value.
        public var value: String

        /// A field `name: value`.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    private var fields: [Field] = []

    /// No fields.
    public init() {}

    /// The fields of `dictionary`, sorted by name so that the order is stable; of names that differ only in
    /// case, the last in that order is kept.
    public init(_ dictionary: [String: String]) {
        for (name, value) in dictionary.sorted(by: { $0.key < $1.key }) { self[name] = value }
    }

    /// The fields of a literal, in order; a repeated name keeps the last value.
    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { self[name] = value }
    }

    /// The value of the field called `name` (any case); setting replaces it, `nil` removes it.
    public subscript(name: String) -> String? {
        get { fields.first { $0.name.equalsIgnoringASCIICase(name) }?.value }
        set {
            let index = fields.firstIndex { $0.name.equalsIgnoringASCIICase(name) }
            fields.removeAll { $0.name.equalsIgnoringASCIICase(name) }
            guard let newValue else { return }
            fields.insert(Field(name: name, value: newValue), at: Swift.min(index ?? fields.count, fields.count))
        }
    }

    /// These fields with `other`'s added, replacing those with the same names.
    public func merging(_ other: HTTPHeaders) -> HTTPHeaders {
        other.reduce(into: self) { $0[$1.name] = $1.value }
    }

    /// Iterates over the fields in order.
    public func makeIterator() -> IndexingIterator<[Field]> {
        fields.makeIterator()
    }
}

/// Refuses methods and header fields that would change the meaning of the request on the wire.
///
/// On Linux, `URLRequest.setValue(_:forHTTPHeaderField:)` silently drops a value that holds CR, LF or NUL, but
/// keeps such a name, and keeps such a method: those would reach the wire. ``HTTPHeaders`` and ``Endpoint`` check
/// values before they are set, so that a bad value is an error rather than a missing header.
enum HeaderSafety {
    /// Throws ``RequestBuildingError`` when `request`'s method is not a token, or a header name is not a token, or a
    /// header value holds CR, LF or NUL.
    static func check(_ request: URLRequest) throws {
        let method = request.httpMethod ?? "GET"
        guard isToken(method) else { throw RequestBuildingError.invalidMethod(method) }
        for (name, value) in request.allHTTPHeaderFields ?? [:] {
            try check(name: name, value: value)
        }
    }

    /// Throws ``RequestBuildingError/invalidHeader(name:)`` unless `name` is a token and `value` has no CR, LF or NUL.
    static func check(name: String, value: String) throws {
        guard isToken(name), !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
            throw RequestBuildingError.invalidHeader(name: name)
        }
    }

    /// RFC 9110 `token`: one or more of ALPHA, DIGIT and ``!#$%&'*+-.^_`|~``.
    static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    return true
                default:
                    return "!#$%&'*+-.^_`|~".utf8.contains(byte)
                }
            }
    }
}

extension String {
    /// Whether the two are equal when ASCII letters are compared without case: how header names compare. Much
    /// cheaper than `caseInsensitiveCompare`, which goes through Foundation's Unicode rules.
    func equalsIgnoringASCIICase(_ other: String) -> Bool {
        let (a, b) = (utf8, other.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).allSatisfy { x, y in x == y || (x | 0x20 == y | 0x20 && (0x61...0x7a).contains(x | 0x20)) }
    }
}
