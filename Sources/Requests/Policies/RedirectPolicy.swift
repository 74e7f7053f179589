#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What a request does when the server redirects it. Whatever the rule, a redirect to anything but http or
/// https fails with ``RedirectError/unsupportedScheme(_:)``, more than ``maximumRedirects`` fail with
/// ``RedirectError/tooManyRedirects(limit:)``, and a redirect that leaves the origin (scheme, host, port; so
/// also https to http) never carries `Authorization`, `Proxy-Authorization`, `Cookie` or a header named in
/// ``RequestPolicies/sensitiveHeaders``.
///
/// The limit means what it says: it must lie in 0 through ``maximumSupportedRedirects``, and a request whose policy
/// has another fails with ``RequestQueueError/misuse(_:)`` before anything is sent (it is not clamped).
///
/// Set it for a queue with ``RequestPolicies/redirectPolicy``; a request replaces it with its own
/// ``NetworkRequest/redirectPolicy``. Monitors see each redirect followed
/// (``RequestEventMonitor/requestWillRedirect(_:response:to:)``).
public struct RedirectPolicy: Sendable {
    enum Rule: Sendable {
        case follow, refuse, sameOrigin
        case custom(@Sendable (URLRequest, HTTPURLResponse) -> URLRequest?)
    }

    let rule: Rule
    /// The most redirects one attempt follows: the next one fails with ``RedirectError/tooManyRedirects(limit:)``.
    /// Default: 10. It must lie in 0 through ``maximumSupportedRedirects``: a request whose policy has a negative
    /// limit, or a larger one, fails with ``RequestQueueError/misuse(_:)`` before anything is sent.
    public var maximumRedirects = 10

    /// The largest ``maximumRedirects`` there is, the same on every platform: 16. URLSession stops a chain on its own,
    /// with `URLError.httpTooManyRedirects` and without asking Requests, at its 21st redirect on Linux (measured) and,
    /// by swift-corelibs-foundation's account, on Apple platforms since macOS 11 (at the 17th before; Apple documents
    /// no number). Up to 16, Requests' own count always decides first, and a chain that goes past the limit fails with
    /// ``RedirectError/tooManyRedirects(limit:)`` everywhere.
    public static let maximumSupportedRedirects = 16

    /// Follows every http(s) redirect, without the sensitive headers when the origin changes. The default.
    public static let follow = RedirectPolicy(rule: .follow)
    /// Follows none: the 3xx response is the response, and goes to the status check (a 302 fails with
    /// ``RequestQueueError/invalidStatusCode(statusCode:response:body:)`` unless the request accepts it).
    public static let refuse = RedirectPolicy(rule: .refuse)
    /// Follows redirects within the request's origin; one to another origin is treated as ``refuse``.
    public static let sameOrigin = RedirectPolicy(rule: .sameOrigin)

    /// Asks `decide` about each redirect: it gets the request URLSession would send next (sensitive headers already
    /// removed if the origin changes) and the 3xx response, and returns the request to send, or `nil` to stop as
    /// ``refuse`` does. Headers it adds are removed again if they are sensitive and the origin changed. Keep it quick:
    /// on Linux it runs on a global queue, holding a thread, and a request cancelled meanwhile stops only when it returns.
    public static func custom(_ decide: @escaping @Sendable (_ next: URLRequest, _ response: HTTPURLResponse) -> URLRequest?) -> RedirectPolicy {
        RedirectPolicy(rule: .custom(decide))
    }

    /// This policy, following at most `count` redirects per attempt. `count` must lie in
    /// 0 through ``maximumSupportedRedirects``: a request under a policy with another fails with
    /// ``RequestQueueError/misuse(_:)`` before anything is sent (see ``maximumRedirects``).
    public func maximumRedirects(_ count: Int) -> RedirectPolicy {
        RedirectPolicy(rule: rule, maximumRedirects: count)
    }
}

