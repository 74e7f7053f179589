#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The errors Requests itself produces. Transport errors (`URLError`), errors thrown by `processData`
/// and errors passed to `makeURLRequest`'s completion are delivered unchanged, except `URLError.cancelled`
/// (``cancelled``) and `URLError.httpTooManyRedirects` (``RedirectError/tooManyRedirects(limit:)``).
public enum RequestQueueError: Error, CustomStringConvertible {
    /// The response had no body where one is required (for example a ``DecodableRequest`` answered with 204).
    case didNotReceiveData
    /// A ``DecodableRequest`` got an empty body where its `Success` needs one: the status and the method say which
    /// response it was (see ``DecodableRequest/emptyResponseStatusCodes``).
    case unexpectedEmptyBody(statusCode: Int, method: String)
    /// The status code is not in `validHTTPStatusCodes`. Carries the response and the body, so the
    /// server's error payload can be decoded.
    case invalidStatusCode(statusCode: Int, response: HTTPURLResponse, body: Data)
    /// A ``NoContentRequest`` with `shouldEnforceNoContent` received a body.
    case nonEmptyData
    /// The response was not an `HTTPURLResponse` (for example a `file:` URL), so its status cannot be validated.
    case nonHTTPResponse(URLResponse?)
    /// The operation was cancelled before it produced a result. `URLError.cancelled` from the session is
    /// reported as this too, so there is one thing to check.
    case cancelled
    /// An operation this one was built from (see `addRequest(after:)`) failed or was cancelled, so this
    /// request was never sent. Carries that operation's error.
    case dependencyFailed(Error)
    /// The API was used in a way that cannot work; the message says how (for example a
    /// ``RedirectPolicy/maximumRedirects`` outside 0 through ``RedirectPolicy/maximumSupportedRedirects``, refused
    /// before anything is sent).
    case misuse(String)
    /// ``ResponseValidation/contentTypeMatchesAccept`` refused the response's `Content-Type` (`nil` when it had
    /// none); carries the media ranges the request's `Accept` header allows.
    case unacceptableContentType(String?, acceptable: [String])

    /// Describes the error; for a status error it names the code.
    public var description: String {
        switch self {
        case .didNotReceiveData:
            return "The response had no body."
        case let .unexpectedEmptyBody(statusCode, method):
            return "The response to \(method) had status \(statusCode) and no body, and the request's Success cannot be empty."
        case let .invalidStatusCode(statusCode, _, body):
            return "Invalid HTTP status code \(statusCode) (\(HTTPURLResponse.localizedString(forStatusCode: statusCode))), body of \(body.count) bytes."
        case .nonEmptyData:
            return "A no-content request received a response body."
        case let .nonHTTPResponse(response):
            return "The response is not an HTTP response: \(response.map { String(describing: type(of: $0)) } ?? "none")."
        case .cancelled:
            return "The request was cancelled."
        case let .dependencyFailed(error):
            return "A request this one depends on failed: \(error)"
        case let .misuse(message):
            return "Requests was misused: \(message)"
        case let .unacceptableContentType(contentType, acceptable):
            return "The response's Content-Type \(contentType.map { "'\($0)'" } ?? "(none)") is not one the request accepts: \(acceptable.joined(separator: ", "))."
        }
    }

    /// The HTTP status code, for ``invalidStatusCode(statusCode:response:body:)``.
    public var statusCode: Int? {
        if case let .invalidStatusCode(statusCode, _, _) = self { return statusCode }
        return nil
    }

    /// The response body, for ``invalidStatusCode(statusCode:response:body:)``.
    public var responseBody: Data? {
        if case let .invalidStatusCode(_, _, body) = self { return body }
        return nil
    }
}
