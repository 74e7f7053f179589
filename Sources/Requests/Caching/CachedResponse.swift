#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A stored response, with what freshness needs: when it was requested and received.
struct CachedResponse: Codable, Equatable {
    var status: Int
    /// Header names as received.
    var headers: [String: String]
    /// Left out of the JSON head (see `CodingKeys`): the serialized form holds it after the head.
    var body = Data()
    var requestTime: Date
    var responseTime: Date
    /// What the request that was answered carried, as keyed digests by lowercased header name ("" when absent):
    /// the headers `Vary` names, and its credential (see ``ResponseCache/partition(of:varyNames:)``).
    var varyValues: [String: String]
    /// Whether the response set cookies (its `Set-Cookie` headers are not kept).
    var setsCookies = false
    /// `Date` and `Expires`, parsed once when stored (an invalid `Expires` is the distant past: already expired).
    var date: Date?
    var expires: Date?

    /// The entry for `response`, stored under `url`, without its `Vary` values (the cache adds them). `Set-Cookie`
    /// is not kept: a cookie is the transport's to store, never the cache's to write to disk or to replay.
    init(body: Data, response: HTTPURLResponse, requestTime: Date, responseTime: Date) {
        var headers: [String: String] = [:]
        var setsCookies = false
        for (name, value) in response.allHeaderFields {
            guard let name = name as? String, let value = value as? String else { continue }
            if Self.cookieSetters.contains(name.lowercased()) {
                setsCookies = true
            } else {
                headers[name] = value
            }
        }
        status = response.statusCode
        self.headers = headers
        self.body = body
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.setsCookies = setsCookies
        varyValues = [:]
        parseDates()
    }

    /// The response headers that set cookies.
    private static let cookieSetters: Set<String> = ["set-cookie", "set-cookie2"]

    /// Parses `Date` and `Expires` once: a DateFormatter costs tens of microseconds, too much for every hit.
    private mutating func parseDates() {
        date = header("Date").flatMap(HTTPDate.parse)
        expires = header("Expires").map { HTTPDate.parse($0) ?? .distantPast }
    }

    func header(_ name: String) -> String? {
        headers.first { $0.key.equalsIgnoringASCIICase(name) }?.value
    }

    var cacheControl: [String: String] {
        CacheControl.parse(header("Cache-Control"))
    }

    /// The request headers the entry is chosen by, lowercased: those `Vary` names, and `Cookie` when the response
    /// is `private`, or set cookies without saying `public` (its body is the user's, and a cookie may be what says who
    /// the user is). A `public` response that sets a cookie (a load balancer's, rolling on every answer) is for everyone.
    var varyNames: [String] {
        let vary = header("Vary") ?? ""
        let names = vary.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
        let directives = cacheControl
        let userSpecific = directives["private"] != nil || (setsCookies && directives["public"] == nil)
        return userSpecific && !names.contains("cookie") ? names + ["cookie"] : names
    }

    /// Why RFC 9111 §3 keeps it out of a private cache, or `nil` when it may be stored.
    func notStorableReason(for request: URLRequest) -> NotStoredReason? {
        let response = cacheControl
        let requestDirectives = CacheControl.parse(request.value(forHTTPHeaderField: "Cache-Control"))
        if response["no-store"] != nil || requestDirectives["no-store"] != nil { return .noStore }
        // No 300 or 301: a stored redirect would answer a request whose policy follows it (or one whose policy
        // refuses it, differently) without that policy's ruling.
        guard Self.storableStatuses.contains(status) else { return .statusNotCacheable(status) }
        if varyNames.contains("*") { return .varyAll }
        guard freshnessLifetime != nil || header("ETag") != nil || header("Last-Modified") != nil else { return .noFreshnessOrValidator }
        return nil
    }

    /// The statuses whose responses may be stored.
    private static let storableStatuses: Set<Int> = [200, 203, 204, 404, 405, 410, 414]

    /// `max-age`, else `Expires` minus `Date`; `nil` when the response gives neither (no heuristic freshness).
    var freshnessLifetime: TimeInterval? {
        if let maxAge = cacheControl["max-age"] {
            return CacheControl.deltaSeconds(maxAge) ?? 0
        }
        // An invalid Expires, such as "0", means already expired (parsed as the distant past).
        guard let expires else { return nil }
        return max(0, expires.timeIntervalSince(date ?? responseTime))
    }

    /// RFC 9111 §4.2.3.
    func currentAge(now: Date) -> TimeInterval {
        // An `Age` that is not delta-seconds makes the response as old as can be: stale.
        let ageValue = header("Age").map { CacheControl.deltaSeconds($0.trimmingCharacters(in: .whitespaces)) ?? .infinity } ?? 0
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
        if let maxAge = requestDirectives["max-age"], !(CacheControl.deltaSeconds(maxAge).map { age <= $0 } ?? false) { return false }
        if let minFresh = requestDirectives["min-fresh"], !(CacheControl.deltaSeconds(minFresh).map { lifetime - age >= $0 } ?? false) { return false }
        if lifetime > age { return true }
        // `max-stale` without a value accepts any staleness; never for a response that must be revalidated.
        guard let maxStale = requestDirectives["max-stale"], mayServeWithoutNetwork else { return false }
        return maxStale.isEmpty || (CacheControl.deltaSeconds(maxStale).map { age - lifetime <= $0 } ?? false)
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
            // As when stored: a cookie is never kept, and the entry now varies on the cookies sent.
            if Self.cookieSetters.contains(name.lowercased()) {
                entry.setsCookies = true
                continue
            }
            if let existing = entry.headers.keys.first(where: { $0.equalsIgnoringASCIICase(name) }) {
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
    /// The URL is the request's: no URL is kept in the entry, so none (with its query) is written to disk.
    func httpResponse(for url: URL) -> HTTPURLResponse? {
        HTTPURLResponse(url: url, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)
    }

    // MARK: - Serialized form: the JSON of everything but the body, its length, then the body as is.

    private enum CodingKeys: String, CodingKey {
        case status, headers, requestTime, responseTime, varyValues, setsCookies, date, expires
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
            // RFC 9111 §4.2.1: of a directive given twice (`max-age=0, max-age=600`), the first counts.
            if directives[name] == nil { directives[name] = argument }
        }
        return directives
    }

    /// RFC 9111 §1.2.2 delta-seconds: ASCII digits only, so `inf`, `1e308`, `0x10`, `+5` and `-1` are not a number
    /// of seconds (a lifetime that is not one makes the response stale). Values beyond 2^31 count as 2^31.
    static func deltaSeconds(_ text: String) -> TimeInterval? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        let significant = String(decoding: digits.drop { $0 == 0x30 }, as: UTF8.self)
        guard significant.utf8.count <= 10 else { return 2_147_483_648 }
        return TimeInterval(min(Int(significant) ?? 0, 2_147_483_648))
    }
}