/// Why a redirect was not followed.
public enum RedirectError: Error, Equatable, CustomStringConvertible {
    /// The server redirected to a URL that is not http or https (such as `file:///etc/passwd`), or to no valid URL.
    case unsupportedScheme(String)
    /// More redirects than ``RedirectPolicy/maximumRedirects`` (which `limit` is). URLSession's own
    /// `URLError.httpTooManyRedirects` is reported as this too.
    case tooManyRedirects(limit: Int)

    /// Names the problem; a URL without user, password, query or fragment.
    public var description: String {
        switch self {
        case let .unsupportedScheme(location):
            return "The server redirected to \(ErrorText.quoted(ErrorText.url(location))), which is not an http or https URL."
        case let .tooManyRedirects(limit):
            return "The server redirected more than \(limit) times."
        }
    }
}

extension RedirectPolicy {
    /// Throws ``RequestQueueError/misuse(_:)`` unless ``maximumRedirects`` lies in 0 through ``maximumSupportedRedirects``:
    /// the one check of the limit, made before anything is sent (see ``Boundary/checkFinal(_:preconditions:redirectPolicy:)``).
    func checkLimit() throws {
        if maximumRedirects < 0 {
            throw RequestQueueError.misuse("RedirectPolicy.maximumRedirects(\(maximumRedirects)) is negative; 0 follows no redirect")
        }
        if maximumRedirects > Self.maximumSupportedRedirects {
            throw RequestQueueError.misuse(
                "RedirectPolicy.maximumRedirects(\(maximumRedirects)) is above RedirectPolicy.maximumSupportedRedirects "
                    + "(\(Self.maximumSupportedRedirects)): URLSession would stop a longer chain on its own"
            )
        }
    }

    /// `error` as Requests reports a transport error: URLSession's own too-many-redirects (−1007) is this policy's
    /// ``RedirectError/tooManyRedirects(limit:)`` (the policy's count stops a chain first, but the error is never
    /// handed on raw); any other error is unchanged.
    func reported(_ error: Error) -> Error {
        (error as? URLError)?.code == .httpTooManyRedirects ? RedirectError.tooManyRedirects(limit: maximumRedirects) : error
    }

    /// The request to send after `response` redirected `previous` (whose URL is `previousURL`) to `next`, or why
    /// not; `.success(nil)` hands the 3xx response to the status check. `hops` counts this redirect. The scheme and
    /// origin rules are ``Boundary``'s.
    func ruling(
        next: URLRequest, response: HTTPURLResponse, previousURL: URL?, hops: Int, sensitiveHeaders: [String]
    ) -> Result<URLRequest?, RedirectError> {
        // The Location header, not `next.url`: URLSession on Linux turns `file:///etc/passwd` into a path on the
        // first origin.
        let location = response.value(forHTTPHeaderField: "Location") ?? ""
        let target = URL(string: location, relativeTo: response.url ?? previousURL)?.absoluteURL
        guard Boundary.isSendable(target), let stripped = Boundary.afterRedirect(next, from: previousURL, sensitiveHeaders: sensitiveHeaders) else {
            return .failure(.unsupportedScheme(location))
        }
        let followed: URLRequest?
        switch rule {
        case .follow:
            followed = stripped
        case .refuse:
            followed = nil
        case .sameOrigin:
            followed = Boundary.crossesOrigin(from: previousURL, to: next.url) ? nil : next
        case let .custom(decide):
            guard let decided = decide(stripped, response) else { return .success(nil) }
            guard let allowed = Boundary.afterRedirect(decided, from: previousURL, sensitiveHeaders: sensitiveHeaders) else {
                return .failure(.unsupportedScheme(decided.url?.absoluteString ?? ""))
            }
            followed = allowed
        }
        // The limit counts redirects followed: one the rule does not follow is the response, whatever the limit.
        guard followed == nil || hops <= maximumRedirects else { return .failure(.tooManyRedirects(limit: maximumRedirects)) }
        return .success(followed)
    }
}
