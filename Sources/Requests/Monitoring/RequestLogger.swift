#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A ready-made ``RequestEventMonitor`` that writes one line per request when it ends:
///
/// ```text
/// [Requests] GET https://api.example.com/recipes?api_key=<redacted> 200 12.4 ms 1830 bytes
/// [Requests] GET https://api.example.com/menu 503 1.52 s 0 bytes 3 attempts failed: Invalid HTTP status code 503 …
/// ```
///
/// Header values and query parameters are hidden as its ``redaction`` says: by default the values of
/// `Authorization`, `Cookie`, `Proxy-Authorization` and `Set-Cookie`. A transport error is written as its
/// `URLError` code only, because its description repeats the unredacted URL; errors are the library's, before
/// the request's `mapError`.
public struct RequestLogger: RequestEventMonitor {
    /// What is hidden. Default: ``Redaction/init(headers:queryItems:jsonFields:)`` with the credential headers; name secret
    /// query parameters with `Redaction(queryItems: ["api_key"])`.
    public let redaction: Redaction
    /// Whether the line also lists the request's and the response's headers (redacted). Default: `false`.
    public let includesHeaders: Bool
    private let write: @Sendable (String) -> Void

    /// A logger that hands each line to `write`. Default: `print`.
    public init(
        redaction: Redaction = Redaction(),
        includesHeaders: Bool = false,
        write: @escaping @Sendable (String) -> Void = { print($0) }
    ) {
        self.redaction = redaction
        self.includesHeaders = includesHeaders
        self.write = write
    }

    /// Writes the line for `summary`.
    public func requestDidFinish(_ summary: RequestSummary) {
        write(line(for: summary))
    }

    /// The line written for `summary`.
    public func line(for summary: RequestSummary) -> String {
        var parts = ["[Requests]"]
        parts.append(summary.urlRequest?.httpMethod ?? "GET")
        parts.append(summary.urlRequest?.url.map(redaction.string(for:)) ?? summary.identifier)
        parts.append(summary.response.map { String($0.statusCode) } ?? "-")
        parts.append(Self.format(duration: summary.duration))
        parts.append("\(summary.bodyBytes) bytes")
        if summary.attempts != 1 { parts.append("\(summary.attempts) attempts") }
        if let error = summary.error { parts.append("failed: \(Self.describe(error))") }
        if includesHeaders {
            let sent = redaction.lines(for: summary.urlRequest?.allHTTPHeaderFields ?? [:])
            let received = redaction.lines(for: (summary.response?.allHeaderFields as? [String: String]) ?? [:])
            parts.append("request headers [\(sent.joined(separator: "; "))]")
            parts.append("response headers [\(received.joined(separator: "; "))]")
        }
        return parts.joined(separator: " ")
    }

    private static func format(duration: TimeInterval) -> String {
        duration < 1 ? String(format: "%.1f ms", duration * 1000) : String(format: "%.2f s", duration)
    }

    private static func describe(_ error: Error) -> String {
        switch error {
        case let error as URLError:
            return "URLError \(error.code.rawValue)"
        case let RequestQueueError.dependencyFailed(underlying):
            return "A request this one depends on failed: \(describe(underlying))"
        default:
            return String(describing: error)
        }
    }
}
