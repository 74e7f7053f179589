#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``NetworkRequest``: builds the `URLRequest`, passes it through the ``RequestPolicies`` (adapters,
/// authenticator, then the header check and preconditions), sends it, validates the status code and the response,
/// and turns the body into `Success`. Each kind of request has its subclass: ``DataRequestOperation`` (and the
/// decodable, no-content, download and upload ones) and ``StreamRequestOperation``.
///
/// A failed attempt may be sent again inside this same operation: after a backoff, by the
/// ``RetryPolicy``, or once after a token refresh, by the ``TokenAuthenticator``. Each attempt builds its
/// `URLRequest` again. Dependents wait for the final outcome.
///
/// Cancelling it cancels the `URLSessionTask` (or the backoff, or the wait for a refresh) and completes at
/// once with ``RequestQueueError/cancelled``, without waiting for the server. After it finishes it holds no
/// request, task or completion handler.
open class NetworkRequestOperation<R: NetworkRequest>: RequestOperation<R.Success, R.Failure>, @unchecked Sendable {
    /// The session the request is sent on.
    public let session: URLSession
    /// The request's identifier.
    public let identifier: String

    // All guarded by the lock of `AsyncOperation`.
    var request: R?
    /// The request's own policies on top of its queue's.
    var policyBox: PolicyBox
    /// Everything about running the request, created when it starts: a queued operation stays small.
    var lazyRun: Run?

