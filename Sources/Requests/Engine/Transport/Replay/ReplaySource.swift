#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What answers the requests of a replayed session instead of the network: `RequestsTesting`'s HAR replay. Package
/// access: the engine's side of the replay, not a public extension point.
package protocol ReplaySource: AnyObject, Sendable {
    /// Answers `request`, sent with `body` (an upload's or the request's own, read whole; `nil` without one), by
    /// calling `reply` once, from any thread, now or later.
    func answer(for request: URLRequest, body: Data?, reply: @escaping @Sendable (ReplayedAnswer) -> Void)
}

/// A replayed answer: a response with its body in pieces, or the error the attempt failed with.
package enum ReplayedAnswer: Sendable {
    case response(ReplayedResponse)
    case failure(any Error)
}

/// A replayed response: its status and headers, its body as the pieces it is delivered in, and the error the transfer
/// broke with after them (a connection lost mid-body), if any.
package struct ReplayedResponse: Sendable {
    package var status: Int
    package var headers: [String: String]
    package var pieces: [ReplayedPiece]
    package var errorAfterBody: (any Error)?

    package init(status: Int, headers: [String: String], pieces: [ReplayedPiece], errorAfterBody: (any Error)? = nil) {
        (self.status, self.headers, self.pieces, self.errorAfterBody) = (status, headers, pieces, errorAfterBody)
    }
}

/// One piece of a replayed body, and the seconds to wait before delivering it (after the headers or the previous piece).
package struct ReplayedPiece: Sendable {
    package var delay: TimeInterval
    package var data: Data

    package init(delay: TimeInterval = 0, data: Data) {
        (self.delay, self.data) = (delay, data)
    }
}

/// The sessions whose requests a ``ReplaySource`` answers: every request kind the engine sends on such a session
/// (data, upload, download, stream) goes to a ``ReplayTask`` (see `Transport`), never to the network.
package enum ReplaySessions {
    private struct Entry {
        weak var session: URLSession?
        let source: any ReplaySource
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var entries: [ObjectIdentifier: Entry] = [:]

    /// From now on, the engine's requests on `session` are answered by `source`, until ``unregister(_:)`` or until the
    /// session is released.
    package static func register(_ source: any ReplaySource, for session: URLSession) {
        lock.withLock {
            entries = entries.filter { $0.value.session != nil }
            entries[ObjectIdentifier(session)] = Entry(session: session, source: source)
        }
    }

    /// The engine's requests on `session` go to its transport again.
    package static func unregister(_ session: URLSession) {
        lock.withLock { entries[ObjectIdentifier(session)] = nil }
    }

    /// The source answering `session`'s requests, if one is registered.
    static func source(for session: URLSession) -> (any ReplaySource)? {
        lock.withLock {
            guard !entries.isEmpty, let entry = entries[ObjectIdentifier(session)], entry.session === session else { return nil }
            return entry.source
        }
    }
}
