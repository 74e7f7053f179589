#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The rules at the edge between a request and the servers it reaches, in one place: which schemes are ever sent,
/// what an origin is, which headers never leave theirs, and the final check of what is about to be sent. The
/// preparation's last step, the ``RedirectPolicy`` ruling and the transport (a caller's delegate that rewrites a
/// redirect) all ask here.
enum Boundary {
    /// The headers a request never carries to another origin, whatever the policies say.
    static let alwaysSensitive = ["Authorization", "Proxy-Authorization", "Cookie"]

    /// Whether `url` may be sent at all: http or https. libcurl would speak FTP (and wait for a greeting until the
    /// timeout) or other protocols, and Foundation on Linux turns a redirect to `file:` into a path on the first host.
    static func isSendable(_ url: URL?) -> Bool {
        guard let scheme = url?.scheme?.lowercased() else { return false }
        return scheme == "http" || scheme == "https"
    }

    /// `scheme://host:port`, lowercased, with the scheme's default port; `nil` without a host.
    static func origin(of url: URL?) -> String? {
        guard let url, let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        return "\(scheme)://\(host):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }

    /// Whether going from `from` to `to` leaves the origin (scheme, host or port; so https to http does).
    static func crossesOrigin(from: URL?, to: URL?) -> Bool {
        origin(of: from) != origin(of: to)
    }

    /// `request` as it may be sent after a redirect from `previousURL`: without ``alwaysSensitive`` and
    /// `sensitiveHeaders` when it leaves the origin; `nil` when its scheme is not http(s).
    static func afterRedirect(_ request: URLRequest, from previousURL: URL?, sensitiveHeaders: [String]) -> URLRequest? {
        guard isSendable(request.url) else { return nil }
        guard crossesOrigin(from: previousURL, to: request.url) else { return request }
        var stripped = request
        for field in alwaysSensitive + sensitiveHeaders {
            stripped.setValue(nil, forHTTPHeaderField: field)
        }
        return stripped
    }

    /// The one check of the final request, after adapters, the authenticator and the headers the request's kind adds
    /// (`Range`, `If-Range`, `Accept-Encoding`, `Last-Event-ID`): the scheme, headers that could smuggle in others
    /// (CR or LF), the redirect policy's limit (``RedirectPolicy/checkLimit()``), then the preconditions. A throw
    /// fails the request and nothing is sent.
    static func checkFinal(_ request: URLRequest, preconditions: [RequestPrecondition], redirectPolicy: RedirectPolicy) throws {
        guard isSendable(request.url) else {
            throw RequestBuildingError.unsupportedScheme(request.url?.absoluteString ?? "")
        }
        try HeaderSafety.check(request)
        try redirectPolicy.checkLimit()
        for precondition in preconditions {
            try precondition.check(request)
        }
    }
}
