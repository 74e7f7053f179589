import Foundation

/// A representation of `length` bytes served with `Range` and `If-Range` (RFC 9110 §13.1.5, §14), with deliberate
/// faults, to test resumable downloads. Register one with ``LoopbackServer/resource(_:handler:)``, or use the
/// built-in `/ranged/N` route.
///
/// Byte `i` is `UInt8((i + version) % 251)`: 251 is prime, so a region that was shifted, sent twice or taken from
/// another version differs from ``content(length:version:)`` (a shift would have to be a multiple of 251 to hide).
///
/// The server answers:
/// - `200` with the whole representation, when there is no usable `Range`;
/// - `206` with `Content-Range: bytes a-e/length` for a `GET` (or `HEAD`) with a single `bytes=a-` or `bytes=a-b`
///   range and `a < length`, when there is no `If-Range` or it matches the validator;
/// - `416` with `Content-Range: bytes */length` and no body when `a >= length`.
/// Every answer carries `Accept-Ranges: bytes`, `Content-Type: application/octet-stream` and the header that
/// ``validator`` names (and no other validator), then ``extraHeaders``.
public struct LoopbackResource: Sendable {
    /// The validator the server sends, which decides whether an `If-Range` lets a range through.
    public enum Validator: Sendable, Equatable {
        /// `ETag: "v<version>-<length>"`. An `If-Range` equal to it, byte for byte, lets the range through.
        case strongETag
        /// `ETag: W/"v<version>-<length>"`. An `If-Range` never matches it: weak validators are not allowed there.
        case weakETag
        /// `Last-Modified`: `version` days after Sun, 06 Nov 1994 08:49:37 GMT (clamped to the years 1–9999).
        /// An `If-Range` with the same text lets the range through.
        case lastModified
        /// No validator: an `If-Range` never matches, so such a request gets the whole representation.
        case none
    }

    /// What the server does with a range it would honour, to imitate servers that get ranges wrong.
    public enum RangeHandling: Sendable, Equatable {
        /// As RFC 9110 says.
        case honour
        /// Always `200` with the whole representation, as a server without range support.
        case ignore
        /// A lying server: `206` whose `Content-Range` and body start 100 bytes after the requested start
        /// (at most at the last byte).
        case wrongContentRange
        /// `416` with `Content-Range: bytes */<length>` to any range it would honour.
        case notSatisfiable
    }

    /// The size of the representation in bytes (a negative value counts as 0).
    public var length: Int
    /// Which content: byte `i` is `UInt8((i + version) % 251)`. Also part of the ETag and the `Last-Modified` date,
    /// so changing it between requests makes an earlier `If-Range` fail.
    public var version: Int
    /// The validator sent, and compared with `If-Range`.
    public var validator: Validator
    /// Whether ranges are honoured, ignored or answered wrongly.
    public var rangeHandling: RangeHandling
    /// An absolute offset in the representation where the connection is cut: a response whose body starts before
    /// it and ends after it is sent with its full `Content-Length`, but only up to this offset, then the connection
    /// closes. A response that starts at or after it is sent whole.
    public var cutAfter: Int?
    /// Whether a cut resets the connection (TCP RST) instead of closing it.
    public var resetOnCut: Bool
    /// The body is written this many bytes at a time (values below 1 count as 1).
    public var chunkSize: Int
    /// The pause between two chunks, in milliseconds. The pause ends the response if the client disconnects.
    public var intervalMilliseconds: Int
    /// Headers added to every answer; they replace the server's own headers of the same name (`Content-Length`
    /// excepted, which is always computed).
    public var extraHeaders: [String: String]

    /// A resource of `length` bytes; by default version 0 with a strong ETag, honouring ranges, sent whole,
    /// 64 KiB at a time without pauses.
    public init(
        length: Int,
        version: Int = 0,
        validator: Validator = .strongETag,
        rangeHandling: RangeHandling = .honour,
        cutAfter: Int? = nil,
        resetOnCut: Bool = false,
        chunkSize: Int = 64 * 1024,
        intervalMilliseconds: Int = 0,
        extraHeaders: [String: String] = [:]
    ) {
        self.length = length
        self.version = version
        self.validator = validator
        self.rangeHandling = rangeHandling
        self.cutAfter = cutAfter
        self.resetOnCut = resetOnCut
        self.chunkSize = chunkSize
        self.intervalMilliseconds = intervalMilliseconds
        self.extraHeaders = extraHeaders
    }

