#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request as the ``ResponseCache`` must judge it: by the headers actually sent (the request's, then the session's
/// additional headers and its cookies), by the credential it carries, and by whether the transport may add one the
/// cache cannot see. Every cache decision that depends on the request reads it from here.
struct CacheableRequest {
    /// The request as the operation sends it.
    let request: URLRequest
    /// `GET` or `HEAD`: the only methods whose responses are stored.
    let method: String
    /// The URL without user info or fragment: what the entry is stored under (as a keyed digest).
    let url: URL
    /// Whether the request's URL may hold user info (it has an "@"): only then is it looked for.
    private let mayHaveUserInfo: Bool
    /// The session's `httpAdditionalHeaders`, which the request's own headers override.
    private let sessionHeaders: [AnyHashable: Any]
    /// The cookie store's cookies for the URL, as a `Cookie` header: read when first needed (a hit on an entry that
    /// does not vary on cookies never reads them), and at the latest when the request is sent (see
    /// ``snapshotCookies()``), because the answer may set cookies before the entry is stored.
    private let cookies: CookieSnapshot?
    /// The session's credential storage, which the transport may answer a challenge from (and, on Apple platforms,
    /// send a credential from unasked).
    private let credentialStorage: URLCredentialStorage?
    /// The ``TokenAuthenticator``'s token the request carries, in whatever header (or elsewhere) its `authorize`
    /// closure put it; `nil` without an authenticator. Kept in memory only: entries hold its keyed digest.
    private let token: String?

    /// The view of `request` sent on `session`, with the authenticator's `token` if one was applied; `nil` when its
    /// method or URL is never cached.
    init?(_ request: URLRequest, session: URLSession?, token: String? = nil) {
        let method = (request.httpMethod ?? "GET").uppercased()
        guard method == "GET" || method == "HEAD", let url = request.url else { return nil }
        let text = url.absoluteString
        guard let bare = Self.bare(url, text: text) else { return nil }
        mayHaveUserInfo = text.utf8.contains(UInt8(ascii: "@"))
        self.request = request
        self.method = method
        self.url = bare
        let facts = session.map(SessionFacts.of) ?? SessionFacts(nil)
        sessionHeaders = facts.additionalHeaders
        // Not `request.httpShouldHandleCookies`: Foundation on Linux sends the store's cookies whatever it says, and
        // counting cookies that were not sent only keeps entries apart.
        cookies = facts.cookieStorage.map { CookieSnapshot($0, url: url) }
        credentialStorage = facts.credentialStorage
        self.token = token
    }

    /// `url` without user info and fragment; `nil` if it has no host-based form.
    static func bare(_ url: URL) -> URL? {
        bare(url, text: url.absoluteString)
    }

    private static func bare(_ url: URL, text: String) -> URL? {
        // Most URLs have neither (no "@" or "#" at all): they are used as they are, without the cost of parsing.
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "#") }) else { return url }
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return nil }
        components.user = nil
        components.password = nil
        components.fragment = nil
        return components.url
    }

    /// The value of header `name` as the request goes out: the request's own, else the session's; for `Cookie`,
    /// with the cookie storage's cookies for the URL added.
    func sentValue(_ name: String) -> String? {
        let own =
            request.value(forHTTPHeaderField: name)
            ?? sessionHeaders.first { ($0.key as? String)?.equalsIgnoringASCIICase(name) == true }?.value as? String
        guard name.equalsIgnoringASCIICase("Cookie") else { return own }
        // In one order: the store's order changes as it grows, and the same cookies are the same sender.
        let pairs = [own, cookies?.header].compactMap { $0 }.flatMap { $0.split(separator: ";") }
        let sorted = pairs.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.sorted()
        return sorted.isEmpty ? nil : sorted.joined(separator: "; ")
    }

    /// Reads the cookies the request is sent with, before it is sent.
    func snapshotCookies() {
        _ = cookies?.header
    }

    /// What identifies the request's sender to the server, or "" for none: the credential headers as sent, the
    /// URL's user info, and the authenticator's token (which its `authorize` may have put in a header of any name, such
    /// as `X-Api-Token`). Only its keyed digest is kept (see ``ResponseCache``).
    var credential: String {
        var parts: [String] = []
        if let token { parts.append("token: \(token)") }
        for name in ["Authorization", "Proxy-Authorization"] {
            if let value = sentValue(name) { parts.append("\(name.lowercased()): \(value)") }
        }
        if mayHaveUserInfo, let original = request.url, original.user != nil || original.password != nil {
            parts.append("userinfo: \(original.user ?? ""):\(original.password ?? "")")
        }
        return parts.joined(separator: "\n")
    }

    /// Whether the session's credential storage holds a credential for the URL's host and port while the request
    /// carries no `Authorization` of its own: the transport may then send the stored one unasked (Apple platforms do,
    /// for a protection space that authenticated before), which the cache never sees, so what comes back is not stored.
    /// A request with its own `Authorization` is sent with it, and keyed by it; if the server challenges it and the
    /// transport answers from the storage, the stage sees that answer and does not store the response.
    var transportMayAddCredential: Bool {
        guard let credentialStorage, let host = url.host?.lowercased(), sentValue("Authorization") == nil else { return false }
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        return credentialStorage.allCredentials.contains { space, credentials in
            !credentials.isEmpty && space.host.lowercased() == host && (space.port == port || space.port == 0)
        }
    }
}

/// What the cache reads of a session's configuration, read once per session: `URLSession.configuration` returns a
/// copy, too costly for every cache hit. A session's configuration never changes.
private struct SessionFacts {
    var additionalHeaders: [AnyHashable: Any] = [:]
    /// `nil` when the session sends no cookies.
    var cookieStorage: HTTPCookieStorage?
    var credentialStorage: URLCredentialStorage?

    init(_ configuration: URLSessionConfiguration?) {
        guard let configuration else { return }
        additionalHeaders = configuration.httpAdditionalHeaders ?? [:]
        cookieStorage = configuration.httpShouldSetCookies ? configuration.httpCookieStorage : nil
        credentialStorage = configuration.urlCredentialStorage
    }

    private final class Memo: @unchecked Sendable {
        weak var session: URLSession?
        let facts: SessionFacts
        init(_ session: URLSession) {
            self.session = session
            facts = SessionFacts(session.configuration)
        }
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var memos: [ObjectIdentifier: Memo] = [:]

    /// The facts of `session`, from the memo when it is still that session's.
    static func of(_ session: URLSession) -> SessionFacts {
        let id = ObjectIdentifier(session)
        if let memo = lock.withLock({ memos[id] }), memo.session === session { return memo.facts }
        let memo = Memo(session)
        lock.withLock {
            // Sessions that are gone leave their memos behind; they are dropped when the table grows.
            if memos.count >= 64 { memos = memos.filter { $0.value.session != nil } }
            memos[id] = memo
        }
        return memo.facts
    }
}

/// The cookies of a cookie storage for a URL as a `Cookie` header, read once, when first asked for. Used by one
/// thread at a time (the operation's steps follow each other).
private final class CookieSnapshot: @unchecked Sendable {
    private let storage: HTTPCookieStorage
    private let url: URL
    private var read: String??

    init(_ storage: HTTPCookieStorage, url: URL) {
        self.storage = storage
        self.url = url
    }

    var header: String? {
        if let read { return read }
        let cookies = storage.cookies(for: url) ?? []
        let header = cookies.isEmpty ? nil : HTTPCookie.requestHeaderFields(with: cookies)["Cookie"]
        read = .some(header)
        return header
    }
}
