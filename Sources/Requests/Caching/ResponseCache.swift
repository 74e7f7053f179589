#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// An HTTP cache for data requests that behaves the same on Linux and Apple platforms (RFC 9111, as a private
/// client cache): a fresh stored response is served without the network; a stale one, or one marked `no-cache`, is
/// revalidated with `If-None-Match` / `If-Modified-Since`, and a `304` delivers the stored body through the same
/// status check, validations and `processResponse` as a body from the network.
///
/// Turn it on per queue with ``RequestPolicies/responseCache``, or per request with
/// ``NetworkRequest/responseCache``; choose per request how it is used with ``NetworkRequest/cacheUse``.
/// Downloads, uploads and streams do not use it.
///
/// What is stored: responses to `GET` and `HEAD` with status 200, 203, 204, 300, 301, 404, 405, 410 or 414 that
/// have a freshness lifetime (`Cache-Control: max-age`, `Expires`) or a validator (`ETag`, `Last-Modified`), and
/// fit in ``maximumEntrySize``. Never a response with `no-store` (in the request or the response) or `Vary: *`, and
/// a response to a request with `Authorization` only when it says `public`, `s-maxage` or `must-revalidate`.
/// One entry per method and URL, for the request header values its `Vary` names: a request with other values
/// misses, and its response replaces the entry. A successful `POST`, `PUT`, `PATCH` or `DELETE` removes the URL's
/// entries. Freshness has no heuristic: a response without `max-age` or `Expires` is always revalidated.
/// The request's `Cache-Control` is honoured too: `no-cache`, `max-age`, `min-fresh` and `max-stale` (which never
/// serves a response marked `no-cache` or `must-revalidate` without asking the server).
///
/// Storage is in memory and on disk, each bounded by size, evicting the least recently used. A write goes to a
/// temporary file that is then renamed, so a crash never leaves half an entry; an entry that cannot be read counts
/// as a miss; a directory that disappears or cannot be written makes the disk layer do nothing.
public final class ResponseCache: @unchecked Sendable {
    let storage: CacheStorage
    /// The largest response body stored. Default: a quarter of the memory capacity.
    public let maximumEntrySize: Int

    /// A cache holding up to `memoryCapacity` bytes in memory and `diskCapacity` bytes in `directory` (`nil`: memory
    /// only). Defaults: 10 MiB, 100 MiB, ``defaultDirectory``.
    public init(
        memoryCapacity: Int = 10 << 20,
        diskCapacity: Int = 100 << 20,
        directory: URL? = ResponseCache.defaultDirectory,
        maximumEntrySize: Int? = nil
    ) {
        storage = CacheStorage(memoryCapacity: max(0, memoryCapacity), diskCapacity: max(0, diskCapacity), directory: directory)
        self.maximumEntrySize = max(0, maximumEntrySize ?? memoryCapacity / 4)
    }

    /// `Requests.ResponseCache` in the user's caches directory (on Linux `~/.cache`), or in the temporary directory.
    public static var defaultDirectory: URL {
        let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first ?? FileManager.default.temporaryDirectory
        return caches.appendingPathComponent("Requests.ResponseCache", isDirectory: true)
    }

    /// Removes every stored response.
    public func removeAll() {
        storage.removeAll()
    }

    /// Removes what is stored for `request`'s URL, for `GET` and `HEAD`.
    public func removeResponses(for url: URL) {
        ["GET", "HEAD"].forEach { storage.removeData(forKey: Self.key(method: $0, url: url)) }
    }

    // MARK: - For the operation

    static func key(method: String, url: URL) -> String {
        "\(method) \(url.absoluteString)"
    }

    /// The stored response for `request`, if its `Vary` values match.
    func entry(for request: URLRequest) -> CachedResponse? {
        guard let url = request.url, let method = Self.cacheableMethod(request),
            let data = storage.data(forKey: Self.key(method: method, url: url)),
            let entry = CachedResponse(serialized: data)
        else { return nil }
        return entry.matchesVary(of: request) ? entry : nil
    }

