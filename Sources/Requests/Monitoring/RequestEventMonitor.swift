#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Told about every attempt of every request on a queue, and about how each request ended.
///
/// Attach monitors with ``RequestPolicies/monitors``; each is called in order. Every method has an empty
/// default, so a monitor implements only what it needs. Calls come from the threads where things happen
/// (the session's delegate queue, a global queue), never under a lock of Requests and never inside `cancel()`:
/// keep them quick. Durations are measured by Requests with a monotonic clock, because Linux delivers no
/// task metrics.
///
/// For one request the order is: for each attempt, ``requestWillSend(_:)``, ``requestDidCreateTask(_:task:)``, then ``requestDidReceive(_:response:bodyBytes:duration:)``
/// if a response arrived, then ``requestDidFail(_:error:duration:)`` if the attempt failed, then
/// ``requestWillAttemptAgain(_:reason:delay:)`` if another attempt follows; and last, once, ``requestDidFinish(_:)``.
/// A 307 or 308 whose body Requests sends again (see Limits and security) adds ``requestWillRedirect(_:response:to:)``,
/// then a second ``requestWillSend(_:)`` and ``requestDidCreateTask(_:task:)``, within the same attempt; so does a
/// request sent again because its connection broke before any answer (see Policies).
public protocol RequestEventMonitor: Sendable {
    /// An attempt is about to be sent: adapters, the authenticator and preconditions have run.
    func requestWillSend(_ attempt: RequestAttempt)
    /// The attempt's `URLSessionTask` exists and is about to be resumed, for instrumentation of your own (its
    /// `taskIdentifier`, a task-local span). Read it or set its `priority`; do not set its `delegate` (Requests would
    /// lose the response on Apple platforms), and do not resume, suspend or cancel it: cancel the operation instead.
    func requestDidCreateTask(_ attempt: RequestAttempt, task: URLSessionTask)
    /// An attempt received an HTTP response with a body of `bodyBytes`, `duration` seconds after it was sent.
    func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval)
    /// An attempt failed: a transport error, a status or validation error, or a body that could not be processed.
    func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval)
    /// The next attempt will start in `delay` seconds. Called by the default
    /// ``requestWillAttemptAgain(_:reason:delay:)``, for every reason: after a failed attempt (a retry, a resend after a
    /// token refresh, a range restart, a reconnection after a drop), and also where nothing failed (a cache reload, a
    /// reconnection after the server closed the stream).
    func requestDidRetry(_ attempt: RequestAttempt, delay: TimeInterval)
    /// The request will be sent again in `delay` seconds, for `reason`: a retry or a resend after a token refresh
    /// (after ``requestDidFail(_:error:duration:)``), a cache reload after a `304` for another representation, a
    /// download's range restart, or a stream's reconnection. Default: calls ``requestDidRetry(_:delay:)``.
    func requestWillAttemptAgain(_ attempt: RequestAttempt, reason: ReattemptReason, delay: TimeInterval)
    /// The ``RedirectPolicy`` let the attempt follow `response` to `request` (with sensitive headers removed if it
    /// leaves the origin). Comes between ``requestWillSend(_:)`` and ``requestDidReceive(_:response:bodyBytes:duration:)``.
    func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest)
    /// The ``ResponseCache`` served, missed, revalidated, stored or did not store the attempt's response (with the
    /// reason): a hit or a miss comes before the send (a hit instead of it), revalidated, stored and not stored before
    /// ``requestDidReceive(_:response:bodyBytes:duration:)``.
    func requestDidUseCache(_ attempt: RequestAttempt, event: CacheEvent)
    /// Requests refused or corrected something it was handed (by a server, a stored file or the caller) and went on
    /// without it, as ``RequestNotice`` lists: the request itself does not fail for it. Comes before the send of the
    /// attempt it concerns.
    func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice)
    /// The request has its outcome (a result, a failure before anything was sent, or the cancellation). Called
    /// once per request, last, before its completion handler runs; after a cancellation, on a global queue.
    func requestDidFinish(_ summary: RequestSummary)
}

extension RequestEventMonitor {
    /// Does nothing.
    public func requestWillSend(_ attempt: RequestAttempt) {}
    /// Does nothing.
    public func requestDidCreateTask(_ attempt: RequestAttempt, task: URLSessionTask) {}
    /// Does nothing.
    public func requestDidReceive(_ attempt: RequestAttempt, response: HTTPURLResponse, bodyBytes: Int, duration: TimeInterval) {}
    /// Does nothing.
    public func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval) {}
    /// Does nothing.
    public func requestDidRetry(_ attempt: RequestAttempt, delay: TimeInterval) {}
    /// Calls ``requestDidRetry(_:delay:)``, so that a monitor written before reasons existed sees every new attempt.
    public func requestWillAttemptAgain(_ attempt: RequestAttempt, reason: ReattemptReason, delay: TimeInterval) {
        requestDidRetry(attempt, delay: delay)
    }
    /// Does nothing.
    public func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest) {}
    /// Does nothing.
    public func requestDidFinish(_ summary: RequestSummary) {}
    /// Does nothing.
    public func requestDidUseCache(_ attempt: RequestAttempt, event: CacheEvent) {}
    /// Does nothing.
    public func requestDidNotice(_ attempt: RequestAttempt, notice: RequestNotice) {}
}

