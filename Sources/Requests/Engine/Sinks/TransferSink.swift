#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What one attempt's transfer is held to, taken from the request's policies when it is sent.
struct TransferRules: Sendable {
    var limits: TransferLimits
    var redirectPolicy: RedirectPolicy
    var sensitiveHeaders: [String]
    /// Whether the ``ResponseCache`` manages the attempt: the platform's `URLCache` then does not keep its answer.
    var keepsOutOfPlatformCache = false
    /// Redirects the attempt followed on earlier tasks (a 307 or 308 whose body Requests sent again, see
    /// `RedirectResend`): they count towards the limit, and the response counts as redirected.
    var redirectsSoFar = 0
    /// Whether the attempt's request was sent again already after a connection that broke before any answer (see
    /// `LostConnectionResend`).
    var resentAfterLostConnection = false
    /// The method the attempt's request was sent with, for ``ResponseBodyRule`` (a `HEAD` stays a `HEAD` through
    /// redirects, and no other method becomes one).
    var method = "GET"

    init(_ policies: RequestPolicies) {
        limits = policies.limits
        redirectPolicy = policies.redirectPolicy
        sensitiveHeaders = policies.sensitiveHeaders
    }
}

/// The callbacks of one attempt's task, whatever its body's sink: it enforces the ``TransferRules`` while the
/// response arrives, and hands the outcome to the operation once, off the session's delegate queue (so that one
/// slow `processResponse` or a large decode never delays another request on the same session).
///
/// A rule that is broken ends the attempt at once with its error and cancels the task; the task's own completion
/// is then ignored. Subclasses keep the body: ``MemorySink`` in memory, `FileSink` in a file, `StreamSink` nowhere.
class TransferSink: @unchecked Sendable {
    private weak var callbacks: (any AttemptCallbacks)?
    let rules: TransferRules
    /// Guards the state below and the subclasses' state.
    let lock = NSLock()
    private weak var task: (any TransportTask)?
    /// Whether the outcome has been handed on (or a rule ended the attempt).
    private(set) var isOver = false
    private var redirects = 0
    /// What is measured of the transfer (see ``TransferMetrics``), and when the task started.
    private var metrics = TransferMetrics()
    private var startTime: DispatchTime?
    /// When the task was last cancelled, after a rule ended the attempt.
    private var lastCancel: DispatchTime?
    /// The last response whose headers arrived: the task's response at its completion, without asking the task (a
    /// synchronous hop onto the session's internal queue on Linux).
    private var arrivedResponse: URLResponse?
    /// Why the attempt fails once its task completes (a redirect refused with an error).
    private var failureAtCompletion: Error?
    /// A 307 or 308 redirect to send again on a new task, with its body, once this one has completed with the 3xx.
    private var resend: URLRequest?
    /// The 401 or 407 whose challenge had no answer (see `TransferSession`): the attempt ends with it, bodiless.
    private var unansweredChallenge: HTTPURLResponse?
    /// Whether the transport answered an authentication challenge with a credential the request did not carry.
    private var answeredChallenge = false
    /// The body the task sends, and whether it may be sent twice (see `SentBody`).
    private var sentBody: SentBody?
    private var bodyMayBeSentTwice = false
    /// Whether the operation can send the body again on a new task (see `LostConnectionResend`).
    private var bodyCanBeSentAgain = true
    /// Whether the transport asked for the body again to send the request again, and was refused (see `SentBody`).
    private var refusedResend = false
    /// The body kept in memory (a data request's, or a stream's error body; a file sink keeps none). Guarded by `lock`.
    var bufferedBody = Data()
    /// Bytes sent and received so far, and at the start of the current speed window.
    private var moved: Int64 = 0
    private var movedAtWindowStart: Int64 = 0
    private var windowStart: DispatchTime?

    init(callbacks: any AttemptCallbacks, rules: TransferRules) {
        self.callbacks = callbacks
        self.rules = rules
        redirects = rules.redirectsSoFar
        metrics.redirectCount = rules.redirectsSoFar
    }

    /// The task whose callbacks this receives, with the body it sends, set before it is resumed.
    final func attach(_ task: any TransportTask, body: SentBody?, mayBeSentTwice: Bool, canBeSentAgain: Bool) {
        lock.withLock {
            (self.task, startTime, sentBody) = (task, .now(), body)
            (bodyMayBeSentTwice, bodyCanBeSentAgain) = (mayBeSentTwice, canBeSentAgain)
        }
    }

