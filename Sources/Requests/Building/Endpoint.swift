#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Where and how a request is sent, declared as data: a base URL, a path, a method, query parameters,
/// headers and a body. Nothing is checked or encoded until ``url()`` or ``urlRequest()``, which throw a clear
/// error for bad input, so declaring an endpoint never fails (``description``, the default identifier, falls
/// back to text when the URL cannot be built).
///
/// ```swift
/// let api = Endpoint("https://api.example.com/v1")
/// api.get("recipes", query: ["q": "pancakes", "page": 2])
/// api.post("recipes", body: .json(newRecipe))
/// ```
public struct Endpoint: Sendable, CustomStringConvertible {
    /// The absolute http(s) URL the path is added to; it may have a path and a query of its own.
    public var baseURL: String
    /// Added to the base URL's path with exactly one `/` between them. Characters that cannot appear in a path
    /// are percent-encoded (a `%` that does not start an escape too); `?`, `#`, control characters and `.` or
    /// `..` segments are refused (use ``query`` for a query).
    public var path: String
    /// Default: `GET`.
    public var method: HTTPMethod
    /// Added after any query the base URL has. Default: none.
    public var query: QueryParameters
    /// Default: none. They are set after the body's `Content-Type`, so they can replace it.
    public var headers: HTTPHeaders
    /// Default: none.
    public var body: RequestBody?
    /// How ``query`` and form bodies are encoded. Default: `URLQueryEncoder()`.
    public var queryEncoder: URLQueryEncoder
    /// Seconds without any data after which the request fails with `URLError.timedOut`. Linux rounds it down to
    /// whole seconds (0.5 fails at once) and restarts it whenever data arrives. Default: `nil`, the session's
    /// (60 s unless configured).
    public var timeout: TimeInterval?
    /// Whether a cached response may be used. Default: `nil`, the session's (`.useProtocolCachePolicy`).
    /// `.reloadIgnoringLocalCacheData` is enforced by Requests, because URLSession on Linux serves a cached
    /// entry anyway.
    public var cachePolicy: URLRequest.CachePolicy?

    /// An endpoint at `baseURL` itself; derive others from it with ``get(_:query:headers:)`` and the like.
    public init(
        _ baseURL: String,
        path: String = "",
        method: HTTPMethod = .get,
        query: QueryParameters = [:],
        headers: HTTPHeaders = [:],
        body: RequestBody? = nil,
        queryEncoder: URLQueryEncoder = URLQueryEncoder(),
        timeout: TimeInterval? = nil,
        cachePolicy: URLRequest.CachePolicy? = nil
    ) {
        self.baseURL = baseURL
        self.path = path
        self.method = method
        self.query = query
        self.headers = headers
        self.body = body
        self.queryEncoder = queryEncoder
        self.timeout = timeout
        self.cachePolicy = cachePolicy
    }

    /// This endpoint with `timeout` (see ``timeout``).
    public func timeout(_ timeout: TimeInterval) -> Endpoint {
        var endpoint = self
        endpoint.timeout = timeout
        return endpoint
    }

    /// This endpoint with `cachePolicy` (see ``cachePolicy``).
    public func cachePolicy(_ cachePolicy: URLRequest.CachePolicy) -> Endpoint {
        var endpoint = self
        endpoint.cachePolicy = cachePolicy
        return endpoint
    }

    /// An endpoint below this one: `path` is appended to this path, `headers` are added to these, and the
    /// query, method and body are the given ones.
    public func endpoint(
        _ method: HTTPMethod,
        _ path: String,
        query: QueryParameters = [:],
        headers: HTTPHeaders = [:],
        body: RequestBody? = nil
    ) -> Endpoint {
        var endpoint = self
        endpoint.method = method
        endpoint.path = Self.join(self.path, path)
        endpoint.query = query
        endpoint.headers = self.headers.merging(headers)
        endpoint.body = body
        return endpoint
    }

    /// A `GET` of `path` below this endpoint.
    public func get(_ path: String, query: QueryParameters = [:], headers: HTTPHeaders = [:]) -> Endpoint {
        endpoint(.get, path, query: query, headers: headers)
    }

    /// A `POST` of `body` to `path` below this endpoint.
    public func post(_ path: String, query: QueryParameters = [:], headers: HTTPHeaders = [:], body: RequestBody? = nil) -> Endpoint {
        endpoint(.post, path, query: query, headers: headers, body: body)
    }

    /// A `PUT` of `body` to `path` below this endpoint.
    public func put(_ path: String, query: QueryParameters = [:], headers: HTTPHeaders = [:], body: RequestBody? = nil) -> Endpoint {
        endpoint(.put, path, query: query, headers: headers, body: body)
    }

