#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Why a request could not be built. Delivered through the completion handler; nothing is sent.
/// Values that an encoder refuses (such as `Double.nan` in JSON) fail with the encoder's `EncodingError`.
public enum RequestBuildingError: Error, Equatable, CustomStringConvertible {
    /// The base URL is not an absolute http(s) URL.
    case invalidBaseURL(String)
    /// The path cannot be part of a URL (for example it holds a `?`, a `#` or a control character), or a segment of
    /// it would leave the base path once decoded (`.`, `..`, or one holding `/`, `\` or NUL, also percent-encoded).
    case invalidPath(String)
    /// The method is empty or holds a character a method cannot have (such as CR, LF, NUL or a space).
    case invalidMethod(String)
    /// A header name or value holds CR, LF or NUL (header injection), or the name is empty or not a token.
    case invalidHeader(name: String)
    /// A file part's file does not exist or cannot be read.
    case unreadableFile(URL)
    /// The request's URL is not http or https (libcurl would speak FTP, for one); nothing was sent.
    case unsupportedScheme(String)

    /// Names the problem and the offending input; a URL or path without user, password, query or fragment.
    public var description: String {
        switch self {
        case let .invalidBaseURL(text):
            return "The base URL \(ErrorText.quoted(ErrorText.url(text))) is not an absolute http(s) URL."
        case let .invalidPath(path):
            return "The path \(ErrorText.path(path)) cannot be part of a URL."
        case let .invalidMethod(method):
            return "The HTTP method \(method.debugDescription) is not a valid method token."
        case let .invalidHeader(name):
            return "The header \(name.debugDescription) has a name or value with CR, LF or NUL, or an invalid name."
        case let .unreadableFile(url):
            return "The file \(url.path) does not exist or cannot be read."
        case let .unsupportedScheme(url):
            return "The URL \(ErrorText.quoted(ErrorText.url(url))) is not an http or https URL."
        }
    }
}