    /// The whole body again, for the transport to send the request again (see `SentBody`): a new stream when the
    /// request may be sent twice and its body can be read again, else `nil`.
    final func bodyToSendAgain() -> InputStream? {
        let (body, mayBeSentTwice) = lock.withLock { (sentBody, bodyMayBeSentTwice) }
        guard mayBeSentTwice else { return nil }
        return body?.freshStream()
    }

    /// Records that a request to send the body again was refused: the task's error is then reported as
    /// `SentBody.refusedResend(_:)`.
    final func refuseResend() {
        lock.withLock { refusedResend = true }
    }

    /// The task's error as reported: a refused re-send, or a connection that broke while the request was sent or the
    /// answer awaited, is a lost connection (`networkConnectionLost`), whatever libcurl says of it.
    final func reported(_ error: Error?) -> Error? {
        guard let error else { return nil }
        if lock.withLock({ refusedResend }) { return SentBody.refusedResend(error) }
        return LostConnectionResend.brokenConnection(error) ?? error
    }

    /// Ends the attempt with a ``LostConnectionResend`` instead of `error` when the task's connection broke before any
    /// answer and the request may be sent twice, once per attempt and before any redirect; returns whether it did.
    final func resendsAfterLostConnection(_ error: Error?) -> Bool {
        guard let error, LostConnectionResend.covers(error), !rules.resentAfterLostConnection, rules.redirectsSoFar == 0 else { return false }
        let resends = lock.withLock {
            bodyMayBeSentTwice && bodyCanBeSentAgain && arrivedResponse == nil && redirects == 0 && resend == nil && failureAtCompletion == nil
        }
        guard resends else { return false }
        dropBody()
        finish(body: .data(Data()), response: nil, error: LostConnectionResend(error: error))
        return true
    }

    /// Counts what the session reports: body bytes sent (a running total) and received, the response's arrival,
    /// whether the connection was reused. Called before the subclass's callback.
    final func measure(
        sentTotal: Int64? = nil, received: Int? = nil, arrived response: URLResponse? = nil, reusedConnection: Bool? = nil,
        connection phases: TransferMetrics.ConnectionPhases? = nil
    ) {
        lock.withLock {
            if let sentTotal { metrics.bytesSent = max(metrics.bytesSent, sentTotal) }
            if let received { metrics.bytesReceived += Int64(received) }
            if let response {
                arrivedResponse = response
                if metrics.timeToFirstByte == nil, let startTime { metrics.timeToFirstByte = secondsSince(startTime) }
            }
            if let reusedConnection { metrics.isReusedConnection = reusedConnection }
            if let phases {
                (metrics.domainLookupDuration, metrics.connectDuration) = (phases.domainLookup, phases.connect)
                metrics.secureConnectionDuration = phases.secureConnection
            }
        }
    }

    /// The task's response at its completion: the last one whose headers arrived, else what the task holds (a response
    /// the transport answered itself, such as an unanswered challenge's).
    final func finalResponse(of task: URLSessionTask) -> URLResponse? {
        lock.withLock { arrivedResponse } ?? task.response
    }

    // MARK: - Callbacks, on the session's delegate queue

    func didSend(total: Int64, expected: Int64) {}
    func didReceive(_ data: Data) {}

    /// A piece of the body from a transport that can keep it and pause (libcurl): handed over as by
    /// ``didReceive(_:)`` and `true`, or `false` when the stream's consumer is behind. The transport then pauses, and
    /// offers the same piece again after ``resumeTransport()``.
    func offer(_ data: Data) -> Bool {
        didReceive(data)
        return true
    }

    /// Lets a transport paused by ``offer(_:)`` go on.
    final func resumeTransport() {
        lock.withLock { task }?.resumeReceiving()
    }

    /// Hands over the ``bufferedBody``.
    func didComplete(response: URLResponse?, error: Error?) {
        let body = lock.withLock { () -> Data in
            defer { bufferedBody = Data() }
            return bufferedBody
        }
        let expected = response.map { ResponseBodyRule.expectedLength(of: $0, method: rules.method) } ?? -1
        let reported = error.map { Self.cutConnection($0, received: Int64(body.count), expected: expected) ?? $0 }
        finish(body: .data(body), response: response, error: reported)
    }

    /// The most bytes the body may have: ``TransferLimits/maximumBodySize`` for a body kept in memory.
    var bodyLimit: Int64? {
        rules.limits.maximumBodySize
    }

