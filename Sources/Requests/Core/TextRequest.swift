#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request whose response body is text: `Success` is `String`, decoded in the charset the response's
/// `Content-Type` names.
///
/// - A charset Foundation knows (UTF-8, UTF-16 and UTF-32 with or without an endianness, ISO-8859-1 to -2,
///   Windows-1250 to -1254, US-ASCII, Shift_JIS, EUC-JP, ISO-2022-JP, macintosh) is used as named, even when the body
///   starts with a byte order mark that says otherwise: the header wins (a UTF-8 BOM is dropped from UTF-8 text).
/// - No charset, or one Foundation does not know: a byte order mark decides (UTF-8, UTF-16, UTF-32), else
///   ``fallbackEncoding`` (UTF-8 by default, as RFC 9110 and browsers do for JSON and most text today; Alamofire's
///   ISO-8859-1 default comes from the obsolete RFC 2616).
/// - Bytes that are not valid in the chosen charset fail with ``TextDecodingError``; nothing is replaced.
public protocol TextRequest: DataRequest where Success == String {
    /// The charset used when the response names none, or one Foundation does not know, and the body has no byte
    /// order mark. Default: `.utf8`.
    var fallbackEncoding: String.Encoding { get }
}

extension TextRequest {
    /// `.utf8`.
    public var fallbackEncoding: String.Encoding { .utf8 }

    /// Decodes `data` in the charset of `response`'s `Content-Type` (see ``TextRequest``).
    public func processResponse(_ data: Data, response: HTTPURLResponse) throws -> String {
        try TextCharset.decode(data, contentType: response.value(forHTTPHeaderField: "Content-Type"), fallback: fallbackEncoding)
    }

    /// Decodes `data` without a response to read a charset from: a byte order mark, else ``fallbackEncoding``.
    public func processData(_ data: Data) throws -> String {
        try TextCharset.decode(data, contentType: nil, fallback: fallbackEncoding)
    }
}

/// Text that could not be decoded.
public enum TextDecodingError: Error, Equatable, CustomStringConvertible {
    /// The body is not valid in `charset` (the name the response gave, or the fallback's), so it was not decoded.
    case invalidBytes(charset: String, byteCount: Int)

    /// Names the charset.
    public var description: String {
        switch self {
        case let .invalidBytes(charset, count):
            return "The \(count)-byte body is not valid \(charset)."
        }
    }
}

/// Charset names (RFC 2978, the IANA registry) and the `String.Encoding` that decodes them.
enum TextCharset {
    static func decode(_ data: Data, contentType: String?, fallback: String.Encoding) throws -> String {
        let named = contentType.flatMap(charsetName(in:))
        let (encoding, label): (String.Encoding, String)
        if let named, let known = Self.encoding(named: named) {
            (encoding, label) = (known, named)
        } else if let bom = byteOrderMark(of: data) {
            (encoding, label) = (bom, "\(bom)")
        } else {
            (encoding, label) = (fallback, named.map { "\(fallback) (\"\($0)\" is not a charset Foundation knows)" } ?? "\(fallback)")
        }
        // UTF-8 text may start with a BOM, which is not part of the text.
        let body = encoding == .utf8 && data.starts(with: [0xEF, 0xBB, 0xBF]) ? data.dropFirst(3) : data
        if body.isEmpty { return "" }
        guard let text = String(data: body, encoding: encoding) else {
            throw TextDecodingError.invalidBytes(charset: label, byteCount: data.count)
        }
        return text
    }

    /// The `charset` parameter of a media type, unquoted and lowercased.
    static func charsetName(in contentType: String) -> String? {
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "charset" else { continue }
            let value = pair[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"")).lowercased()
            return value.isEmpty ? nil : value
        }
        return nil
    }

    static func encoding(named name: String) -> String.Encoding? {
        switch name {
        case "utf-8", "utf8", "unicode-1-1-utf-8": return .utf8
        case "utf-16": return .utf16
        case "utf-16le": return .utf16LittleEndian
        case "utf-16be": return .utf16BigEndian
        case "utf-32": return .utf32
        case "utf-32le": return .utf32LittleEndian
        case "utf-32be": return .utf32BigEndian
        case "iso-8859-1", "iso8859-1", "latin1", "l1", "iso_8859-1", "iso-ir-100", "cp819", "ibm819": return .isoLatin1
        case "iso-8859-2", "iso8859-2", "latin2", "l2", "iso_8859-2": return .isoLatin2
        case "windows-1252", "cp1252", "x-cp1252": return .windowsCP1252
        case "windows-1250", "cp1250": return .windowsCP1250
        case "windows-1251", "cp1251": return .windowsCP1251
        case "windows-1253", "cp1253": return .windowsCP1253
        case "windows-1254", "cp1254": return .windowsCP1254
        case "us-ascii", "ascii", "iso646-us", "ansi_x3.4-1968": return .ascii
        case "shift_jis", "shift-jis", "sjis", "x-sjis": return .shiftJIS
        case "euc-jp": return .japaneseEUC
        case "iso-2022-jp": return .iso2022JP
        case "macintosh", "mac", "x-mac-roman": return .macOSRoman
        default: return nil
        }
    }

    /// The encoding a byte order mark at the start of `data` names.
    static func byteOrderMark(of data: Data) -> String.Encoding? {
        let bytes = [UInt8](data.prefix(4))
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { return .utf8 }
        if bytes.starts(with: [0xFF, 0xFE, 0x00, 0x00]) || bytes.starts(with: [0x00, 0x00, 0xFE, 0xFF]) { return .utf32 }
        if bytes.starts(with: [0xFF, 0xFE]) || bytes.starts(with: [0xFE, 0xFF]) { return .utf16 }
        return nil
    }
}