    /// Stores `response` to `request` if the rules allow it; returns whether it did.
    @discardableResult
    func store(_ body: Data, response: HTTPURLResponse, for request: URLRequest, requestTime: Date, responseTime: Date) -> Bool {
        guard let url = request.url, let method = Self.cacheableMethod(request), body.count <= maximumEntrySize,
            let entry = CachedResponse(body: body, response: response, request: request, requestTime: requestTime, responseTime: responseTime),
            entry.isStorable(for: request)
        else { return false }
        storage.setData(entry.serialized(), forKey: Self.key(method: method, url: url))
        return true
    }

    /// Replaces the stored entry for `request` (after a `304` refreshed its headers).
    func replace(_ entry: CachedResponse, for request: URLRequest) {
        guard let url = request.url, let method = Self.cacheableMethod(request) else { return }
        storage.setData(entry.serialized(), forKey: Self.key(method: method, url: url))
    }

    func remove(for request: URLRequest) {
        guard let url = request.url, let method = Self.cacheableMethod(request) else { return }
        storage.removeData(forKey: Self.key(method: method, url: url))
    }

    /// After a successful unsafe request, what is stored for its URL is out of date (RFC 9111 §4.4).
    func invalidate(after request: URLRequest, status: Int) {
        let method = (request.httpMethod ?? "GET").uppercased()
        guard ["POST", "PUT", "PATCH", "DELETE"].contains(method), (200..<400).contains(status), let url = request.url else { return }
        removeResponses(for: url)
    }

    private static func cacheableMethod(_ request: URLRequest) -> String? {
        let method = (request.httpMethod ?? "GET").uppercased()
        return method == "GET" || method == "HEAD" ? method : nil
    }
}

/// How a request uses the ``ResponseCache``.
public enum CacheUse: Sendable, Equatable {
    /// A fresh stored response is served without the network, a stale one is revalidated, and what the network
    /// answers is stored if it may be. The default.
    case useCache
    /// A stored response, even a fresh one, is revalidated before it is served.
    case revalidate
    /// What is stored is ignored; the network's answer is stored.
    case reload
    /// Only what is stored, fresh or stale, and never the network: nothing stored (or only a response marked
    /// `no-cache` or `must-revalidate`, which may not be served without asking the server) fails with
    /// ``ResponseCacheError/notCached(_:)``.
    case onlyIfCached
    /// Neither read nor written.
    case bypass
}

/// What the cache did for a request, as monitors see it.
public enum CacheEvent: Sendable, Equatable {
    /// A fresh stored response was served without the network.
    case hit
    /// Nothing usable was stored: the request went to the network (with `revalidating` true when it carried the
    /// stored response's validators).
    case miss(revalidating: Bool)
    /// The server answered `304 Not Modified`, and the stored response was served with its headers refreshed.
    case revalidated
    /// The response was stored.
    case stored
}

/// Why a request that had to be answered from the cache was not.
public enum ResponseCacheError: Error, Equatable, CustomStringConvertible {
    /// ``CacheUse/onlyIfCached`` found nothing stored for the request.
    case notCached(URL?)

    /// Names the URL.
    public var description: String {
        switch self {
        case let .notCached(url): return "Nothing is stored in the response cache for \(url?.absoluteString ?? "the request")."
        }
    }
}

/// A stored response, with what freshness needs: when it was requested and received.
struct CachedResponse: Codable, Equatable {
    var url: URL
    var status: Int
    /// Header names as received.
    var headers: [String: String]
    /// Left out of the JSON head (see `CodingKeys`): the serialized form holds it after the head.
    var body = Data()
    var requestTime: Date
    var responseTime: Date
    /// The request's values for the headers `Vary` names, by lowercased name ("" when absent).
    var varyValues: [String: String]
    /// `Date` and `Expires`, parsed once when stored (an invalid `Expires` is the distant past: already expired).
    var date: Date?
    var expires: Date?