    /// Whether to go on with the response whose headers just arrived. A `Content-Length` above ``bodyLimit``
    /// stops it before any of the body is read.
    func shouldAccept(_ response: URLResponse) -> Bool {
        // The 3xx of a redirect the operation sends again: its own body is nobody's answer, and no limit applies.
        if let resend = lock.withLock({ resend }) {
            let hops = lock.withLock { redirects }
            stop(delivering: .data(Data()), error: RedirectResend(request: resend, response: response, redirects: hops))
            return false
        }
        startWindowIfNeeded()
        // A response without a body (a HEAD's, a 304's) may announce the length of one it does not send.
        if let limit = bodyLimit, ResponseBodyRule.expectedLength(of: response, method: rules.method) > limit {
            // Linux ignores the `.cancel` answer (see `TransferSession`), so the task is cancelled too.
            return refuse(TransferLimitError.responseTooLarge(limit: limit))
        }
        // Bytes before these headers were the body of a response the session answered itself (a 401 whose
        // challenge got a credential: Linux hands that body over too).
        lock.withLock { bufferedBody = Data() }
        return true
    }

    /// The request to send after `response` redirected the task, or `nil` to take the 3xx response as it is.
    final func willRedirect(_ response: HTTPURLResponse, to next: URLRequest, from previousURL: URL?) -> URLRequest? {
        let hops = lock.withLock {
            redirects += 1
            return redirects
        }
        let ruling = rules.redirectPolicy.ruling(
            next: next, response: response, previousURL: previousURL, hops: hops, sensitiveHeaders: rules.sensitiveHeaders
        )
        switch ruling {
        case let .failure(error):
            // Declining the redirect completes the task with the 3xx response (under the limits still), which is
            // then reported as this error: cancelling the task could meet it as it completes.
            lock.withLock { failureAtCompletion = error }
            return nil
        case let .success(request):
            if let request {
                lock.withLock { metrics.redirectCount += 1 }
                callbacks?.redirected(response, to: request)
            }
            return request
        }
    }

    /// `request` if it may be sent after a redirect from `previousURL` (see ``Boundary/afterRedirect(_:from:sensitiveHeaders:)``).
    final func enforceRules(on request: URLRequest, from previousURL: URL?) -> URLRequest? {
        Boundary.afterRedirect(request, from: previousURL, sensitiveHeaders: rules.sensitiveHeaders)
    }

    // MARK: - For subclasses

    /// The speed window waits until bytes move again: once the request body has been sent (the server may think as
    /// long as it likes before it answers; the request timeout still applies), and while a transport is paused
    /// because a stream's consumer is behind (``offer(_:)``; the consumer, not the network, is slow).
    final func speedWindowWaits() {
        lock.withLock { windowStart = nil }
    }

    /// Counts bytes that moved either way, for the minimum-speed rule.
    final func moved(_ bytes: Int64) {
        startWindowIfNeeded()
        lock.withLock { moved += bytes }
    }

    /// Hands the task's outcome to the operation, unless a rule ended the attempt already; then `body` is discarded.
    /// A redirect that was refused with an error replaces the outcome.
    final func finish(body: ResponseBody, response: URLResponse?, error: Error?) {
        let (failure, unanswered, resendRequest, hops) = lock.withLock { () -> (Error?, HTTPURLResponse?, URLRequest?, Int) in
            (failureAtCompletion, unansweredChallenge, self.resend, redirects)
        }
        guard claim().first else {
            body.discard()
            return
        }
        if let resendRequest, failure == nil, unanswered == nil, error == nil {
            body.discard()
            deliver(body: .data(Data()), response: response, error: RedirectResend(request: resendRequest, response: response, redirects: hops))
        } else if failure != nil || unanswered != nil {
            body.discard()
            deliver(body: .data(Data()), response: failure == nil ? unanswered : response, error: failure)
        } else {
            deliver(body: body, response: response, error: error)
        }
    }

    /// Takes `request`, a 307 or 308 redirect the transport is not to follow (see `RedirectResend`): once the task
    /// has completed with the 3xx, the operation sends it on a new task.
    final func resendAfterCompletion(_ request: URLRequest) {
        lock.withLock { resend = request }
    }

    /// Records that the task is cancelled because nobody can answer the authentication challenge of `response`:
    /// the attempt then ends with that response, as it does on Apple platforms, instead of a cancellation.
    final func challengeWentUnanswered(_ response: HTTPURLResponse) {
        lock.withLock { unansweredChallenge = response }
    }

