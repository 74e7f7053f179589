#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One ``CurlLoop`` per caller session, so that sessions share no connection (nor the cookies and credentials that
/// ride on one); a loop stops once its session has been released and another session needs one.
enum CurlSessions {

    /// A session's loop, or `nil` for a session that libcurl never carries (see ``loop(for:request:)``).
    private struct Entry {
        weak var base: URLSession?
        let loop: CurlLoop?
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var loops: [ObjectIdentifier: Entry] = [:]

    /// The loop for `request` on `session`, or `nil` when it goes through URLSession (see ``Transport``). What
    /// depends on the session alone (its delegate, its protocol classes) is decided at its first request, as
    /// URLSession itself reads its configuration once; what depends on the request, and the session's credential
    /// storage, which can change, at each request.
    static func loop(for session: URLSession, request: URLRequest) -> CurlLoop? {
        guard LinuxTransport.current == .libcurl, request.httpBodyStream == nil, let url = request.url, isHTTP(url), url.user == nil,
            url.password == nil
        else { return nil }
        let key = ObjectIdentifier(session)
        let (loop, released): (CurlLoop?, [CurlLoop]) = lock.withLock {
            if let entry = loops[key], entry.base === session { return (entry.loop, []) }
            let gone = loops.filter { $0.value.base == nil }
            gone.keys.forEach { loops[$0] = nil }
            let carries = LibCurl.shared != nil && session.delegate == nil && hasOnlyFoundationProtocols(session.configuration)
            let loop = carries ? CurlLoop(maximumConnectionsPerHost: session.configuration.httpMaximumConnectionsPerHost) : nil
            loops[key] = Entry(base: session, loop: loop)
            return (loop, gone.values.compactMap(\.loop))
        }
        if !released.isEmpty { DispatchQueue.global().async { released.forEach { $0.stop() } } }
        guard let loop, !hasCredentials(session.configuration) else { return nil }
        return loop
    }

    /// Whether `url` is `http` or `https`, in any case.
    private static func isHTTP(_ url: URL) -> Bool {
        guard let scheme = url.scheme else { return false }
        return scheme.equalsIgnoringASCIICase("http") || scheme.equalsIgnoringASCIICase("https")
    }

    /// Whether the session's storage holds credentials, which URLSession answers challenges with (libcurl would not).
    private static func hasCredentials(_ configuration: URLSessionConfiguration) -> Bool {
        guard let storage = configuration.urlCredentialStorage else { return false }
        return !storage.allCredentials.isEmpty
    }

    /// Whether `configuration` speaks HTTP through Foundation's own protocol classes only.
    private static func hasOnlyFoundationProtocols(_ configuration: URLSessionConfiguration) -> Bool {
        (configuration.protocolClasses ?? []).allSatisfy { String(reflecting: $0).hasPrefix("FoundationNetworking.") }
    }
}
#endif
