#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// How Requests' error messages write URLs, sizes, durations and statuses: the one place that decides what an error
/// message may show (see `ErrorDescriptions.swift`).
package enum ErrorText {
    /// The most characters of outside text (a URL, a `Content-Type`) a message quotes; the rest becomes `…`.
    static let maximumQuotedLength = 200

    /// `url` as an error message shows it: scheme, host, port and path only. The user name, the password, the query
    /// and the fragment are left out, since they may hold credentials or tokens.
    static func url(_ url: URL) -> String {
        self.url(url.absoluteString)
    }

    /// `text`, a URL that may not even parse, by the rule of `url(_:)` for a `URL`: everything from the first
    /// `?` or `#` is cut, and so is any `user:password@` before the host (also without a scheme, as in
    /// `user:pw@host`). Long text is shortened to `maximumQuotedLength` characters.
    static func url(_ text: String) -> String {
        let beforeQuery = text.prefix { $0 != "?" && $0 != "#" }
        let authorityStart = beforeQuery.range(of: "://")?.upperBound ?? beforeQuery.startIndex
        let authorityEnd = beforeQuery[authorityStart...].firstIndex(of: "/") ?? beforeQuery.endIndex
        var kept = String(beforeQuery)
        if let at = beforeQuery[authorityStart..<authorityEnd].lastIndex(of: "@") {
            kept = String(beforeQuery[..<authorityStart] + beforeQuery[beforeQuery.index(after: at)...])
        }
        return clipped(kept)
    }

    /// `text`, cut to `maximumQuotedLength` characters with a trailing `…` if longer.
    package static func clipped(_ text: String) -> String {
        text.count > maximumQuotedLength ? String(text.prefix(maximumQuotedLength)) + "…" : text
    }

    /// `text` in double quotes with control characters escaped (`"a\r\nb"`), clipped.
    static func quoted(_ text: String) -> String {
        clipped(text).debugDescription
    }

    /// A path as a message shows it, in quotes: up to and with its first `?` or `#` (what follows may be a token),
    /// then `…` marking the cut.
    static func path(_ path: String) -> String {
        guard let cut = path.firstIndex(where: { $0 == "?" || $0 == "#" }) else { return quoted(path) }
        return quoted(String(path[...cut]) + "…")
    }

    /// `404 (Not Found)`: the code and, for 100 through 599, its reason phrase.
    static func status(_ code: Int) -> String {
        (100...599).contains(code) ? "\(code) (\(HTTPURLResponse.localizedString(forStatusCode: code)))" : "\(code)"
    }

    /// What a user can do about a status: wait for a rate limit or a busy server, sign in, or check the address.
    static func suggestion(forStatus code: Int) -> String? {
        switch code {
        case 401, 407: return "Sign in again, then try again."
        case 403: return "Check that your account is allowed to do this."
        case 404, 410: return "Check the address; what it named may have moved or been removed."
        case 408, 429: return "Wait a moment, then try again."
        case 500...599: return "The server has a problem; try again later."
        default: return nil
        }
    }

    /// A byte count: `1 byte`, `512 bytes`, `64 MiB`, `1.5 GiB` (binary units, one decimal at most).
    static func bytes(_ count: Int64) -> String {
        guard count.magnitude >= 1024 else { return count == 1 ? "1 byte" : "\(count) bytes" }
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
        var value = Double(count) / 1024
        var unit = 0
        while value.magnitude >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return "\(number(value, decimals: 1)) \(units[unit])"
    }

    /// A duration: `1 second`, `30 seconds`, `0.25 seconds`.
    static func seconds(_ seconds: TimeInterval) -> String {
        seconds == 1 ? "1 second" : "\(number(seconds, decimals: 3)) seconds"
    }

    /// `value` with at most `decimals` decimals and no trailing zeros; non-finite values as Swift writes them.
    private static func number(_ value: Double, decimals: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var text = String(format: "%.\(decimals)f", value)
        while text.contains("."), text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }
}
