#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One ``CurlLoop`` per caller session, so that sessions share no connection (nor the cookies and credentials that
/// ride on one); a loop stops once its session has been released and another session needs one.
enum CurlSessions {
    /// Whether the caller opted in (see ``Transport``).
    static let isChosen = ProcessInfo.processInfo.environment["REQUESTS_TRANSPORT"] == "curl"

    private struct Entry {
        weak var base: URLSession?
        let loop: CurlLoop
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var loops: [ObjectIdentifier: Entry] = [:]

    /// Whether `request` on `session` goes on libcurl (see ``Transport``).
    static func carries(_ request: URLRequest, on session: URLSession) -> Bool {
        guard isChosen, LibCurl.shared != nil, request.httpBodyStream == nil,
            let url = request.url, let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            url.user == nil, url.password == nil,
            session.delegate == nil, hasOnlyFoundationProtocols(session.configuration), !hasCredentials(session.configuration)
        else { return false }
        return true
    }

    /// The loop for `request` on `session`, or `nil` when it goes through URLSession (see ``Transport``).
    static func loop(for session: URLSession, request: URLRequest) -> CurlLoop? {
        guard carries(request, on: session) else { return nil }
        let key = ObjectIdentifier(session)
        let (loop, released): (CurlLoop?, [CurlLoop]) = lock.withLock {
            if let entry = loops[key], entry.base === session { return (entry.loop, []) }
            let gone = loops.filter { $0.value.base == nil }
            gone.keys.forEach { loops[$0] = nil }
            guard let loop = CurlLoop(maximumConnectionsPerHost: session.configuration.httpMaximumConnectionsPerHost) else {
                return (nil, gone.values.map(\.loop))
            }
            loops[key] = Entry(base: session, loop: loop)
            return (loop, gone.values.map(\.loop))
        }
        if !released.isEmpty { DispatchQueue.global().async { released.forEach { $0.stop() } } }
        return loop
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
