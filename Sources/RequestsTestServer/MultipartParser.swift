import Foundation

/// One part of a `multipart/form-data` body.
public struct MultipartPart: Sendable, Equatable {
    /// The part's header fields with lowercased names, values as sent.
    public let headers: [String: String]
    /// The `name` of its `Content-Disposition`, with `%22`, `%0D` and `%0A` decoded (WHATWG's escaping).
    public let name: String
    /// The `filename` of its `Content-Disposition`, decoded like ``name``; `nil` if absent.
    public let fileName: String?
    /// Its `Content-Type`; `nil` if absent.
    public let contentType: String?
    /// Its content, byte for byte.
    public let body: Data
}

/// A strict `multipart/form-data` parser (RFC 7578 and RFC 2046) for tests and loopback routes.
public enum MultipartParser {
    /// Why a body is not valid `multipart/form-data`.
    public struct Error: Swift.Error, Equatable, CustomStringConvertible {
        /// What is wrong, for example `no closing delimiter`.
        public let description: String
    }

    /// Splits `body` into its parts, given the request's `Content-Type` header value.
    /// A preamble before the first delimiter and an epilogue after the last are ignored.
    /// Throws ``Error`` for a Content-Type that is not multipart/form-data with a boundary, a missing delimiter,
    /// a malformed header line, or a part without `Content-Disposition: form-data; name=…`.
    public static func parse(contentType: String, body: Data) throws -> [MultipartPart] {
        let boundary = try boundary(in: contentType)
        let bytes = [UInt8](body)
        let dashBoundary = Array("--\(boundary)".utf8)
        let delimiter = Array("\r\n--\(boundary)".utf8)

        // The first delimiter opens the body or follows the preamble's CRLF.
        var position: Int
        if bytes.starts(with: dashBoundary) {
            position = dashBoundary.count
        } else if let found = find(delimiter, in: bytes, from: 0) {
            position = found + delimiter.count
        } else {
            throw Error(description: "no delimiter")
        }

        var parts: [MultipartPart] = []
        while true {
            if bytes[position...].starts(with: Array("--".utf8)) { return parts }
            // Transport padding (spaces and tabs), then CRLF.
            while position < bytes.count, bytes[position] == 32 || bytes[position] == 9 { position += 1 }
            guard bytes[position...].starts(with: [13, 10]) else { throw Error(description: "delimiter not followed by CRLF") }
            position += 2
            var headers: [String: String] = [:]
            var contentStart = position + 2
            if !bytes[position...].starts(with: [13, 10]) {
                guard let headEnd = find([13, 10, 13, 10], in: bytes, from: position) else {
                    throw Error(description: "unterminated part headers")
                }
                headers = try parseHeaders(bytes, position..<(headEnd + 2))
                contentStart = headEnd + 4
            }
            guard let contentEnd = find(delimiter, in: bytes, from: contentStart) else {
                throw Error(description: "no closing delimiter")
            }
            parts.append(try part(headers: headers, body: Data(bytes[contentStart..<contentEnd])))
            position = contentEnd + delimiter.count
        }
    }

    /// The `boundary` parameter of a `multipart/form-data` Content-Type, unquoted.
    private static func boundary(in contentType: String) throws -> String {
        let pieces = splitParameters(contentType)
        guard pieces.first?.lowercased() == "multipart/form-data" else {
            throw Error(description: "not multipart/form-data: \(contentType)")
        }
        guard let boundary = parameters(pieces.dropFirst())["boundary"], (1...70).contains(boundary.utf8.count) else {
            throw Error(description: "missing or invalid boundary")
        }
        return boundary
    }

    /// Parses `range`, header lines that each end with CRLF.
    private static func parseHeaders(_ bytes: [UInt8], _ range: Range<Int>) throws -> [String: String] {
        var headers: [String: String] = [:]
        var start = range.lowerBound
        while start < range.upperBound, let end = find([13, 10], in: bytes, from: start), end < range.upperBound {
            let line = bytes[start..<end]
            start = end + 2
            guard !line.contains(10), !line.contains(13), let colon = line.firstIndex(of: 58) else {
                throw Error(description: "malformed header line")
            }
            let name = String(decoding: line[..<colon], as: UTF8.self)
            guard !name.isEmpty, !name.contains(where: { $0 == " " || $0 == "\t" }) else {
                throw Error(description: "malformed header name")
            }
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self)
            headers[name.lowercased()] = value.trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        }
        return headers
    }

    private static func part(headers: [String: String], body: Data) throws -> MultipartPart {
        guard let disposition = headers["content-disposition"] else { throw Error(description: "part without Content-Disposition") }
        let pieces = splitParameters(disposition)
        let parameters = parameters(pieces.dropFirst())
        guard pieces.first?.lowercased() == "form-data", let name = parameters["name"] else {
            throw Error(description: "Content-Disposition is not form-data with a name: \(disposition)")
        }
        return MultipartPart(
            headers: headers, name: unescaped(name), fileName: parameters["filename"].map(unescaped),
            contentType: headers["content-type"], body: body
        )
    }

    /// Splits `value; a=1; b="x;y"` at the semicolons outside quotes, trimming each piece.
    /// A backslash is no escape here: browsers send `C:\path` as is and escape quotes as `%22`.
    private static func splitParameters(_ value: String) -> [String] {
        var pieces: [String] = []
        var current = ""
        var quoted = false
        for character in value {
            if character == "\"" { quoted.toggle() }
            if character == ";" && !quoted {
                pieces.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
            } else {
                current.append(character)
            }
        }
        pieces.append(current.trimmingCharacters(in: .whitespaces))
        return pieces
    }

    /// `name=value` pieces as a dictionary with lowercased names and unquoted values.
    private static func parameters(_ pieces: ArraySlice<String>) -> [String: String] {
        var result: [String: String] = [:]
        for piece in pieces {
            guard let equals = piece.firstIndex(of: "=") else { continue }
            let name = piece[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            var value = piece[piece.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            result[name] = value
        }
        return result
    }

    private static func unescaped(_ text: String) -> String {
        text.replacingOccurrences(of: "%22", with: "\"")
            .replacingOccurrences(of: "%0D", with: "\r")
            .replacingOccurrences(of: "%0A", with: "\n")
    }

    /// The index of the first occurrence of `pattern` in `bytes` at or after `start`.
    private static func find(_ pattern: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
        guard let first = pattern.first, pattern.count <= bytes.count else { return nil }
        var index = max(0, start)
        let last = bytes.count - pattern.count
        while index <= last {
            guard let candidate = bytes[index...last].firstIndex(of: first) else { return nil }
            if bytes[candidate..<(candidate + pattern.count)].elementsEqual(pattern) { return candidate }
            index = candidate + 1
        }
        return nil
    }
}