    init?(body: Data, response: HTTPURLResponse, request: URLRequest, requestTime: Date, responseTime: Date) {
        guard let url = response.url ?? request.url else { return nil }
        var headers: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        self.url = url
        status = response.statusCode
        self.headers = headers
        self.body = body
        self.requestTime = requestTime
        self.responseTime = responseTime
        varyValues = [:]
        for name in Self.varyNames(headers) where name != "*" {
            varyValues[name] = request.value(forHTTPHeaderField: name) ?? ""
        }
        parseDates()
    }

    /// Parses `Date` and `Expires` once: a DateFormatter costs tens of microseconds, too much for every hit.
    private mutating func parseDates() {
        date = header("Date").flatMap(HTTPDate.parse)
        expires = header("Expires").map { HTTPDate.parse($0) ?? .distantPast }
    }

    func header(_ name: String) -> String? {
        headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    var cacheControl: [String: String] {
        CacheControl.parse(header("Cache-Control"))
    }

    static func varyNames(_ headers: [String: String]) -> [String] {
        let vary = headers.first { $0.key.caseInsensitiveCompare("Vary") == .orderedSame }?.value ?? ""
        return vary.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
    }

    func matchesVary(of request: URLRequest) -> Bool {
        varyValues.allSatisfy { name, value in (request.value(forHTTPHeaderField: name) ?? "") == value }
    }

    /// RFC 9111 §3, for a private cache.
    func isStorable(for request: URLRequest) -> Bool {
        let storableStatus: Set<Int> = [200, 203, 204, 300, 301, 404, 405, 410, 414]
        let response = cacheControl
        let requestDirectives = CacheControl.parse(request.value(forHTTPHeaderField: "Cache-Control"))
        guard storableStatus.contains(status), response["no-store"] == nil, requestDirectives["no-store"] == nil,
            !Self.varyNames(headers).contains("*")
        else { return false }
        if request.value(forHTTPHeaderField: "Authorization") != nil,
            response["public"] == nil, response["s-maxage"] == nil, response["must-revalidate"] == nil
        {
            return false
        }
        return freshnessLifetime != nil || header("ETag") != nil || header("Last-Modified") != nil
    }

    /// `max-age`, else `Expires` minus `Date`; `nil` when the response gives neither (no heuristic freshness).
    var freshnessLifetime: TimeInterval? {
        if let maxAge = cacheControl["max-age"] {
            return TimeInterval(maxAge).map { max(0, $0) } ?? 0
        }
        // An invalid Expires, such as "0", means already expired (parsed as the distant past).
        guard let expires else { return nil }
        return max(0, expires.timeIntervalSince(date ?? responseTime))
    }

    /// RFC 9111 §4.2.3.
    func currentAge(now: Date) -> TimeInterval {
        let ageValue = header("Age").flatMap { TimeInterval($0.trimmingCharacters(in: .whitespaces)) }.map { max(0, $0) } ?? 0
        let dateValue = date ?? responseTime
        let apparentAge = max(0, responseTime.timeIntervalSince(dateValue))
        let correctedAgeValue = ageValue + max(0, responseTime.timeIntervalSince(requestTime))
        return max(apparentAge, correctedAgeValue) + max(0, now.timeIntervalSince(responseTime))
    }

    /// Whether it may be served without revalidation to `request`: fresh, or stale within what the request's
    /// `max-stale` accepts, and within its `max-age` and `min-fresh` (RFC 9111 §5.2.1). A response without a
    /// freshness lifetime counts as stale from the start.
    func isFresh(for request: URLRequest, now: Date) -> Bool {
        let requestDirectives = CacheControl.parse(request.value(forHTTPHeaderField: "Cache-Control"))
        guard cacheControl["no-cache"] == nil, requestDirectives["no-cache"] == nil,
            request.value(forHTTPHeaderField: "Pragma")?.lowercased().contains("no-cache") != true
        else { return false }
        let age = currentAge(now: now)
        let lifetime = freshnessLifetime ?? 0
        // A directive whose value is not a number asks for nothing the cache can grant: it sends the request on.
        if let maxAge = requestDirectives["max-age"], !(TimeInterval(maxAge).map { age <= $0 } ?? false) { return false }
        if let minFresh = requestDirectives["min-fresh"], !(TimeInterval(minFresh).map { lifetime - age >= $0 } ?? false) { return false }
        if lifetime > age { return true }
        // `max-stale` without a value accepts any staleness; never for a response that must be revalidated.
        guard let maxStale = requestDirectives["max-stale"], mayServeWithoutNetwork else { return false }
        return maxStale.isEmpty || (TimeInterval(maxStale).map { age - lifetime <= $0 } ?? false)
    }

    /// Whether ``CacheUse/onlyIfCached`` may serve it even stale: not when it must be revalidated first
    /// (`no-cache`, `must-revalidate`, RFC 9111 §5.2.2.2, §5.2.2.4).
    var mayServeWithoutNetwork: Bool {
        let directives = cacheControl
        return directives["no-cache"] == nil && directives["must-revalidate"] == nil
    }

    /// `request` with this response's validators, unless it carries conditions of its own.
    func conditional(_ request: URLRequest) -> URLRequest? {
        guard request.value(forHTTPHeaderField: "If-None-Match") == nil, request.value(forHTTPHeaderField: "If-Modified-Since") == nil else {
            return nil
        }
        let etag = header("ETag")
        let lastModified = header("Last-Modified")
        guard etag != nil || lastModified != nil else { return nil }
        var request = request
        if let etag { request.setValue(etag, forHTTPHeaderField: "If-None-Match") }
        if let lastModified { request.setValue(lastModified, forHTTPHeaderField: "If-Modified-Since") }
        return request
    }

    /// This entry with the headers of a `304` (RFC 9111 §3.2: all but the framing ones), at the new times.
    func refreshed(by notModified: HTTPURLResponse, requestTime: Date, responseTime: Date) -> CachedResponse {
        var entry = self
        let framing: Set<String> = ["content-length", "content-encoding", "transfer-encoding", "content-range", "connection", "keep-alive"]
        for (name, value) in notModified.allHeaderFields {
            guard let name = name as? String, let value = value as? String, !framing.contains(name.lowercased()) else { continue }
            if let existing = entry.headers.keys.first(where: { $0.caseInsensitiveCompare(name) == .orderedSame }) {
                entry.headers[existing] = nil
            }
            entry.headers[name] = value
        }
        entry.requestTime = requestTime
        entry.responseTime = responseTime
        entry.parseDates()
        return entry
    }

    /// The response to hand to the status check and `processResponse`.
    func httpResponse() -> HTTPURLResponse? {
        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)
    }

