import Foundation

/// A fault of the connection itself, after OkHttp MockWebServer's socket policies: it hits one request of a
/// connection, the first one or a later one on the same kept-alive connection, as ``ConnectionPolicy`` says.
///
/// Each raw value is the fault's name in tables and in `requests-bench --fault-lab`.
public enum ConnectionFault: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Close the connection as soon as the request's first bytes arrive, without reading the request (what had
    /// arrived is dropped first, so the close is a FIN, not a reset).
    case disconnectAtStart = "disconnect-at-start"
    /// Read the whole request, body included, then close the connection without answering: the lost answer.
    case disconnectAfterRequest = "disconnect-after-request"
    /// Read the head and half the body (a chunked body: none of it), then close; the rest of the body is left
    /// unread, so the close usually resets the connection. A request without a body is read whole, then closed.
    case disconnectDuringRequestBody = "disconnect-during-request-body"
    /// Read the request, send the head with the full `Content-Length` and half the body, then close (FIN).
    case disconnectDuringResponseBody = "disconnect-during-response-body"
    /// Read the whole request, then never answer; the connection stays open until the client closes it or the
    /// server stops.
    case noResponse = "no-response"
    /// Read nothing and never answer; the connection stays open until the client closes it or the server stops.
    case stallAtStart = "stall-at-start"
    /// Answer the request (announcing keep-alive), then shut the connection's input down and close it, as
    /// MockWebServer does: the next request on the connection finds it closed.
    case shutdownInputAtEnd = "shutdown-input-at-end"
    /// Answer the request (announcing keep-alive), then shut the output down (a FIN) but go on reading: a next
    /// request on the connection is read whole (and recorded) but never answered; then the connection closes.
    case shutdownOutputAtEnd = "shutdown-output-at-end"
    /// Read the whole request, then reset the connection (TCP RST, `SO_LINGER` 0) without answering.
    case reset = "reset"

    /// The raw value.
    public var description: String { rawValue }

    /// Whether the fault comes after a complete answer (``shutdownInputAtEnd``, ``shutdownOutputAtEnd``): the
    /// request it is applied to succeeds, and the next one on the connection meets the fault.
    public var isAtEnd: Bool { self == .shutdownInputAtEnd || self == .shutdownOutputAtEnd }
}

/// A fault chosen request by request, for ``ConnectionPolicy/requestFault``: a closure that sees each request once the
/// server has read it whole (on the connection's thread, before the route runs) and returns its fault, or `nil` to
/// serve it normally.
///
/// Only the faults that act after the request was read apply: ``ConnectionFault/disconnectAfterRequest``,
/// ``ConnectionFault/noResponse``, ``ConnectionFault/reset``, ``ConnectionFault/disconnectDuringResponseBody``,
/// ``ConnectionFault/shutdownInputAtEnd`` and ``ConnectionFault/shutdownOutputAtEnd``; the others are ignored (the
/// request is served). The route does not run for a request that gets a fault before its answer, so a closure that
/// wants such a request applied (the lost answer of a request that did take effect) applies it itself.
///
/// ```swift
/// // Every request tagged "lose" is read, then its connection closed unanswered.
/// var policy = ConnectionPolicy()
/// policy.requestFault = RequestFaultRule { $0.headers["x-request-tag"] == "lose" ? .disconnectAfterRequest : nil }
/// server.connectionPolicy = policy
/// ```
public struct RequestFaultRule: Sendable, Equatable {
    private let identity = UUID()
    private let decide: @Sendable (LoopbackRequest) -> ConnectionFault?

    /// A rule; `decide` may be called from several connections' threads at once.
    public init(_ decide: @escaping @Sendable (LoopbackRequest) -> ConnectionFault?) {
        self.decide = decide
    }

    /// The fault for `request`, if it is one that applies after reading.
    func fault(for request: LoopbackRequest) -> ConnectionFault? {
        guard let fault = decide(request) else { return nil }
        switch fault {
        case .disconnectAtStart, .stallAtStart, .disconnectDuringRequestBody: return nil
        default: return fault
        }
    }

    /// Two rules are equal when they are the same rule (copies of one ``init(_:)``).
    public static func == (lhs: RequestFaultRule, rhs: RequestFaultRule) -> Bool { lhs.identity == rhs.identity }
}

