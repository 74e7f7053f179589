#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``NetworkRequest``: the engine every request kind shares. Each attempt is prepared (`makeURLRequest`, the
/// adapters, the authenticator, one final check), sent (or answered by the ``ResponseCache``), interpreted (the status,
/// the validations, the body as the request's kind says), and then finished or sent again for a
/// ``ReattemptReason``. Dependents wait for the final outcome.
///
/// Cancelling it cancels the `URLSessionTask` (or the backoff, or the wait for a refresh) and completes at
/// once with ``RequestQueueError/cancelled``, without waiting for the server. After it finishes it holds no
/// request, task or completion handler.
public class NetworkRequestOperation<R: NetworkRequest>: RequestOperation<R.Success, R.Failure>, @unchecked Sendable {
    /// The session the request is sent on.
    public let session: URLSession
    /// The request's identifier.
    public let identifier: String
    /// Turns an accepted response's body into `Success`; chosen from the request's kind.
    let interpreter: BodyInterpreter<R>
    /// Whether the request is an ``UploadRequest``, and whether the response cache applies to it (a data request that
    /// is neither an upload nor a download): set once, when the operation is created.
    let isUpload: Bool
    let usesResponseCache: Bool

    // All guarded by the lock of `AsyncOperation`.
    /// The request, until the operation finishes.
    var heldRequest: HeldRequest<R>?
    /// The request's own policies on top of its queue's: set when a queue adopts the operation, or when it starts
    /// without one (so that a request added to a queue reads its own policies once, not twice).
    var sharedPolicies: SharedPolicies = .none
    private var hasPolicies = false
    /// Everything about running the request, created when it starts: a queued operation stays small.
    var lazyRun: RunState?