    // MARK: - Serialized form: the JSON of everything but the body, its length, then the body as is.

    private enum CodingKeys: String, CodingKey {
        case url, status, headers, requestTime, responseTime, varyValues, date, expires
    }

    func serialized() -> Data {
        let json = (try? JSONEncoder().encode(self)) ?? Data()
        var data = Data()
        var length = UInt32(json.count).bigEndian
        withUnsafeBytes(of: &length) { data.append(contentsOf: $0) }
        data.append(json)
        data.append(body)
        return data
    }

    init?(serialized data: Data) {
        guard data.count >= 4 else { return nil }
        let length = data.prefix(4).reduce(0) { $0 << 8 | Int($1) }
        let start = data.startIndex + 4
        guard length > 0, data.count - 4 >= length,
            let head = try? JSONDecoder().decode(CachedResponse.self, from: data[start..<(start + length)])
        else { return nil }
        self = head
        body = Data(data[(start + length)...])
    }
}

/// `Cache-Control` directives, by lowercased name; a directive without a value maps to "".
enum CacheControl {
    static func parse(_ value: String?) -> [String: String] {
        guard let value else { return [:] }
        var directives: [String: String] = [:]
        for part in value.split(separator: ",") {
            let pieces = part.split(separator: "=", maxSplits: 1)
            guard let name = pieces.first?.trimmingCharacters(in: .whitespaces).lowercased(), !name.isEmpty else { continue }
            let argument = pieces.count > 1 ? pieces[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : ""
            directives[name] = argument
        }
        return directives
    }
}