    /// A `PATCH` of `body` to `path` below this endpoint.
    public func patch(_ path: String, query: QueryParameters = [:], headers: HTTPHeaders = [:], body: RequestBody? = nil) -> Endpoint {
        endpoint(.patch, path, query: query, headers: headers, body: body)
    }

    /// A `DELETE` of `path` below this endpoint.
    public func delete(_ path: String, query: QueryParameters = [:], headers: HTTPHeaders = [:]) -> Endpoint {
        endpoint(.delete, path, query: query, headers: headers)
    }

    /// The full URL: the base URL, the path joined with one `/`, and the base URL's query followed by ``query``.
    public func url() throws -> URL {
        guard var components = URLComponents(string: baseURL), Boundary.isSendable(components.url),
            let host = components.host, !host.isEmpty
        else { throw RequestBuildingError.invalidBaseURL(baseURL) }
        if !path.isEmpty {
            let joined = Self.join(components.percentEncodedPath, try Self.encodedPath(path))
            components.percentEncodedPath = joined.hasPrefix("/") ? joined : "/" + joined
        }
        let added = try query.encoded(with: queryEncoder)
        if !added.isEmpty {
            components.percentEncodedQuery = [components.percentEncodedQuery, added]
                .compactMap { $0?.isEmpty == false ? $0 : nil }
                .joined(separator: "&")
        }
        guard let url = components.url else { throw RequestBuildingError.invalidPath(path) }
        return url
    }

    /// The `URLRequest`: ``url()``, the method, the timeout and cache policy, the body with its `Content-Type`
    /// and `Content-Length`, then the headers. Throws ``RequestBuildingError`` or the encoder's `EncodingError`.
    public func urlRequest() throws -> URLRequest {
        var request = URLRequest(url: try url())
        request.httpMethod = method.rawValue
        if let timeout { request.timeoutInterval = timeout }
        if let cachePolicy { request.cachePolicy = cachePolicy }
        try body?.apply(to: &request, queryEncoder: queryEncoder)
        for field in headers {
            try HeaderSafety.check(name: field.name, value: field.value)
            request.setValue(field.value, forHTTPHeaderField: field.name)
        }
        try HeaderSafety.check(request)
        return request
    }

    /// `METHOD url`, or `METHOD base/path` when the URL cannot be built. The default identifier of an
    /// ``EndpointRequest``.
    public var description: String {
        "\(method.rawValue) \((try? url().absoluteString) ?? Self.join(baseURL, path))"
    }

    /// `first` and `second` with exactly one `/` between them (none when either is empty).
    static func join(_ first: String, _ second: String) -> String {
        guard !first.isEmpty else { return second }
        guard !second.isEmpty else { return first }
        let head = first.hasSuffix("/") ? String(first.reversed().drop { $0 == "/" }.reversed()) : first
        let tail = second.drop { $0 == "/" }
        return head + "/" + tail
    }

    /// `path` percent-encoded for a URL path. A `%` followed by two hex digits is kept as an escape; any other
    /// is encoded. `?`, `#` and control characters are refused, and so is a segment that would leave the base path
    /// once a server decodes it: one that decodes (once or more) to `.` or `..`, or to text holding `/`, `\` or
    /// NUL (`%2e%2e`, `..%2f`, `%5c`, `%00`, `%252e`, in any case).
    private static func encodedPath(_ path: String) throws -> String {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        guard !path.unicodeScalars.contains(where: { $0 == "?" || $0 == "#" || $0.properties.generalCategory == .control }),
            !segments.contains(where: leavesBasePath)
        else { throw RequestBuildingError.invalidPath(path) }
        var encoded = ""
        var scalars = Substring(path).unicodeScalars[...]
        while let scalar = scalars.first {
            scalars = scalars.dropFirst()
            if scalar == "%" {
                let next = scalars.prefix(2)
                let isEscape = next.count == 2 && next.allSatisfy { $0.properties.isASCIIHexDigit }
                encoded += isEscape ? "%" : "%25"
            } else if CharacterSet.urlPathAllowed.contains(scalar) {
                encoded.unicodeScalars.append(scalar)
            } else {
                encoded += String(scalar).addingPercentEncoding(withAllowedCharacters: []) ?? ""
            }
        }
        return encoded
    }
}

