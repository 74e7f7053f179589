#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Which header values and query parameters are hidden when a request is written out (by
/// ``RequestLogger``), and how.
public struct Redaction: Sendable {
    /// What a hidden value is replaced with.
    public static let placeholder = "<redacted>"
    /// `Authorization`, `Cookie`, `Proxy-Authorization` and `Set-Cookie`.
    public static let credentialHeaders: Set<String> = ["Authorization", "Cookie", "Proxy-Authorization", "Set-Cookie"]
    /// Hides nothing: an explicit opt-out.
    public static let none = Redaction(headers: [], queryItems: [])

    /// Headers whose values are hidden, compared without regard to case. Default: ``credentialHeaders``.
    public var headers: Set<String> {
        didSet { lowercasedHeaders = Set(headers.map { $0.lowercased() }) }
    }
    /// Query parameters whose values are hidden, compared without regard to case, such as `api_key`.
    /// Default: none.
    public var queryItems: Set<String> {
        didSet { lowercasedQueryItems = Set(queryItems.map { $0.lowercased() }) }
    }
    private var lowercasedHeaders: Set<String>
    private var lowercasedQueryItems: Set<String>

    /// A redaction of `headers` and `queryItems`.
    public init(headers: Set<String> = Redaction.credentialHeaders, queryItems: Set<String> = []) {
        self.headers = headers
        self.queryItems = queryItems
        lowercasedHeaders = Set(headers.map { $0.lowercased() })
        lowercasedQueryItems = Set(queryItems.map { $0.lowercased() })
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
        headers.sorted { $0.key.lowercased() < $1.key.lowercased() }.map { "\($0.key): \(value($0.value, ofHeader: $0.key))" }
    }
}
