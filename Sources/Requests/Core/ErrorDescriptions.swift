#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

// Every public error of Requests is a `LocalizedError`, so `localizedDescription` is a sentence a UI can show. A
// message names what failed (the status, the method, the limit, the header's name) and never quotes a body, a
// header's value, credentials, or a query: URLs appear as scheme, host, port and path only (see `ErrorText`).

/// What a user can do about a request they can simply send again.
private let tryAgain = "Check the network connection, then try again."
/// What a user can do about an error only the app's code can fix.
private let reportBug = "This is a problem in the app, not in your data; please report it."

extension RequestQueueError: LocalizedError {
    /// One sentence naming what failed: the status, and the method or the URL (scheme, host, port and path only)
    /// when the error carries them. Never the response's body or headers.
    public var errorDescription: String? {
        switch self {
        case .didNotReceiveData:
            return "The server's response had no content."
        case let .unexpectedEmptyBody(statusCode, method):
            return "The server answered \(ErrorText.status(statusCode)) to \(ErrorText.clipped(method)) with no content, where content was expected."
        case let .invalidStatusCode(statusCode, response, _):
            let target = response.url.map { " to the request for \(ErrorText.url($0))" } ?? ""
            return "The server answered \(ErrorText.status(statusCode))\(target)."
        case .nonEmptyData:
            return "The server sent content where it should have sent none."
        case let .nonHTTPResponse(response):
            let source = response?.url.map { " from \(ErrorText.url($0))" } ?? ""
            return "The response\(source) is not an HTTP response."
        case .cancelled:
            return "The request was cancelled."
        case let .dependencyFailed(error):
            return "A request this one needed failed: \(error.localizedDescription)"
        case let .misuse(message):
            return "Requests was used in a way that cannot work: \(message)\(message.hasSuffix(".") ? "" : ".")"
        case let .unacceptableContentType(contentType, acceptable):
            let mediaType = contentType.map { "type \(ErrorText.quoted(String($0.prefix { $0 != ";" })))" } ?? "no declared type"
            return "The server answered with content of \(mediaType), not one the request accepts (\(ErrorText.clipped(acceptable.joined(separator: ", "))))."
        }
    }

    /// What to do: for a status, what it usually calls for (sign in, wait, check the address, try later).
    public var recoverySuggestion: String? {
        switch self {
        case let .invalidStatusCode(statusCode, _, _):
            return ErrorText.suggestion(forStatus: statusCode)
        case let .dependencyFailed(error):
            return (error as? LocalizedError)?.recoverySuggestion
        case .misuse:
            return reportBug
        case .cancelled:
            return nil
        default:
            return "Try again later; if this keeps happening, the server is not answering as the app expects."
        }
    }
}

extension RequestBuildingError: LocalizedError {
    /// One sentence naming the offending input: the method, the header's name (never its value), the file's name,
    /// or the URL or path without user, password, query or fragment.
    public var errorDescription: String? {
        switch self {
        case let .invalidBaseURL(text):
            return "The base URL \(ErrorText.quoted(ErrorText.url(text))) is not an absolute http or https URL."
        case let .invalidPath(path):
            return "The path \(ErrorText.path(path)) cannot be part of a URL."
        case let .invalidMethod(method):
            return "The HTTP method \(ErrorText.quoted(method)) is not valid."
        case let .invalidHeader(name):
            return "The header \(ErrorText.quoted(name)) has an invalid name, or a value with a line break or NUL."
        case let .unreadableFile(url):
            return "The file \(ErrorText.quoted(url.lastPathComponent)) does not exist or cannot be read."
        case let .unsupportedScheme(url):
            return "The URL \(ErrorText.quoted(ErrorText.url(url))) is not an http or https URL."
        }
    }

    /// What to do: choose another file, or (for the other cases, which only code causes) report the problem.
    public var recoverySuggestion: String? {
        if case .unreadableFile = self { return "Check that the file exists and can be read, or choose another one." }
        return reportBug
    }
}

extension DownloadError: LocalizedError {
    /// One sentence saying which check the downloaded bytes failed, with the lengths or the status.
    public var errorDescription: String? {
        switch self {
        case let .lengthMismatch(expected, actual):
            return "The download has \(actual) bytes where \(expected) were expected."
        case .checksumMismatch:
            return "The downloaded file is damaged: its SHA-256 checksum is not the expected one."
        case let .rangeMismatch(_, status):
            return "The server's \(ErrorText.status(status)) answer does not continue the part already downloaded."
        }
    }