    /// Creates an operation for `request`; it does nothing until started, usually by an `OperationQueue`.
    /// `addRequest` and the other ways of adding a request give it the queue's ``RequestPolicies``; a plain
    /// `addOperation` does not. Keep a reference to an operation you start yourself until it finishes.
    public init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: R.CompletionType? = nil
    ) {
        self.session = session
        self.identifier = request.identifier
        self.request = request
        self.policyBox = PolicyBox.none.adding(request)
        super.init(completionQueue: completionQueue, mapError: request.mapError, completion: completion)
    }

    /// The request while it is held (until the operation finishes).
    final var currentRequest: R? {
        withLock { request }
    }

    /// The HTTP response of the last attempt, once one has been received. Kept after finish.
    public var response: HTTPURLResponse? {
        withLock { lazyRun?.response }
    }

    /// The data task while the request is in flight; `nil` before and after.
    var currentTask: URLSessionTask? {
        withLock { lazyRun?.task }
    }

    /// Hands each task the operation creates to `observer`, so that tests can check that tasks are released.
    /// Set it before the operation starts.
    func observeTasks(_ observer: @escaping TaskObserver) {
        withLock { run.taskObserver = observer }
    }

    override final func adopt(_ queuePolicies: PolicyBox) {
        // The request's properties are user code: read outside the lock.
        guard let request = withLock({ request }) else { return }
        let policies = queuePolicies.adding(request)
        withLock { policyBox = policies }
    }

    /// Must be called under the lock.
    var policies: RequestPolicies {
        policyBox.policies
    }

    /// Must be called under the lock.
    var run: Run {
        if let lazyRun { return lazyRun }
        let run = Run()
        lazyRun = run
        return run
    }

    /// Starts the first attempt, and the clock of the request's deadline.
    public final override func execute() {
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
            let receiver: any AttemptReceiver = self
            timer.setEventHandler { [weak receiver] in receiver?.deadlinePassed(deadline) }
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
        if let task {
            cancelSoon(task)
        }
    }

    /// Drops the request, the task, what was sent and the policies; keeps ``response``.
    public override func releaseResources() {
        withLock {
            request = nil
            lazyRun?.task = nil
            lazyRun?.backoff = nil
            lazyRun?.deadline?.cancel()
            lazyRun?.deadline = nil
            lazyRun?.sentRequest = nil
            lazyRun?.credential = nil
            lazyRun?.taskObserver = nil
            policyBox = .none
        }
    }

    override func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        let summary: RequestSummary = withLock {
            RequestSummary(
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
        emit(.didFinish(summary, then: runCompletion))
    }

    // MARK: - Sending and receiving

    func send(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        guard
            let (attempt, taskObserver, rules) = ifNotCompleted({ () -> (RequestAttempt, TaskObserver?, TransferRules) in
                run.sentRequest = urlRequest
                run.credential = credential
                run.attemptsSent += 1
                run.metrics = nil
                return (currentAttempt(sending: urlRequest), run.taskObserver, TransferRules(policies))
            })
        else { return }
        emit(.willSend(attempt))

        // Through an existential: the session's handler is @Sendable and must not capture `R`'s metatype.
        let task: URLSessionTask
        do {
            try TransferSession.checkSupported(session)
            task = try makeTask(for: urlRequest, rules: rules, receiver: self)
        } catch {
            complete(with: .failure(error))
            return
        }
        taskObserver?(task)
        emit(.didCreateTask(attempt, task))
        // Resume outside the lock. A cancellation that wins before the task is stored never sees it, so the
        // task is cancelled here, unsent; one that wins after cancels it from a global queue, maybe only
        // after resume(), so the task is also cancelled here as soon as the cancellation is visible.
        let stored: Bool? = ifNotCompleted {
            run.task = task
            run.sendTime = .now()
            return true
        }
        guard stored != nil else {
            task.cancel()
            return
        }
        task.resume()
        if hasCompleted {
            cancelSoon(task)
        }
    }

    /// The task for one attempt, which reports to `receiver` under `rules`: by default a data task whose body is
    /// kept in memory. Transfers override it. On Linux a request that must ignore the local cache has its cached
    /// entry removed first (URLSession there serves it whatever the policy says).
    func makeTask(for urlRequest: URLRequest, rules: TransferRules, receiver: any AttemptReceiver) throws -> URLSessionTask {
        #if canImport(FoundationNetworking)
        if urlRequest.cachePolicy == .reloadIgnoringLocalCacheData || urlRequest.cachePolicy == .reloadIgnoringLocalAndRemoteCacheData {
            session.configuration.urlCache?.removeCachedResponse(for: urlRequest)
        }
        #endif
        return TransferSession.task(on: session, handler: MemoryTransfer(receiver: receiver, rules: rules)) {
            $0.dataTask(with: urlRequest)
        }
    }

    /// Turns a body that passed the status check and the validations into the success value. Each kind of request
    /// overrides it; this one fails with ``RequestQueueError/misuse(_:)``.
    func process(_ body: ResponseBody, response: HTTPURLResponse, sent: URLRequest, of request: R) throws -> Processed<R.Success> {
        throw RequestQueueError.misuse("\(type(of: self)) cannot process a response body")
    }

    func measured(_ metrics: TransferMetrics) {
        withLock {
            guard !isCompletedUnderLock else { return }
            run.metrics = metrics
        }
    }

    /// Reports progress: `completed` of `expected` bytes (`expected` ≤ 0 when unknown).
    func transferred(completed: Int64, expected: Int64) {
        // A cancelled task goes on for a moment (see `cancelSoon`); its bytes no longer count.
        guard !hasCompleted else { return }
        updateProgress(completed: completed, total: expected)
    }

    func receive(body: ResponseBody, response: URLResponse?, error: Error?) {
        let state = ifNotCompleted {
            (request, run.sentRequest.map(currentAttempt(sending:)), secondsSince(run.sendTime), policies.validations)
        }
        guard let (request, attempt, duration, validations) = state, let request, let attempt else {
            body.discard()
            return
        }
        let httpResponse = response as? HTTPURLResponse
        if let httpResponse {
            withLock {
                run.response = httpResponse
                run.bodyBytes = body.count
            }
            emit(.didReceive(attempt, httpResponse, bodyBytes: body.count, duration: duration))
        }
        let processed = outcome(of: request, sent: attempt.urlRequest, body: body, response: response, error: error, validations: validations)
        // A closure, not `\.value`: in generic code a key path is built again on every call (11 µs; profiled).
        let outcome = processed.map { $0.value }
        if case let .success(success) = processed {
            if !complete(with: outcome, committing: success.commit) {
                success.abandon?()
            }
            return
        }
        if case let .failure(failure) = outcome {
            attemptFailed(attempt, with: failure, response: httpResponse, duration: duration)
        }
    }

    /// After a failed attempt: sends again (after a token refresh, or as the retry policy says), or completes with
    /// the failure.
    func attemptFailed(_ attempt: RequestAttempt, with failure: Error, response: HTTPURLResponse?, duration: TimeInterval) {
        guard (failure as? URLError)?.code != .cancelled else {
            complete(with: .failure(failure))
            return
        }
        emit(.didFail(attempt, failure, duration: duration))
        if !reauthenticate(after: failure, attempt: attempt),
            !retry(after: failure, attempt: attempt, response: response)
        {
            complete(with: .failure(failure))
        }
    }

    /// Whether `status` passes the status check: by default, whether it is one of the request's valid codes.
    func acceptsStatus(_ status: Int, of request: R) -> Bool {
        request.validHTTPStatusCodes.contains(status)
    }

    /// Whether a failed attempt may be followed by another (a retry, or a resend after a token refresh). A stream
    /// says no once it has delivered an element.
    func mayAttemptAgain() -> Bool {
        true
    }

    /// The outcome of an attempt; a body that is not processed is discarded.
    func outcome(
        of request: R, sent: URLRequest, body: ResponseBody, response: URLResponse?, error: Error?, validations: [ResponseValidation]
    ) -> Result<Processed<R.Success>, Error> {
        let outcome: Result<Processed<R.Success>, Error> = Result {
            if let error { throw error }
            guard let httpResponse = response as? HTTPURLResponse else {
                throw RequestQueueError.nonHTTPResponse(response)
            }
            guard acceptsStatus(httpResponse.statusCode, of: request) else {
                throw RequestQueueError.invalidStatusCode(statusCode: httpResponse.statusCode, response: httpResponse, body: body.errorPayload)
            }
            for validation in validations {
                try validation.validate(sent, response: httpResponse, body: body.inMemory)
            }
            return try process(body, response: httpResponse, sent: sent, of: request)
        }
        if case .failure = outcome {
            body.discard()
        }
        return outcome
    }

}

extension NetworkRequestOperation: AttemptReceiver {}