/// Something Requests would not use as it was handed, and what it did instead. See the threat model in
/// <doc:LimitsAndSecurity>.
public enum RequestNotice: Sendable, Hashable {
    /// A stored ``ResumeState`` failed a check (its file is not a partial file of this user that Requests made, or
    /// its counts make no sense): the download starts from zero in a fresh file, and the named file was not touched.
    case resumeStateRefused(reason: String)
    /// A server-sent event `id` was not sent back as `Last-Event-ID`: it held control characters or was longer than
    /// 1 KiB. The reconnection is sent without the header.
    case lastEventIDDropped(length: Int)
    /// The server's `retry:` asked for a reconnection delay below the floor: the floor applies.
    case reconnectionDelayRaised(requested: TimeInterval, applied: TimeInterval)
    /// The response was not stored in the ``ResponseCache`` although the rules of HTTP caching allow it, for the reason
    /// given: it was owed to a credential Requests cannot see, or it arrived through a redirect. The reason is the
    /// ``NotStoredReason/description`` of the ``CacheEvent/notStored(reason:)`` event, which monitors get too, for
    /// these and for every other response the cache does not store.
    case notStored(reason: String)
}

/// One attempt at sending a request.
public struct RequestAttempt: Sendable {
    /// The request's identifier.
    public let identifier: String
    /// Which attempt this is, from 1.
    public let number: Int
    /// What is sent, after adapters and the authenticator.
    public let urlRequest: URLRequest
}

/// How a request ended.
public struct RequestSummary: Sendable {
    /// The request's identifier; for a chained request that was never built, the name of its type.
    public let identifier: String
    /// The last `URLRequest` sent; `nil` if nothing was sent.
    public let urlRequest: URLRequest?
    /// The last attempt's HTTP response; `nil` if that attempt got none (a transport error, or a cancellation
    /// before the response or during a backoff).
    public let response: HTTPURLResponse?
    /// The size of that response's body.
    public let bodyBytes: Int
    /// How many attempts were sent.
    public let attempts: Int
    /// Seconds from the start of the operation to its outcome, backoffs included.
    public let duration: TimeInterval
    /// The failure as Requests met it, before the request's `mapError` (a cancellation is
    /// ``RequestQueueError/cancelled``); `nil` on success.
    public let error: Error?
    /// What the transport measured of the last attempt; `nil` if it did not reach its end (nothing was sent, a
    /// cache hit answered it, or a cancellation or the deadline overtook it).
    public let metrics: TransferMetrics?
}

/// What Requests measured of one attempt's transfer, on every platform: Foundation on Linux gathers no
/// `URLSessionTaskMetrics`, so these come from the task's own callbacks.
public struct TransferMetrics: Sendable, Hashable {
    /// Seconds from the task's start to the headers of the response it ended with (after any redirects); `nil` if
    /// none arrived.
    public var timeToFirstByte: TimeInterval?
    /// Request body bytes the session reported sent (headers are not counted).
    public var bytesSent: Int64 = 0
    /// Response body bytes as the session handed them over: after content decoding, so a gzip body counts at its
    /// decoded size, and bytes after a limit stopped the attempt are not counted.
    public var bytesReceived: Int64 = 0
    /// Redirects the attempt followed.
    public var redirectCount = 0
    /// Whether the connection had served an earlier request: known on Apple platforms (from the task's metrics) and
    /// on Linux's libcurl transport; `nil` on Linux's URLSession, where nothing reports it.
    public var isReusedConnection: Bool?
    /// Seconds the host name took to resolve, for an attempt that opened its connection; `nil` on a reused
    /// connection, and where the transport does not say (Linux's URLSession). From the task's metrics on Apple
    /// platforms, from libcurl's timings on Linux's libcurl transport.
    public var domainLookupDuration: TimeInterval?
    /// Seconds from the resolved address to the TCP connection (for `https`, before the TLS handshake), for an
    /// attempt that opened its connection; `nil` as for ``domainLookupDuration``.
    public var connectDuration: TimeInterval?
    /// Seconds of the TLS handshake, for an `https` attempt that opened its connection; `nil` otherwise, and as for
    /// ``domainLookupDuration``.
    public var secureConnectionDuration: TimeInterval?

    /// Metrics with the given values.
    public init(
        timeToFirstByte: TimeInterval? = nil, bytesSent: Int64 = 0, bytesReceived: Int64 = 0, redirectCount: Int = 0,
        isReusedConnection: Bool? = nil
    ) {
        self.timeToFirstByte = timeToFirstByte
        self.bytesSent = bytesSent
        self.bytesReceived = bytesReceived
        self.redirectCount = redirectCount
        self.isReusedConnection = isReusedConnection
    }
}

extension TransferMetrics {
    /// How an attempt's connection was opened, in seconds (see ``TransferMetrics/domainLookupDuration``).
    struct ConnectionPhases: Hashable {
        var domainLookup: TimeInterval?
        var connect: TimeInterval?
        var secureConnection: TimeInterval?

        /// The phases a URLSession task's last transaction reports (`nil` when it reused its connection).
        init(_ transaction: URLSessionTaskTransactionMetrics) {
            func seconds(_ start: Date?, _ end: Date?) -> TimeInterval? {
                guard let start, let end else { return nil }
                return max(end.timeIntervalSince(start), 0)
            }
            domainLookup = seconds(transaction.domainLookupStartDate, transaction.domainLookupEndDate)
            connect = seconds(transaction.connectStartDate, transaction.secureConnectionStartDate ?? transaction.connectEndDate)
            secureConnection = seconds(transaction.secureConnectionStartDate, transaction.secureConnectionEndDate)
        }

        init(domainLookup: TimeInterval?, connect: TimeInterval?, secureConnection: TimeInterval?) {
            (self.domainLookup, self.connect, self.secureConnection) = (domainLookup, connect, secureConnection)
        }
    }
}
