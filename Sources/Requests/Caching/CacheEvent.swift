/// What the cache did for a request, as monitors see it.
///
/// A `switch` over it needs a `default:` (or `@unknown default:`) to keep compiling when a case is added, as
/// ``notStored(reason:)`` was.
public enum CacheEvent: Sendable, Equatable {
    /// A fresh stored response was served without the network.
    case hit
    /// Nothing usable was stored: the request went to the network (with `revalidating` true when it carried the
    /// stored response's validators).
    case miss(revalidating: Bool)
    /// The server answered `304 Not Modified`, and the stored response was served with its headers refreshed.
    case revalidated
    /// The response was stored.
    case stored
    /// The response to a `GET` or `HEAD` that went through the cache was not stored (or, after a `304`, the refreshed
    /// entry was not kept), for `reason`. Comes where ``stored`` would have, before
    /// ``RequestEventMonitor/requestDidReceive(_:response:bodyBytes:duration:)``.
    case notStored(reason: NotStoredReason)
}

/// Why the ``ResponseCache`` did not store a response (see ``CacheEvent/notStored(reason:)``).
///
/// The first four are the rules of HTTP caching (RFC 9111) and the cache's size limit; the last three are responses
/// those rules would allow but that the cache cannot safely keep, because they are not the answer of the request as
/// it was sent. For those three, monitors also get ``RequestNotice/notStored(reason:)`` with ``description``, as
/// before this type existed.
public enum NotStoredReason: Sendable, Hashable, CustomStringConvertible {
    /// `Cache-Control: no-store`, in the request or in the response.
    case noStore
    /// The response says `Vary: *`: no later request can be known to be the same.
    case varyAll
    /// The status is not one the cache keeps: only 200, 203, 204, 404, 405, 410 and 414 are (a redirect is not, since
    /// a stored one would bypass the redirect policy; nor a `401` or a `500`).
    case statusNotCacheable(Int)
    /// The response has neither a freshness lifetime (`Cache-Control: max-age`, `Expires`) nor a validator (`ETag`,
    /// `Last-Modified`): a stored copy could never be served or revalidated. The cache has no heuristic freshness.
    case noFreshnessOrValidator
    /// The entry as it would be stored, headers and bookkeeping included, is `bytes` long, more than the cache's
    /// ``ResponseCache/maximumEntrySize`` (`limit`).
    case tooLarge(bytes: Int, limit: Int)
    /// The response arrived through a redirect: it is another URL's answer, not the one of the URL requested.
    case redirected
    /// The transport answered an authentication challenge with a credential the request did not show (from a
    /// session delegate, the session's credential storage or the URL): the answer owes something to a credential the
    /// cache cannot key it by.
    case challengeAnsweredByTransport
    /// The session's `urlCredentialStorage` holds a credential for the URL's host and port, and the request carried no
    /// `Authorization` of its own: the transport may send that credential unseen.
    case credentialInSessionStorage

    /// What the reason means, in a sentence without any header value or URL.
    public var description: String {
        switch self {
        case .noStore: return "the request or the response says Cache-Control: no-store"
        case .varyAll: return "the response says Vary: *"
        case let .statusNotCacheable(status): return "status \(status) is not one the cache stores (200, 203, 204, 404, 405, 410, 414)"
        case .noFreshnessOrValidator: return "the response has no freshness lifetime (max-age, Expires) and no validator (ETag, Last-Modified)"
        case let .tooLarge(bytes, limit): return "the entry would take \(bytes) bytes, more than the maximum entry size of \(limit)"
        case .redirected: return "it arrived through a redirect, from another URL than the one requested"
        case .challengeAnsweredByTransport: return "the transport answered an authentication challenge with a credential the request did not show"
        case .credentialInSessionStorage:
            return "the session's credential storage holds a credential for this host, which the transport may send unseen"
        }
    }

    /// Whether the rules would allow it but storing would not be safe: monitors also get a ``RequestNotice``.
    var isRefusal: Bool {
        switch self {
        case .redirected, .challengeAnsweredByTransport, .credentialInSessionStorage: return true
        default: return false
        }
    }
}
