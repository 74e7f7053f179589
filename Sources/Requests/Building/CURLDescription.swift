#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension URLRequest {
    /// A `curl` command that sends this request: method, URL, headers and body, each quoted for `sh`.
    ///
    /// The values of `Authorization`, `Cookie`, `Proxy-Authorization` and `Set-Cookie` are replaced by
    /// `<redacted>`; pass `Redaction.none` to show them, or a ``Redaction`` that also hides query parameters.
    /// A text body is passed literally; any other body is written as `printf` octal escapes and piped in.
    /// A streamed body (`httpBodyStream`) cannot be shown and is noted in a comment.
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
        guard let body = httpBody, !body.isEmpty else {
            let command = arguments.joined(separator: " ")
            return httpBodyStream == nil ? command : command + " # the body is a stream and is not shown"
        }
        if let text = String(data: body, encoding: .utf8), !text.unicodeScalars.contains(where: { $0 == "\0" }) {
            return (arguments + ["--data-binary", Self.quoted(text)]).joined(separator: " ")
        }
        let octal = body.map { "\\" + String($0, radix: 8).leftPadded(to: 3) }.joined()
        return "printf \(Self.quoted(octal)) | " + (arguments + ["--data-binary", "@-"]).joined(separator: " ")
    }

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