    /// Creates an operation for `request`; it does nothing until started, usually by an `OperationQueue`.
    /// `addRequest` and the other ways of adding a request give it the queue's ``RequestPolicies``; a plain
    /// `addOperation` does not. Keep a reference to an operation you start yourself until it finishes.
    ///
    /// The engine alone has no body interpreter: a response it accepts fails with ``RequestQueueError/misuse(_:)``. The
    /// operation of each request kind has one (see ``DataRequestOperation``).
    public convenience init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: R.CompletionType? = nil
    ) {
        self.init(request: request, session: session, completionQueue: completionQueue, completion: completion, interpreter: .unsupported)
    }

    /// Creates an operation whose responses `interpreter` turns into `Success`.
    init(
        request: R, session: URLSession, completionQueue: DispatchQueue?, completion: R.CompletionType?, interpreter: BodyInterpreter<R>,
        isUpload: Bool = false, usesResponseCache: Bool = false
    ) {
        self.session = session
        self.identifier = request.identifier
        self.heldRequest = HeldRequest(request)
        self.interpreter = interpreter
        self.isUpload = isUpload
        self.usesResponseCache = usesResponseCache
        super.init(completionQueue: completionQueue, mapError: request.mapError, completion: completion)
    }

    /// The request while it is held (until the operation finishes).
    final var currentRequest: R? {
        withLock { heldRequest }?.value
    }

    /// ``currentRequest`` in its box, for the steps every request takes (see `HeldRequest`).
    final var held: HeldRequest<R>? {
        withLock { heldRequest }
    }

    /// The HTTP response of the last attempt, once one has been received. Kept after finish.
    public var response: HTTPURLResponse? {
        withLock { lazyRun?.response }
    }

    /// The data task while the request is in flight; `nil` before and after.
    var currentTask: (any TransportTask)? {
        withLock { lazyRun?.task }
    }

    /// Hands each task the operation creates to `observer`, so that tests can check that tasks are released.
    /// Set it before the operation starts.
    func observeTasks(_ observer: @escaping TaskObserver) {
        withLock { run.taskObserver = observer }
    }

    override final func adopt(_ queuePolicies: SharedPolicies) {
        // The request's properties are user code: read outside the lock.
        guard let held else { return }
        let policies = queuePolicies.adding(held.value)
        withLock { (sharedPolicies, hasPolicies) = (policies, true) }
    }

    /// Must be called under the lock.
    var policies: RequestPolicies {
        sharedPolicies.policies
    }

    /// Must be called under the lock. Always inlined: in code the compiler could not specialize, a call costs as much
    /// as the rest of the access, dozens of times a request.
    @inline(__always)
    var run: RunState {
        if let lazyRun { return lazyRun }
        let run = RunState()
        lazyRun = run
        return run
    }

    // MARK: - Start, cancel, end

    /// Starts the first attempt, and the clock of the request's deadline.
    public final override func execute() {
        if !withLock({ hasPolicies }) {
            adopt(.none)  // started without a queue's policies: the request's own
        }
        guard
            let deadline = ifNotCompleted({ () -> TimeInterval? in
                run.startTime = .now()
                return policies.limits.deadline
            })
        else { return }
        if let deadline, !deadline.isNaN {
            let deadline = min(max(deadline, 0), 1e9)
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + deadline, leeway: .milliseconds(10))
            let callbacks: any AttemptCallbacks = self
            timer.setEventHandler { [weak callbacks] in callbacks?.deadlinePassed(deadline) }
            // Resumed before it can be dropped: releasing a dispatch source that was never resumed crashes.
            timer.resume()
            guard ifNotCompleted({ run.deadline = timer }) != nil else {
                timer.cancel()  // cancelled meanwhile
                return
            }
        }
        startAttempt()
    }

    /// Fails the request with ``TransferLimitError/deadlineExceeded(_:)``, unless it has its outcome already.
    func deadlinePassed(_ deadline: TimeInterval) {
        interrupt(with: TransferLimitError.deadlineExceeded(deadline))
    }

    /// Cancels the task, or the wait before the next attempt, and the deadline. The operation completes at once
    /// either way.
    public final override func cancelWork() {
        let (task, backoff, deadline) = withLock { (lazyRun?.task, lazyRun?.backoff, lazyRun?.deadline) }
        backoff?.cancel()
        deadline?.cancel()
        task?.stop(after: nil)
    }

    /// Drops the request, the task, what was sent and the policies; keeps ``response``.
    public override func releaseResources() {
        withLock {
            heldRequest = nil
            lazyRun?.task = nil
            lazyRun?.backoff = nil
            lazyRun?.deadline.take()?.cancel()
            lazyRun?.sentRequest = nil
            lazyRun?.redirectHop = nil
            lazyRun?.credential = nil
            lazyRun?.taskObserver = nil
            lazyRun?.cachedAttempt = nil
            lazyRun?.upload = nil
            sharedPolicies = .none
        }
    }

    override func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        // Without monitors there is nobody to summarise the request for (their list is fixed once the request runs).
        let summary: RequestSummary? = withLock {
            guard !policies.monitors.isEmpty else { return nil }
            return RequestSummary(
                identifier: identifier,
                urlRequest: run.sentRequest,
                response: run.response,
                bodyBytes: run.bodyBytes,
                attempts: run.attemptsSent,
                duration: run.startTime.map(secondsSince) ?? 0,
                error: error,
                metrics: run.metrics
            )
        }
        guard let summary else {
            runCompletion()
            return
        }
        emit(.didFinish(summary, then: runCompletion))
    }

    // MARK: - 2. Send

    /// Creates the attempt's task and resumes it; `redirectsSoFar` > 0 for the next task of the same attempt, after
    /// a 307 or 308 Requests sends again (see `RedirectResend`), and `afterLostConnection` after a connection that
    /// broke before any answer (see `LostConnectionResend`).
    func transmit(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?, redirectsSoFar: Int = 0, afterLostConnection: Bool = false) {
        guard
            let (attempt, taskObserver, rules) = ifNotCompleted({ () -> (RequestAttempt, TaskObserver?, TransferRules) in
                // The attempt's request stays the one it sent first, as for a redirect URLSession follows: the
                // summary's request, and the URI a response cache invalidates after an unsafe method.
                if redirectsSoFar == 0, !afterLostConnection { (run.sentRequest, run.attemptsSent) = (urlRequest, run.attemptsSent + 1) }
                // The exchanges a recording monitor gets are per hop: a redirect sent again on this new task is one.
                run.redirectHop = redirectsSoFar > 0 ? RedirectHop(urlRequest, after: run.sentRequest, start: nil) : afterLostConnection ? run.redirectHop : nil
                run.credential = credential
                (run.metrics, run.answeredChallenge) = (nil, false)
                var rules = TransferRules(policies)
                rules.keepsOutOfPlatformCache = run.cachedAttempt != nil
                rules.redirectsSoFar = redirectsSoFar
                rules.resentAfterLostConnection = afterLostConnection
                rules.method = urlRequest.httpMethod ?? "GET"
                return (currentAttempt(sending: urlRequest), run.taskObserver, rules)
            })
        else { return }
        emit(.willSend(attempt))

        // Through an existential: the session's handler is @Sendable and must not capture `R`'s metatype.
        let task: any TransportTask
        do {
            try TransferSession.checkSupported(session)
            task = try makeTask(for: urlRequest, rules: rules, callbacks: self)
        } catch {
            fail(error)
            return
        }
        taskObserver?(task)
        if let sessionTask = task.sessionTask { emit(.didCreateTask(attempt, sessionTask)) }
        // Resumed outside the lock. A cancellation that won before the task was stored never saw it: cancelled here,
        // unsent. One that wins after cancels it from a global queue, maybe only after resume(): cancelled here too.
        guard ifNotCompleted({ (run.task, run.sendTime) = (task, .now()) }) != nil else {
            task.stop(after: 0)
            return
        }
        task.resume()
        if hasCompleted {
            task.stop(after: nil)
        }
    }

    func measured(_ metrics: TransferMetrics, answeredChallenge: Bool) {
        _ = ifNotCompleted { (run.metrics, run.answeredChallenge) = (metrics, answeredChallenge) }
    }

    /// Reports progress: `completed` of `expected` bytes (`expected` ≤ 0 when unknown).
    func transferred(completed: Int64, expected: Int64) {
        // A cancelled task goes on for a moment (see `TaskCancellation`); its bytes no longer count.
        guard !hasCompleted else { return }
        updateProgress(completed: completed, total: expected)
    }

    /// The attempt's transfer ended (or the cache answered it): the transfer takes what is its own, the cache
    /// stage what is its own, and the rest is interpreted.
    func receive(body: ResponseBody, response: URLResponse?, error: Error?) {
        if let resend = error as? RedirectResend {
            body.discard()
            sendAgain(resend)
            return
        }
        if let resend = error as? LostConnectionResend {
            body.discard()
            sendAgain(resend)
            return
        }
        guard transferEnded(body: body, response: response, error: error) else { return }
        if let cached = withLock({ lazyRun?.cachedAttempt.take() }) {
            receiveThroughCache(cached, body: body, response: response, error: error)
        } else {
            finishAttempt(body: body, response: response, error: error)
        }
    }

    // MARK: - 3. Interpret, then 4. decide

    /// Reports the response, interprets it, and completes with the value or decides what follows the failure.
    func finishAttempt(body: ResponseBody, response: URLResponse?, error: Error?) {
        let ending = ifNotCompleted {
            run.sentRequest.map {
                AttemptEnding(
                    attempt: currentAttempt(sending: $0), duration: secondsSince(run.sendTime), validations: policies.validations, rule: run.statusRule)
            }
        }
        guard let ending = ending ?? nil, let held else {
            body.discard()
            return
        }
        let httpResponse = response as? HTTPURLResponse
        if let httpResponse {
            withLock { (run.response, run.bodyBytes) = (httpResponse, body.count) }
            emit(.didReceive(ending.attempt, httpResponse, bodyBytes: body.count, duration: ending.duration))
            emitExchange(ending.attempt, response: httpResponse, error: error, body: body, duration: ending.duration)
        } else if let error {
            emitExchange(ending.attempt, response: nil, error: error, body: nil, duration: ending.duration)
        }
        let failure = interpret(
            body, response: response, error: error, sent: ending.attempt.urlRequest, request: held.value, rule: ending.rule,
            validations: ending.validations)
        if let failure {
            decide(after: failure, attempt: ending.attempt, response: httpResponse, duration: ending.duration)
        }
    }

    // MARK: - The transfer's part (the download and stream operations have their own)

    /// Adds what the transfer needs to the prepared request, and returns the statuses the attempt accepts; `nil` when
    /// the operation has completed meanwhile. Runs before the final check, so that it sees them. By default: an
    /// upload's body replaces the request's own, and a multipart form is encoded (its `Content-Type` and length).
    func prepareTransfer(_ urlRequest: inout URLRequest) -> StatusRule? {
        // An upload's body is the request's code: read outside the lock.
        guard isUpload, let upload = uploadBody() else {
            return StatusRule()
        }
        urlRequest.httpBody = nil
        urlRequest.httpBodyStream = nil
        var length: Int64 = -1
        if case let .multipart(form) = upload {
            do {
                length = Int64(try form.apply(to: &urlRequest))
            } catch {
                fail(error)
                return nil
            }
        }
        return ifNotCompleted {
            run.upload = (upload, length)
            return StatusRule()
        }
    }

    /// The body of an ``UploadRequest``, read outside the lock (kept out of `prepareTransfer(_:)`, which every request
    /// runs: see `HeldRequest`).
    @inline(never)
    private func uploadBody() -> UploadBody? {
        (held?.value as? any UploadRequest)?.uploadBody
    }

    /// The task for one attempt, whose callbacks go to the transfer's sink: a body kept in memory (see `MemorySink`).
    func makeTask(for urlRequest: URLRequest, rules: TransferRules, callbacks: any AttemptCallbacks) throws -> any TransportTask {
        let upload = isUpload ? withLock { lazyRun?.upload } : nil
        return try MemorySink.task(for: urlRequest, uploading: upload, on: session, rules: rules, callbacks: callbacks)
    }

    /// The attempt's task ended: returns whether its outcome is to be interpreted (a stream's is its own).
    func transferEnded(body: ResponseBody, response: URLResponse?, error: Error?) -> Bool {
        true
    }

    /// The bytes a transfer that broke kept on disk (a download's, to resume from), for a recording monitor: the file,
    /// written from the start of the response's body; `nil` when none were kept.
    func bytesKept(afterBreaking response: HTTPURLResponse) -> URL? {
        nil
    }

    /// What the transfer decides after an attempt that ended without a value (see `decide(after:attempt:response:duration:)`):
    /// by default, nothing; the policies decide.
    func transferVerdict(after failure: Error?) -> TransferVerdict<R.Success> {
        .policies
    }
}

extension NetworkRequestOperation: AttemptCallbacks {}

/// Holds an operation's request until it finishes. A reference rather than an `R?`: code the compiler could not
/// specialize (a request type of the app's own) looks `Optional<R>`'s metadata up at run time in every function that
/// holds an `R?`, several times a request (profiled).
final class HeldRequest<Request>: @unchecked Sendable {
    let value: Request

    init(_ value: Request) {
        self.value = value
    }
}

/// What the end of an attempt is judged with, taken in one step under the lock.
struct AttemptEnding {
    let attempt: RequestAttempt
    let duration: TimeInterval
    let validations: [ResponseValidation]
    let rule: StatusRule
}