    /// Records that the transport answered an authentication challenge with a credential: the response then owes
    /// something to a credential the request's headers do not show (the response cache does not store it).
    final func challengeWasAnswered() {
        lock.withLock { answeredChallenge = true }
    }

    /// Ends the attempt with `error` at once, and cancels the task.
    final func stop(with error: Error) {
        stop(delivering: .data(Data()), error: error)
    }

    /// ``stop(with:)`` for a response refused at its headers: returns `false`, the answer to ``shouldAccept(_:)``.
    final func refuse(_ error: Error) -> Bool {
        stop(with: error)
        return false
    }

    /// Ends the attempt at once with `body` as if the response had ended there, and cancels the task.
    final func stop(keeping body: ResponseBody) {
        stop(delivering: body, error: nil)
    }

    /// Ends the attempt for an operation that has its outcome already (a stream that completed): nothing is delivered,
    /// and the task is cancelled (the operation's own cancel of it may be in flight: `TaskCancellation` makes one).
    final func abandon() {
        guard claim().first else { return }
        dropBody()
        cancelTask()
    }

    private func stop(delivering body: ResponseBody, error: Error?) {
        let claimed = claim()
        guard claimed.first else { return }
        dropBody()
        deliver(body: body, response: claimed.task?.response, error: error)
        cancelTask()
    }

    /// Runs `body` under `lock` for a chunk of the body unless the attempt is over; returns `nil` if it is, or if `body`
    /// does. Such a chunk (queued before a rule ended the attempt, or of a body a refusal at its headers did not stop)
    /// means the cancel was ignored (Linux ignores one that comes too early, such as a download's at its first write):
    /// the task is cancelled again, at most every half second.
    final func receiving<T>(_ body: () -> T?) -> T? {
        if let result = lock.withLock({ isOver ? nil : body() }) { return result }
        if lock.withLock({ lastCancel.map { DispatchTime.now() > $0 + 0.5 } ?? false }) { cancelTask() }
        return nil
    }

    /// Cancels the task through `TaskCancellation`.
    private func cancelTask() {
        let task = lock.withLock { () -> (any TransportTask)? in
            lastCancel = .now()
            return self.task
        }
        task?.stop(after: nil)
    }

    /// Lets go of what the body holds so far, after a rule ended the attempt.
    func dropBody() {
        lock.withLock { bufferedBody = Data() }
    }

    // MARK: - Minimum speed

    /// Checks the current window (called about once a second by the watchdog); returns whether to keep watching.
    final func checkSpeed(now: DispatchTime) -> Bool {
        guard let speed = rules.limits.minimumSpeed, speed.seconds.isFinite, speed.seconds > 0 else { return false }
        let window = UInt64(min(speed.seconds, 1e9) * 1e9)
        let (over, tooSlow) = lock.withLock { () -> (Bool, Bool) in
            guard !isOver, let start = windowStart, now.uptimeNanoseconds &- start.uptimeNanoseconds >= window else { return (isOver, false) }
            defer { (windowStart, movedAtWindowStart) = (now, moved) }
            return (false, moved - movedAtWindowStart < speed.bytes)
        }
        if tooSlow { stop(with: TransferLimitError.tooSlow(speed)) }
        return !over && !tooSlow
    }

    private func startWindowIfNeeded() {
        guard rules.limits.minimumSpeed != nil else { return }
        let starts = lock.withLock {
            guard windowStart == nil, !isOver else { return false }
            (windowStart, movedAtWindowStart) = (.now(), moved)
            return true
        }
        if starts { TransferWatchdog.shared.watch(self) }
    }

    // MARK: - The outcome, once

    /// Claims the outcome: whether this is the first claim, and the task.
    private func claim() -> (first: Bool, task: (any TransportTask)?) {
        let claimed = lock.withLock { () -> (first: Bool, task: (any TransportTask)?) in
            guard !isOver else { return (false, nil) }
            isOver = true
            return (true, task)
        }
        if claimed.first, rules.limits.minimumSpeed != nil {
            TransferWatchdog.shared.unwatch(self)
        }
        return claimed
    }

    private func deliver(body: ResponseBody, response: URLResponse?, error: Error?) {
        let callbacks = self.callbacks
        let (metrics, answeredChallenge) = lock.withLock { (self.metrics, self.answeredChallenge) }
        DispatchQueue.global().async {
            guard let callbacks else {
                body.discard()
                return
            }
            callbacks.measured(metrics, answeredChallenge: answeredChallenge)
            callbacks.receive(body: body, response: response, error: error)
        }
    }
}