/// How a ``LoopbackServer`` treats its connections: a ``ConnectionFault`` on the N-th request of a connection, and
/// when it closes a kept-alive connection on its own (never announcing it with `Connection: close`).
///
/// ```swift
/// // The second request of each connection (the first one reusing it) gets no answer, once in all.
/// server.connectionPolicy = ConnectionPolicy(fault: .disconnectAfterRequest, onRequest: 2, times: 1)
/// ```
public struct ConnectionPolicy: Sendable, Equatable {
    /// The fault, or `nil` for none.
    public var fault: ConnectionFault?
    /// Which request of a connection the fault hits, counted from 1 in the order the connection carries them.
    public var onRequest: Int
    /// How many times the fault is applied, over all connections; `nil`: on every connection.
    public var times: Int?
    /// Close each connection (a FIN, with `Connection: keep-alive` announced) after answering this many requests.
    public var closeAfterRequests: Int?
    /// Close each connection when it has been idle this long after an answer, as a load balancer's idle timeout
    /// does; a request whose first bytes arrive by then is served. Time it against the client's next request to
    /// make them race.
    public var closeAfterIdleMilliseconds: Int?
    /// Keep a connection open after a request that asked for `Connection: close` (and answer `keep-alive`), as a
    /// careless server does.
    public var ignoresConnectionClose: Bool
    /// A fault chosen for each request once it has been read, for requests that ``fault`` does not hit (see
    /// ``RequestFaultRule``); not counted in ``LoopbackServer/connectionFaultsApplied``. Default: `nil`, none.
    public var requestFault: RequestFaultRule?

    /// A policy; by default no fault and no closing, which only records ``LoopbackServer/arrivals``.
    public init(
        fault: ConnectionFault? = nil, onRequest: Int = 1, times: Int? = nil, closeAfterRequests: Int? = nil,
        closeAfterIdleMilliseconds: Int? = nil, ignoresConnectionClose: Bool = false
    ) {
        self.fault = fault
        self.onRequest = onRequest
        self.times = times
        self.closeAfterRequests = closeAfterRequests
        self.closeAfterIdleMilliseconds = closeAfterIdleMilliseconds
        self.ignoresConnectionClose = ignoresConnectionClose
    }
}

/// One request as the server saw it arrive, recorded while a ``LoopbackServer/connectionPolicy`` is set: on which
/// connection, how much of its body came, and what the server did with it.
public struct LoopbackArrival: Sendable, Equatable {
    /// How much of the body arrived.
    public enum Body: Sendable, Equatable {
        /// The head arrived and the body is still awaited: the server is reading it.
        case pending
        /// The whole request arrived (its `Content-Length`, or its chunked body to the last chunk; or it had none).
        case complete
        /// The connection ended before the whole body arrived, by the client's doing; `received` bytes had come.
        case cut(received: Int)
        /// The server stopped reading halfway, for ``ConnectionFault/disconnectDuringRequestBody``.
        case stoppedByServer(received: Int)
        /// The server did not read the request (``ConnectionFault/disconnectAtStart``, ``ConnectionFault/stallAtStart``):
        /// method and path are empty.
        case notRead
    }

    /// The connection, counted from 1 in the order the server accepted them.
    public let connection: Int
    /// The request's place on its connection, from 1.
    public let index: Int
    /// The method, or `""` when the request was not read.
    public let method: String
    /// The path without the query, or `""` when the request was not read.
    public let path: String
    /// The request's `X-Request-Tag` header, or else its `tag` query item: a name a test gives a request, to count
    /// its arrivals.
    public let tag: String?
    /// The `Idempotency-Key` header, as sent (quotes included).
    public let idempotencyKey: String?
    /// The body's `Content-Length` (0 without one); `nil` when the body is chunked.
    public let contentLength: Int?
    /// How much of the body arrived.
    public internal(set) var body: Body
    /// The body bytes of a whole request (after de-chunking); 0 until it is ``Body/complete``.
    public internal(set) var bodyBytes: Int
    /// The fault applied to this request, if any.
    public internal(set) var fault: ConnectionFault?
    /// Whether the server answered normally: set as it hands the answer to the socket, so a client may have it a
    /// moment before this is set.
    public internal(set) var answered: Bool

    /// Whether the head arrived and not the whole body, and not because of a fault of the server's: what a client
    /// that sends a request again with its headers and no body leaves behind.
    public var isHeadWithoutBody: Bool {
        switch body {
        case .pending, .cut: return true
        case .complete, .stoppedByServer, .notRead: return false
        }
    }

    /// Whether the whole request arrived.
    public var isComplete: Bool { body == .complete }
}

extension LoopbackServer {
    /// The connection policy: a fault on one request of a connection, and when kept-alive connections are closed.
    /// Setting it (even to `ConnectionPolicy()`) starts recording ``arrivals``, and counts the fault's ``ConnectionPolicy/times``
    /// from zero again; `nil` (the default) serves every connection normally and records nothing.
    public var connectionPolicy: ConnectionPolicy? {
        get { core.withLock { core.connectionPolicy } }
        set {
            core.withLock {
                core.connectionPolicy = newValue
                core.connectionFaultsApplied = 0
            }
        }
    }

    /// The requests that arrived while a ``connectionPolicy`` was set, in the order their heads arrived.
    public var arrivals: [LoopbackArrival] {
        core.withLock { core.arrivals }
    }

    /// The arrivals of the requests tagged `tag` (see ``LoopbackArrival/tag``).
    public func arrivals(tag: String) -> [LoopbackArrival] {
        arrivals.filter { $0.tag == tag }
    }

    /// How many times the policy's fault has been applied since the policy was set.
    public var connectionFaultsApplied: Int {
        core.withLock { core.connectionFaultsApplied }
    }
}
