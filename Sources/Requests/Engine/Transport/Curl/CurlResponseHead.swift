#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A response head as libcurl hands its lines over, one by one: a status line starts a head (a 1xx one other than
/// 101 is dropped at its end), then fields, then a blank line. Parsed by bytes: a head comes with every request, and
/// `String` and `NSString` operations on each line cost more than the rest of the transfer (callgrind).
struct ResponseHead {
    private(set) var status: Int?
    private(set) var version = "HTTP/1.1"
    /// In arrival order: the name as first sent, and the values of every field of that name (in any case) joined
    /// with ", ".
    private var fields: [(name: String, value: String)] = []
    /// The field the last line added to, for an obsolete folded line.
    private var last: Int?
    /// Whether the head sets a cookie: only then is the session's cookie storage asked to take the response's.
    private(set) var setsCookie = false

    /// Takes one header line (with its CRLF); returns the head when `line` is the blank line that ends a final one.
    mutating func take(_ line: UnsafeRawBufferPointer) -> ResponseHead? {
        guard let base = line.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
        let bytes = UnsafeBufferPointer(start: base, count: line.count)
        var end = bytes.count
        while end > 0, bytes[end - 1] == UInt8(ascii: "\n") || bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        if end == 0 {
            guard let status else { return nil }
            if (100...199).contains(status), status != 101 {
                self = ResponseHead()
                return nil
            }
            return self
        }
        if end >= 5, bytes[0] == UInt8(ascii: "H"), bytes[1] == UInt8(ascii: "T"), bytes[2] == UInt8(ascii: "T"),
            bytes[3] == UInt8(ascii: "P"), bytes[4] == UInt8(ascii: "/")
        {
            self = ResponseHead()
            let space = (0..<end).first { bytes[$0] == UInt8(ascii: " ") } ?? end
            version = Self.text(bytes, 0, space)
            var index = space
            while index < end, bytes[index] == UInt8(ascii: " ") { index += 1 }
            var code = 0
            var digits = 0
            while index < end, digits < 3, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                code = code * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                digits += 1
                index += 1
            }
            status = digits == 3 ? code : nil
            return nil
        }
        if bytes[0] == UInt8(ascii: " ") || bytes[0] == UInt8(ascii: "\t") {
            if let last {
                let (from, to) = Self.trimmed(bytes, 0, end)
                fields[last].value += " " + Self.text(bytes, from, to)
            }
            return nil
        }
        guard let colon = (0..<end).first(where: { bytes[$0] == UInt8(ascii: ":") }) else { return nil }
        let (nameFrom, nameTo) = Self.trimmed(bytes, 0, colon)
        guard nameTo > nameFrom else { return nil }
        let (valueFrom, valueTo) = Self.trimmed(bytes, colon + 1, end)
        let name = Self.text(bytes, nameFrom, nameTo)
        let value = Self.text(bytes, valueFrom, valueTo)
        if !setsCookie, name.equalsIgnoringASCIICase("Set-Cookie") { setsCookie = true }
        if let index = fields.firstIndex(where: { $0.name.equalsIgnoringASCIICase(name) }) {
            fields[index].value += ", " + value
            last = index
        } else {
            fields.append((name, value))
            last = fields.count - 1
        }
        return nil
    }

    func response(for url: URL) -> HTTPURLResponse? {
        guard let status else { return nil }
        var headerFields: [String: String] = [:]
        headerFields.reserveCapacity(fields.count)
        for field in fields { headerFields[field.name] = field.value }
        return HTTPURLResponse(url: url, statusCode: status, httpVersion: version, headerFields: headerFields)
    }

    private static func text(_ bytes: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[from..<to]), as: UTF8.self)
    }

    /// `from..<to` without leading and trailing spaces and tabs.
    private static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int) -> (Int, Int) {
        var (from, to) = (from, to)
        while from < to, bytes[from] == UInt8(ascii: " ") || bytes[from] == UInt8(ascii: "\t") { from += 1 }
        while to > from, bytes[to - 1] == UInt8(ascii: " ") || bytes[to - 1] == UInt8(ascii: "\t") { to -= 1 }
        return (from, to)
    }
}
#endif