/// Whether a path segment would leave the base path once a server decodes it: decoded as often as it decodes (each
/// valid `%HH`, leaving any other `%` as it is), it is `.` or `..`, holds `/`, `\` or NUL, or is `..` before a `;`
/// (Tomcat and Spring drop path parameters after decoding).
private func leavesBasePath(_ segment: Substring) -> Bool {
    var bytes = Array(segment.utf8)
    for _ in 0..<4 {
        let name = bytes.split(separator: UInt8(ascii: ";"), maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        if bytes.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") || $0 == 0 })
            || [[UInt8(ascii: ".")], [UInt8(ascii: "."), UInt8(ascii: ".")]].contains(Array(name))
        {
            return true
        }
        let decoded = percentDecoded(bytes)
        guard decoded != bytes else { return false }
        bytes = decoded
    }
    return true  // still encoded after four rounds: no legitimate segment is
}

/// `bytes` with each `%` and two hex digits replaced by the byte they stand for; any other `%` is kept.
private func percentDecoded(_ bytes: [UInt8]) -> [UInt8] {
    func hex(_ byte: UInt8) -> UInt8? {
        Character(Unicode.Scalar(byte)).hexDigitValue.map(UInt8.init)
    }
    var result: [UInt8] = []
    result.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
        if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
            let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2])
        {
            result.append(high << 4 | low)
            index += 3
        } else {
            result.append(bytes[index])
            index += 1
        }
    }
    return result
}

/// Query parameters: a dictionary literal of `Encodable` values, or any `Encodable` value with keyed fields.
///
/// ```swift
/// api.get("recipes", query: ["q": text, "tags": ["quick", "vegan"], "page": 2])
/// api.get("recipes", query: .encodable(filter))
/// ```
public struct QueryParameters: Sendable, ExpressibleByDictionaryLiteral {
    private let encode: @Sendable (URLQueryEncoder) throws -> String

    /// The parameters of a literal; a repeated key keeps the last value.
    public init(dictionaryLiteral elements: (String, any Encodable & Sendable)...) {
        let parameters = Dictionary(elements, uniquingKeysWith: { _, last in last })
        encode = { encoder in parameters.isEmpty ? "" : try encoder.encode(parameters) }
    }

    /// The keyed fields of `value`.
    public static func encodable<T: Encodable & Sendable>(_ value: T) -> QueryParameters {
        QueryParameters { encoder in try encoder.encode(value) }
    }

    private init(encode: @escaping @Sendable (URLQueryEncoder) throws -> String) {
        self.encode = encode
    }

    /// The percent-encoded query, `a=1&b=2`, or `""` for none.
    func encoded(with encoder: URLQueryEncoder) throws -> String {
        try encode(encoder)
    }
}

/// A request body, with the `Content-Type` it sets.
public struct RequestBody: Sendable {
    private let body: @Sendable (inout URLRequest, URLQueryEncoder) throws -> Void

    /// `value` as JSON, with `Content-Type: application/json; charset=utf-8`. A value JSON cannot hold (such as
    /// `Double.nan`) fails with the encoder's `EncodingError`. Default encoder: a new `JSONEncoder`.
    public static func json<T: Encodable & Sendable>(_ value: T, encoder: JSONEncoder = JSONEncoder()) -> RequestBody {
        RequestBody { request, _ in
            request.httpBody = try encoder.encode(value)
            request.setValue("application/json; charset=utf-8", forHTTPHeaderField: "Content-Type")
        }
    }

    /// `parameters` URL-encoded as a form, with `Content-Type: application/x-www-form-urlencoded; charset=utf-8`,
    /// encoded by the endpoint's ``Endpoint/queryEncoder``.
    public static func form(_ parameters: QueryParameters) -> RequestBody {
        RequestBody { request, encoder in
            request.httpBody = Data(try parameters.encoded(with: encoder).utf8)
            request.setValue("application/x-www-form-urlencoded; charset=utf-8", forHTTPHeaderField: "Content-Type")
        }
    }

    /// `data` as it is, with `contentType`.
    public static func data(_ data: Data, contentType: String) -> RequestBody {
        RequestBody { request, _ in
            request.httpBody = data
            request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        }
    }

    /// `form` as `multipart/form-data`: in memory when small, streamed from a temporary file when large.
    public static func multipart(_ form: MultipartFormData) -> RequestBody {
        RequestBody { request, _ in _ = try form.apply(to: &request) }
    }

    /// Sets the body and its headers on `request`.
    func apply(to request: inout URLRequest, queryEncoder: URLQueryEncoder) throws {
        try body(&request, queryEncoder)
    }
}

/// A request declared by an ``Endpoint``: `makeURLRequest` and `identifier` come from it.
///
/// ```swift
/// struct SearchRecipes: DecodableRequest, EndpointRequest {
///     typealias Success = [Recipe]
///     let text: String
///     var endpoint: Endpoint { api.get("recipes", query: ["q": text]) }
/// }
/// ```
public protocol EndpointRequest: NetworkRequest {
    /// Where and how the request is sent; read once per attempt.
    var endpoint: Endpoint { get }
}

extension EndpointRequest {
    /// The endpoint's method and URL, such as `GET https://api.example.com/v1/recipes?q=pancakes`.
    public var identifier: String {
        endpoint.description
    }

    /// The endpoint's `URLRequest`, or the error that prevents building it.
    public func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(Result { try endpoint.urlRequest() })
    }
}
