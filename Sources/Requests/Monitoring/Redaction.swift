#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Which header values, query parameters and JSON fields are hidden when an exchange is written out (by
/// ``RequestLogger`` and ``HARRecorder``), and how.
public struct Redaction: Sendable {
    /// What a hidden value is replaced with.
    public static let placeholder = "<redacted>"
    /// `Authorization`, `Cookie`, `Proxy-Authorization` and `Set-Cookie`.
    public static let credentialHeaders: Set<String> = ["Authorization", "Cookie", "Proxy-Authorization", "Set-Cookie"]
    /// Hides nothing: an explicit opt-out.
    public static let none = Redaction(headers: [], queryItems: [], jsonFields: [])

    /// Headers whose values are hidden, compared without regard to case. Default: ``credentialHeaders``.
    public var headers: Set<String> {
        didSet { lowercasedHeaders = Set(headers.map { $0.lowercased() }) }
    }
    /// Query parameters whose values are hidden, compared without regard to case, such as `api_key`.
    /// Default: none.
    public var queryItems: Set<String> {
        didSet { lowercasedQueryItems = Set(queryItems.map { $0.lowercased() }) }
    }
    /// Fields of JSON bodies whose values are hidden, at any depth, compared without regard to case, such as
    /// `password` or `access_token`. Only ``HARRecorder`` writes bodies. Default: none.
    public var jsonFields: Set<String> {
        didSet { lowercasedJSONFields = Set(jsonFields.map { $0.lowercased() }) }
    }
    private var lowercasedHeaders: Set<String>
    private var lowercasedQueryItems: Set<String>
    private var lowercasedJSONFields: Set<String>

    /// A redaction of `headers`, `queryItems` and `jsonFields`.
    public init(headers: Set<String> = Redaction.credentialHeaders, queryItems: Set<String> = [], jsonFields: Set<String> = []) {
        self.headers = headers
        self.queryItems = queryItems
        self.jsonFields = jsonFields
        lowercasedHeaders = Set(headers.map { $0.lowercased() })
        lowercasedQueryItems = Set(queryItems.map { $0.lowercased() })
        lowercasedJSONFields = Set(jsonFields.map { $0.lowercased() })
    }

    /// `value`, or the placeholder when `name` is a hidden header.
    public func value(_ value: String, ofHeader name: String) -> String {
        lowercasedHeaders.contains(name.lowercased()) ? Self.placeholder : value
    }

    /// `url` as text, with the values of hidden query parameters and any password replaced by the placeholder
    /// (the placeholder alone if the URL cannot be taken apart).
    public func string(for url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return Self.placeholder }
        let (query, fragment) = (components.percentEncodedQuery, components.percentEncodedFragment)
        (components.percentEncodedQuery, components.percentEncodedFragment) = (nil, nil)
        if components.password != nil { components.percentEncodedPassword = "PASSWORD" }
        var text = (components.string ?? url.absoluteString).replacingOccurrences(of: ":PASSWORD@", with: ":\(Self.placeholder)@")
        if let query {
            let items = query.split(separator: "&", omittingEmptySubsequences: false).map { item -> String in
                let name = item.split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
                let decoded = (name.removingPercentEncoding ?? name).lowercased()
                guard lowercasedQueryItems.contains(decoded), item.contains("=") else { return String(item) }
                return "\(name)=\(Self.placeholder)"
            }
            text += "?" + items.joined(separator: "&")
        }
        if let fragment { text += "#" + fragment }
        return text
    }

    /// `headers` as `Name: value` pairs sorted by name, with hidden values replaced.
    public func lines(for headers: [String: String]) -> [String] {
        fields(headers).map { "\($0.name): \($0.value)" }
    }

    /// `headers` sorted by name without regard to case, with hidden values replaced: what ``lines(for:)`` and
    /// ``HARRecorder`` write.
    func fields(_ headers: [String: String]) -> [(name: String, value: String)] {
        headers.sorted { $0.key.lowercased() < $1.key.lowercased() }.map { ($0.key, value($0.value, ofHeader: $0.key)) }
    }

    /// `body` with the values of hidden JSON fields replaced by the placeholder, as compact JSON; `body` itself when
    /// no field is hidden, or when it is not JSON.
    public func json(_ body: Data) -> Data {
        guard !lowercasedJSONFields.isEmpty, let value = try? JSONSerialization.jsonObject(with: body, options: .fragmentsAllowed) else {
            return body
        }
        var changed = false
        let redacted = hidingFields(in: value, changed: &changed)
        guard changed, let data = try? JSONSerialization.data(withJSONObject: redacted, options: [.sortedKeys, .fragmentsAllowed]) else {
            return body
        }
        return data
    }

    private func hidingFields(in value: Any, changed: inout Bool) -> Any {
        if let object = value as? [String: Any] {
            var result: [String: Any] = [:]
            for (key, field) in object {
                if lowercasedJSONFields.contains(key.lowercased()) {
                    (result[key], changed) = (Self.placeholder, true)
                } else {
                    result[key] = hidingFields(in: field, changed: &changed)
                }
            }
            return result
        }
        if let array = value as? [Any] {
            return array.map { hidingFields(in: $0, changed: &changed) }
        }
        return value
    }
}