    /// Download it again.
    public var recoverySuggestion: String? {
        "Download the file again."
    }
}

extension StreamError: LocalizedError {
    /// One sentence naming the line, the limit, or the `Content-Type`. The decoder's reason for
    /// ``invalidJSON(line:reason:)`` stays in ``description``.
    public var errorDescription: String? {
        switch self {
        case let .lineTooLong(line, limit):
            return "Line \(line) of the stream is longer than the limit of \(ErrorText.bytes(Int64(limit)))."
        case let .invalidUTF8(line):
            return "Line \(line) of the stream is not valid UTF-8 text."
        case let .invalidJSON(line, _):
            return "Line \(line) of the stream is not the expected JSON."
        case let .eventTooLarge(limit):
            return "A server-sent event is larger than the limit of \(ErrorText.bytes(Int64(limit)))."
        case let .notAnEventStream(contentType):
            return "The response is not an event stream: its Content-Type is \(contentType.map(ErrorText.quoted) ?? "missing")."
        case let .consumerTooSlow(bufferSize):
            return "The stream was read too slowly: more than \(ErrorText.bytes(Int64(bufferSize))) waited to be read."
        case let .tooManyReconnections(limit, window):
            return "The stream lost its connection too often: more than \(limit) reconnections within \(ErrorText.seconds(window))."
        }
    }

    /// What to do: check the connection when it kept dropping, or try later when the server sent something unexpected.
    public var recoverySuggestion: String? {
        switch self {
        case .tooManyReconnections: return tryAgain
        case .consumerTooSlow: return nil
        default: return "Try again later; if this keeps happening, the server is not sending what the app expects."
        }
    }
}

extension TextDecodingError: LocalizedError {
    /// Names the charset.
    public var errorDescription: String? {
        switch self {
        case let .invalidBytes(charset, _):
            return "The server's text is not valid \(ErrorText.clipped(charset))."
        }
    }
}

extension RedirectError: LocalizedError {
    /// Names the redirect's target (scheme, host, port and path only) or the limit.
    public var errorDescription: String? {
        switch self {
        case let .unsupportedScheme(location):
            return "The server redirected to \(ErrorText.quoted(ErrorText.url(location))), which is not an http or https URL."
        case let .tooManyRedirects(limit):
            return "The server redirected more than \(limit) \(limit == 1 ? "time" : "times")."
        }
    }

    /// Try later: a redirect loop is the server's to fix.
    public var recoverySuggestion: String? {
        "The server may be misconfigured; try again later."
    }
}

extension TokenAuthenticator.RefreshTimedOut: LocalizedError {
    /// Says that renewing the sign-in took too long.
    public var errorDescription: String? {
        "Renewing the sign-in took too long: the token refresh did not finish in time."
    }

    /// Check the connection and try again.
    public var recoverySuggestion: String? { tryAgain }
}

extension TransferLimitError: LocalizedError {
    /// Names the limit that stopped the transfer.
    public var errorDescription: String? {
        switch self {
        case let .responseTooLarge(limit):
            return "The response was larger than the limit of \(ErrorText.bytes(limit))."
        case let .deadlineExceeded(seconds):
            return "The request did not finish within its time limit of \(ErrorText.seconds(seconds))."
        case let .tooSlow(speed):
            return "The transfer was too slow: less than \(ErrorText.bytes(speed.bytes)) moved in \(ErrorText.seconds(speed.seconds))."
        }
    }

    /// What to do: a response too large will not shrink; for the others, check the connection.
    public var recoverySuggestion: String? {
        if case .responseTooLarge = self { return nil }
        return tryAgain
    }
}

extension ResponseCacheError: LocalizedError {
    /// Names the URL (scheme, host, port and path only) that has no stored response.
    public var errorDescription: String? {
        switch self {
        case let .notCached(url):
            return "No saved copy of \(url.map(ErrorText.url) ?? "the response") is available offline."
        }
    }

    /// Go online.
    public var recoverySuggestion: String? {
        "Connect to the network, then try again."
    }
}
