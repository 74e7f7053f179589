#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension URLRequest {
    /// A `curl` command that sends this request: method, URL, headers and body, each quoted for `sh`.
    ///
    /// The values of `Authorization`, `Cookie`, `Proxy-Authorization` and `Set-Cookie` are replaced by
    /// `<redacted>`; pass `Redaction.none` to show them, or a ``Redaction`` that also hides query parameters.
    /// A text body is passed literally (`--data-raw`, so a leading `@` is not a file name); any other body is
    /// written as `printf` octal escapes and piped in. A body over 16 KiB or a stream (`httpBodyStream`) is not
    /// shown, and a comment says so.
    public func cURLDescription(redaction: Redaction = Redaction()) -> String {
        let method = httpMethod ?? "GET"
        var arguments = ["curl", "--globoff", "--silent", "--show-error"]
        arguments += method == "HEAD" ? ["--head"] : ["--request", Self.quoted(method)]
        arguments.append(Self.quoted(url.map(redaction.string(for:)) ?? ""))
        for (name, value) in (allHTTPHeaderFields ?? [:]).sorted(by: { $0.key.lowercased() < $1.key.lowercased() }) {
            let shown = redaction.value(value, ofHeader: name)
            // `Name;` is curl's way to send an empty value; `Name:` would remove the header.
            arguments += ["--header", Self.quoted(shown.isEmpty ? "\(name);" : "\(name): \(shown)")]
        }
        let command = arguments.joined(separator: " ")
        guard let body = httpBody, !body.isEmpty else {
            return httpBodyStream == nil ? command : command + " # the body is a stream and is not shown"
        }
        // One argument may hold at most 128 KiB, and octal escapes take four bytes per byte.
        guard body.count <= Self.largestShownBody else {
            return command + " # the body of \(body.count) bytes is not shown"
        }
        if let text = String(data: body, encoding: .utf8), !text.unicodeScalars.contains(where: { $0 == "\0" }) {
            // --data-raw: a body starting with `@` is text, not a file name to upload.
            return (arguments + ["--data-raw", Self.quoted(text)]).joined(separator: " ")
        }
        let octal = body.map { "\\" + String($0, radix: 8).leftPadded(to: 3) }.joined()
        return "printf \(Self.quoted(octal)) | " + (arguments + ["--data-binary", "@-"]).joined(separator: " ")
    }

    /// Bodies up to this size are written into the command.
    static let largestShownBody = 16 * 1024

    /// `text` in single quotes for `sh`; a single quote inside becomes `'\''`.
    static func quoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        String(repeating: "0", count: Swift.max(0, length - count)) + self
    }
}