    /// The value of the validator header (`ETag` or `Last-Modified`) this resource sends, or `nil` for `.none`:
    /// what a client would put in `If-Range`.
    public var validatorValue: String? {
        let strong = "\"v\(version)-\(max(0, length))\""
        switch validator {
        case .strongETag: return strong
        case .weakETag: return "W/" + strong
        case .lastModified: return Self.httpDate(daysAfterBase: version)
        case .none: return nil
        }
    }

    /// Byte `offset` of the representation of `version`: `UInt8((offset + version) % 251)`.
    public static func byte(at offset: Int, version: Int) -> UInt8 {
        UInt8(patternIndex(offset: offset, version: version))
    }

    /// The first `length` bytes of the representation of `version`, to compare with what a client received.
    public static func content(length: Int, version: Int = 0) -> Data {
        var data = Data(capacity: max(0, length))
        var offset = 0
        pattern.withUnsafeBufferPointer { table in
            while offset < length {
                let index = patternIndex(offset: offset, version: version)
                let size = min(length - offset, table.count - index)
                data.append(UnsafeBufferPointer(rebasing: table[index..<(index + size)]))
                offset += size
            }
        }
        return data
    }

    // MARK: - Serving (internal)

    /// 261 runs of `0…250`, built once with a plain loop. Any offset's bytes are one slice of it, starting at
    /// ``patternIndex(offset:version:)`` and at least 65,261 bytes long, so a 64 KiB chunk costs one `send` and no copy.
    static let pattern: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 251 * 261)
        for j in table.indices { table[j] = UInt8(j % 251) }
        return table
    }()

    /// `(offset + version) mod 251`, without overflow and never negative.
    static func patternIndex(offset: Int, version: Int) -> Int {
        (offset % 251 + version % 251 + 502) % 251
    }

    /// What to send for one request: the status, the headers, and the body as a region of the representation.
    struct Plan: Equatable {
        var status: Int
        var headers: [String: String]
        /// The offset of the body's first byte in the representation.
        var start: Int
        /// The body's length, which is the `Content-Length` (also for `HEAD`, which sends no body).
        var count: Int
        /// Where the body stops early, as an absolute offset, if ``cutAfter`` falls inside it and a body is sent.
        var cut: Int?
    }

    /// Decides the answer to `method` with `headers` (lowercased names).
    func plan(method: String, headers requestHeaders: [String: String]) -> Plan {
        let length = max(0, self.length)
        var headers = ["Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"]
        switch validator {
        case .strongETag, .weakETag: headers["ETag"] = validatorValue
        case .lastModified: headers["Last-Modified"] = validatorValue
        case .none: break
        }
        for (name, value) in extraHeaders {
            for existing in headers.keys where existing.lowercased() == name.lowercased() { headers[existing] = nil }
            headers[name] = value
        }
        var plan = Plan(status: 200, headers: headers, start: 0, count: length, cut: nil)

        // Range is defined for GET only; HEAD answers with the headers GET would get (RFC 9110 §9.3.2).
        if method == "GET" || method == "HEAD", rangeHandling != .ignore,
            let range = requestHeaders["range"].flatMap(Self.parseRange), ifRangeMatches(requestHeaders["if-range"])
        {
            if range.first >= length || rangeHandling == .notSatisfiable {
                plan.status = 416
                plan.headers["Content-Range"] = "bytes */\(length)"
                plan.count = 0
            } else {
                var first = range.first
                var last = min(range.last ?? Int.max, length - 1)
                if rangeHandling == .wrongContentRange {
                    first = first >= length - 100 ? length - 1 : first + 100
                    last = max(last, first)
                }
                plan.status = 206
                plan.headers["Content-Range"] = "bytes \(first)-\(last)/\(length)"
                plan.start = first
                plan.count = last - first + 1
            }
        }
        if method != "HEAD", let cut = cutAfter, cut > plan.start, cut - plan.start < plan.count {
            plan.cut = cut
        }
        return plan
    }

    /// Whether a request with this `If-Range` (or none) may get a range. Weak ETags never match (RFC 9110 §13.1.5).
    private func ifRangeMatches(_ ifRange: String?) -> Bool {
        guard let ifRange else { return true }
        switch validator {
        case .strongETag, .lastModified: return ifRange == validatorValue
        case .weakETag, .none: return false
        }
    }

    /// Parses a single `bytes=a-` or `bytes=a-b` (with `b >= a`); anything else, such as a suffix range or several
    /// ranges, is `nil`, and the server then ignores the header. Numbers too large for `Int` count as `Int.max`.
    static func parseRange(_ text: String) -> (first: Int, last: Int?)? {
        let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "bytes" else { return nil }
        let spec = parts[1].trimmingCharacters(in: .whitespaces)
        let bounds = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = decimal(bounds[0]) else { return nil }
        if bounds[1].isEmpty { return (first, nil) }
        guard let last = decimal(bounds[1]), last >= first else { return nil }
        return (first, last)
    }

    /// A non-empty run of ASCII digits as an `Int`, saturating at `Int.max`.
    private static func decimal(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
        return Int(text) ?? Int.max
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) `days` after that date, formatted by hand so that it
    /// depends on no locale or time zone.
    static func httpDate(daysAfterBase days: Int) -> String {
        // 1994-11-06 is day 9075 after 1970-01-01; the clamp keeps the date within the years 1 to 9999.
        let day = min(max(days, -719_162 - 9075), 2_932_896 - 9075) + 9075
        // Civil date from a day count (Howard Hinnant's algorithm), eras of 400 years starting on 0000-03-01.
        let z = day + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let dayOfMonth = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let weekday = (day % 7 + 11) % 7  // 1970-01-01 was a Thursday (4, counting from Sunday)
        let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func padded(_ value: Int, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(weekdays[weekday]), \(padded(dayOfMonth, 2)) \(months[month - 1]) \(padded(year, 4)) 08:49:37 GMT"
    }

    /// The resource of the built-in route `/ranged/N`, from its query options, or `nil` if one is invalid:
    /// `v=<version>`, `validator=strong|weak|date|none`, `range=honour|ignore|wrong|416`, `cut=<offset>`,
    /// `reset=1`, `chunk=<bytes>`, `interval=<ms>`.
    static func builtin(length: Int, query: [String: String]) -> LoopbackResource? {
        var resource = LoopbackResource(length: length)
        if let text = query["v"] {
            guard let version = Int(text) else { return nil }
            resource.version = version
        }
        switch query["validator"] {
        case nil, "strong"?: resource.validator = .strongETag
        case "weak"?: resource.validator = .weakETag
        case "date"?: resource.validator = .lastModified
        case "none"?: resource.validator = .none
        default: return nil
        }
        switch query["range"] {
        case nil, "honour"?: resource.rangeHandling = .honour
        case "ignore"?: resource.rangeHandling = .ignore
        case "wrong"?: resource.rangeHandling = .wrongContentRange
        case "416"?: resource.rangeHandling = .notSatisfiable
        default: return nil
        }
        if let text = query["cut"] {
            guard let cut = Int(text), cut >= 0 else { return nil }
            resource.cutAfter = cut
        }
        switch query["reset"] {
        case nil, "0"?: resource.resetOnCut = false
        case "1"?: resource.resetOnCut = true
        default: return nil
        }
        if let text = query["chunk"] {
            guard let chunk = Int(text), chunk > 0 else { return nil }
            resource.chunkSize = chunk
        }
        if let text = query["interval"] {
            guard let interval = Int(text), interval >= 0 else { return nil }
            resource.intervalMilliseconds = interval
        }
        return resource
    }
}
