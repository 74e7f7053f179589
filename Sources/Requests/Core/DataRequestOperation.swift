#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``DataRequest``: builds the `URLRequest`, passes it through the ``RequestPolicies`` (adapters,
/// authenticator, then the header check and preconditions), sends it with a data task, validates the status code and the response,
/// and turns the body into `Success` with the request's ``DataRequest/processResponse(_:response:)``.
///
/// A failed attempt may be sent again inside this same operation: after a backoff, by the
/// ``RetryPolicy``, or once after a token refresh, by the ``TokenAuthenticator``. Each attempt builds its
/// `URLRequest` again. Dependents wait for the final outcome.
///
/// Cancelling it cancels the `URLSessionTask` (or the backoff, or the wait for a refresh) and completes at
/// once with ``RequestQueueError/cancelled``, without waiting for the server. After it finishes it holds no
/// request, task or completion handler.
open class DataRequestOperation<R: DataRequest>: RequestOperation<R.Success, R.Failure>, @unchecked Sendable {
    /// The session the request is sent on.
    public let session: URLSession
    /// The request's identifier.
    public let identifier: String

    // All guarded by the lock of `AsyncOperation`.
    private var request: R?
    /// The request's own policies on top of its queue's.
    private var policyBox: PolicyBox
    /// Everything about running the request, created when it starts: a queued operation stays small.
    private var lazyRun: Run?

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
    private var policies: RequestPolicies {
        policyBox.policies
    }

    /// Must be called under the lock.
    private var run: Run {
        if let lazyRun { return lazyRun }
        let run = Run()
        lazyRun = run
        return run
    }

    /// Starts the first attempt.
    public final override func execute() {
        guard ifNotCompleted({ run.startTime = .now() }) != nil else { return }
        startAttempt()
    }

    /// Cancels the task, or the wait before the next attempt. The operation completes at once either way.
    public final override func cancelWork() {
        let (task, backoff): (URLSessionTask?, DispatchWorkItem?) = withLock { (lazyRun?.task, lazyRun?.backoff) }
        backoff?.cancel()
        if let task {
            Self.cancelSoon(task)
        }
    }

    /// Cancels `task` a moment later, unless it has completed by then.
    ///
    /// `URLSessionTask.cancel()` waits for the session's internal queue (about a millisecond on Linux), so it runs
    /// on a global queue: `cancelAllOperations()` over thousands of requests would otherwise crawl, and the queue
    /// would start (and send) the requests it had not reached yet. And on Linux, cancelling a task while it
    /// fails or finishes crashes Foundation (`TaskRegistry.swift:118`, "a behaviour for a task that is not in the
    /// registry"; 2 of 2 soak runs of 100,000 requests with 5 % cancellations and 1 % server faults crashed before
    /// this wait). A task in that state completes within milliseconds, and `cancel()` ignores a completed task, so
    /// waiting 50 ms leaves the race only to tasks that begin to fail in the instant of the cancellation. The cost:
    /// a cancelled task goes on for 50 ms (a short upload may finish meanwhile).
    /// On Apple platforms the task is cancelled at once (on a global queue still), so that a cancelled request is
    /// not sent.
    static func cancelSoon(_ task: URLSessionTask) {
        #if canImport(FoundationNetworking)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) {
            task.cancel()
        }
        #else
        DispatchQueue.global().async {
            task.cancel()
        }
        #endif
    }

    /// Drops the request, the task, what was sent and the policies; keeps ``response``.
    public final override func releaseResources() {
        withLock {
            request = nil
            lazyRun?.task = nil
            lazyRun?.backoff = nil
            lazyRun?.sentRequest = nil
            lazyRun?.credential = nil
            lazyRun?.taskObserver = nil
            policyBox = .none
        }
    }

    override final func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        let summary: RequestSummary = withLock {
            RequestSummary(
                identifier: identifier,
                urlRequest: run.sentRequest,
                response: run.response,
                bodyBytes: run.bodyBytes,
                attempts: run.attemptsSent,
                duration: run.startTime.map(secondsSince) ?? 0,
                error: error
            )
        }
        emit(.didFinish(summary, then: runCompletion))
    }

    // MARK: - Preparing an attempt

    /// Asks the request for the `URLRequest` of the current attempt.
    private func startAttempt() {
        guard let (request, step) = ifNotCompleted({ (self.request, beginStep()) }), let request else { return }
        // Weak, like every callback held by user code: a cancelled operation is not kept until it is called.
        request.makeURLRequest { [weak self] urlRequest in
            guard let self, endStep(step) else { return }
            switch urlRequest {
            case let .failure(error): complete(with: .failure(error))
            case let .success(urlRequest): adapt(urlRequest, from: 0)
            }
        }
    }

    /// Runs the adapters from `index` on, one after the other, then authorizes.
    private func adapt(_ urlRequest: URLRequest, from index: Int) {
        let state = ifNotCompleted { () -> ([RequestAdapter], Int?) in
            let adapters = policies.adapters
            return (adapters, index < adapters.count ? beginStep() : nil)
        }
        guard let (adapters, step) = state else { return }
        guard let step else {
            authorize(urlRequest)
            return
        }
        let receiver: any AttemptReceiver = self
        adapters[index].adapt(urlRequest) { [weak receiver] result in
            receiver?.adapted(result, step: step, nextAdapter: index + 1)
        }
    }

    func adapted(_ result: Result<URLRequest, Error>, step: Int, nextAdapter: Int) {
        guard endStep(step) else { return }
        switch result {
        case let .failure(error): complete(with: .failure(error))
        case let .success(urlRequest): adapt(urlRequest, from: nextAdapter)
        }
    }

    /// Adds the authenticator's credential, waiting for a refresh in progress.
    private func authorize(_ urlRequest: URLRequest) {
        guard let (authenticator, step) = ifNotCompleted({ (policies.authenticator, beginStep()) }) else { return }
        guard let authenticator else {
            checkAndSend(urlRequest, credential: nil)
            return
        }
        let receiver: any AttemptReceiver = self
        authenticator.credential { [weak receiver] credential in
            receiver?.authorized(urlRequest, with: credential, step: step)
        }
    }

    func authorized(_ urlRequest: URLRequest, with credential: Result<TokenAuthenticator.Credential, Error>, step: Int) {
        guard endStep(step), let authenticator = ifNotCompleted({ policies.authenticator }) ?? nil else { return }
        switch credential {
        case let .failure(error):
            complete(with: .failure(error))
        case let .success(credential):
            checkAndSend(authenticator.authorizing(urlRequest, with: credential), credential: credential)
        }
    }

    private func checkAndSend(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        guard let preconditions = ifNotCompleted({ policies.preconditions }) else { return }
        do {
            // CR or LF in a header would let a value smuggle in headers or a second request.
            try HeaderSafety.check(urlRequest)
            for precondition in preconditions {
                try precondition.check(urlRequest)
            }
        } catch {
            complete(with: .failure(error))
            return
        }
        send(urlRequest, credential: credential)
    }

    // MARK: - Sending and receiving

    private func send(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        guard let (attempt, taskObserver) = ifNotCompleted({ () -> (RequestAttempt, TaskObserver?) in
            run.sentRequest = urlRequest
            run.credential = credential
            run.attemptsSent += 1
            return (currentAttempt(sending: urlRequest), run.taskObserver)
        }) else { return }
        emit(.willSend(attempt))

        // Through an existential: the session's handler is @Sendable and must not capture `R`'s metatype.
        let task: URLSessionTask
        do {
            task = try makeTask(for: urlRequest, receiver: self)
        } catch {
            complete(with: .failure(error))
            return
        }
        taskObserver?(task)
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
            Self.cancelSoon(task)
        }
    }

    /// The task for one attempt, which reports to `receiver`. The default is a data task on ``session``; a
    /// request that must ignore the local cache has its cached entry removed first. A request that carries
    /// credentials (`Authorization`, `Proxy-Authorization`, `Cookie`) runs on the ``TransferSession`` derived from
    /// ``session`` instead, whose delegate keeps them from a redirect to another host (URLSession on Linux forwards
    /// them). Transfers override it.
    func makeTask(for urlRequest: URLRequest, receiver: any AttemptReceiver) throws -> URLSessionTask {
        #if canImport(FoundationNetworking)
        if urlRequest.cachePolicy == .reloadIgnoringLocalCacheData || urlRequest.cachePolicy == .reloadIgnoringLocalAndRemoteCacheData {
            // URLSession on Linux serves a cached entry whatever the policy says.
            session.configuration.urlCache?.removeCachedResponse(for: urlRequest)
        }
        #endif
        if ["Authorization", "Proxy-Authorization", "Cookie"].contains(where: { urlRequest.value(forHTTPHeaderField: $0) != nil }) {
            return TransferSession.task(on: session, handler: CollectingTransfer(receiver: receiver, length: -1)) {
                $0.dataTask(with: urlRequest)
            }
        }
        return session.dataTask(with: urlRequest) { data, response, error in
            receiver.receive(body: .data(data ?? Data()), response: response, error: error)
        }
    }

    /// Turns a body that passed the status check and the validations into the success value. The default
    /// hands the bytes to the request's ``DataRequest/processResponse(_:response:)``.
    func process(_ body: ResponseBody, response: HTTPURLResponse, of request: R) throws -> Processed<R.Success> {
        guard case let .data(data) = body else {
            throw RequestQueueError.misuse("\(type(of: self)) received a file it cannot process")
        }
        return Processed(value: try request.processResponse(data, response: response))
    }

    /// Lets go of a body that will not be processed (a failure, a retry, a late answer). Downloads delete the file.
    func discard(_ body: ResponseBody) {}

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
            discard(body)
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
        let outcome = processed.map(\.value)
        if case let .success(success) = processed {
            if !complete(with: outcome, committing: success.commit) {
                success.abandon?()
            }
            return
        }
        guard case let .failure(failure) = outcome, (failure as? URLError)?.code != .cancelled else {
            complete(with: outcome)
            return
        }
        emit(.didFail(attempt, failure, duration: duration))
        if !reauthenticate(after: failure, attempt: attempt),
           !retry(after: failure, attempt: attempt, response: httpResponse) {
            complete(with: outcome)
        }
    }

    /// The outcome of an attempt; a body that is not processed is discarded.
    private func outcome(
        of request: R, sent: URLRequest, body: ResponseBody, response: URLResponse?, error: Error?, validations: [ResponseValidation]
    ) -> Result<Processed<R.Success>, Error> {
        let outcome: Result<Processed<R.Success>, Error> = Result {
            if let error { throw error }
            guard let httpResponse = response as? HTTPURLResponse else {
                throw RequestQueueError.nonHTTPResponse(response)
            }
            guard request.validHTTPStatusCodes.contains(httpResponse.statusCode) else {
                throw RequestQueueError.invalidStatusCode(statusCode: httpResponse.statusCode, response: httpResponse, body: body.errorPayload)
            }
            for validation in validations {
                try validation.validate(sent, response: httpResponse, body: body.inMemory)
            }
            return try process(body, response: httpResponse, of: request)
        }
        if case .failure = outcome {
            discard(body)
        }
        return outcome
    }

    // MARK: - Sending again

    /// On a status the authenticator treats as a refused token, waits for the (shared) refresh and sends
    /// again once; returns whether the failure was handled that way.
    private func reauthenticate(after failure: Error, attempt: RequestAttempt) -> Bool {
        guard let status = (failure as? RequestQueueError)?.statusCode else { return false }
        let state = withLock { (policies.authenticator, run.credential, run.resentAfterRefresh) }
        guard let authenticator = state.0, let credential = state.1, !state.2,
              authenticator.unauthorizedStatusCodes.contains(status) else { return false }
        let receiver: any AttemptReceiver = self
        authenticator.requestWasRejected(credential) { [weak receiver] decision in
            receiver?.reauthenticated(decision, after: failure, attempt: attempt)
        }
        return true
    }

    func reauthenticated(_ decision: TokenAuthenticator.Decision, after failure: Error, attempt: RequestAttempt) {
        switch decision {
        case .retry:
            scheduleNextAttempt(after: 0, failed: attempt, isResendAfterRefresh: true)
        case let .fail(error):
            complete(with: .failure(error))
        case .rateLimited:
            complete(with: .failure(failure))
        }
    }

    /// Schedules the next attempt if the retry policy allows it; returns whether the failure was handled that way.
    private func retry(after failure: Error, attempt: RequestAttempt, response: HTTPURLResponse?) -> Bool {
        let (policy, resent) = withLock { (policies.retryPolicy, run.resentAfterRefresh) }
        // The resend after a refresh is not one of the policy's attempts.
        let counted = attempt.number - (resent ? 1 : 0)
        let method = attempt.urlRequest.httpMethod ?? "GET"
        guard let delay = policy?.delay(afterAttempt: counted, method: method, error: failure, response: response) else {
            return false
        }
        scheduleNextAttempt(after: delay, failed: attempt, isResendAfterRefresh: false)
        return true
    }

    private func scheduleNextAttempt(after delay: TimeInterval, failed attempt: RequestAttempt, isResendAfterRefresh: Bool) {
        // Weak: a cancelled work item stays queued until its deadline, and must not keep the operation alive.
        let receiver: any AttemptReceiver = self
        let next = DispatchWorkItem { [weak receiver] in receiver?.startNextAttempt() }
        let scheduled: Bool? = ifNotCompleted {
            run.attempt += 1
            run.task = nil
            run.response = nil
            run.bodyBytes = 0
            run.backoff = next
            if isResendAfterRefresh { run.resentAfterRefresh = true }
            return true
        }
        guard scheduled != nil else { return } // cancelled meanwhile: that cancellation is the outcome
        emit(.didRetry(attempt, delay: delay))
        DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: next)
    }

    func startNextAttempt() {
        guard ifNotCompleted({ run.backoff = nil }) != nil else { return }
        startAttempt()
    }

    // MARK: - Steps, attempts and events

    /// Must be called under the lock.
    private func beginStep() -> Int {
        run.stepCount += 1
        run.awaitedStep = run.stepCount
        return run.stepCount
    }

    /// Whether this is the first answer to `step`, while the operation has not completed.
    private func endStep(_ step: Int) -> Bool {
        ifNotCompleted {
            guard run.awaitedStep == step else { return false }
            run.awaitedStep = nil
            return true
        } ?? false
    }

    /// Must be called under the lock.
    private func currentAttempt(sending urlRequest: URLRequest) -> RequestAttempt {
        RequestAttempt(identifier: identifier, number: run.attempt, urlRequest: urlRequest)
    }

    /// Hands `event` to the monitors, after the events before it. Attempt events that come after the outcome
    /// (from an attempt a cancellation overtook) are dropped, so ``RequestEventMonitor/requestDidFinish(_:)`` is
    /// last; the completion is scheduled only after it, by whichever thread delivers it.
    private func emit(_ event: MonitorEvent) {
        let monitors: [any RequestEventMonitor]? = withLock {
            if case .didFinish = event {} else if isCompletedUnderLock { return nil }
            let monitors = policies.monitors
            guard !monitors.isEmpty else { return [] }
            run.pendingEvents.append(event)
            guard !run.isDeliveringEvents else { return nil }
            run.isDeliveringEvents = true
            return monitors
        }
        guard let monitors else { return }
        guard !monitors.isEmpty else {
            event.continuation?()
            return
        }
        while let event: MonitorEvent = withLock({
            guard !run.pendingEvents.isEmpty else {
                run.isDeliveringEvents = false
                return nil
            }
            return run.pendingEvents.removeFirst()
        }) {
            for monitor in monitors {
                event.deliver(to: monitor)
            }
            event.continuation?()
        }
    }
}

/// Sees each task a ``DataRequestOperation`` creates (tests only).
typealias TaskObserver = @Sendable (URLSessionTask) -> Void

/// The state of a running ``DataRequestOperation``, guarded by the operation's lock.
private final class Run {
    /// The attempt in progress, from 1.
    var attempt = 1
    /// The asynchronous step (makeURLRequest, an adapter, the credential) whose answer is awaited; any other
    /// answer, such as a second call of the same callback, is ignored.
    var awaitedStep: Int?
    var stepCount = 0
    var task: URLSessionTask?
    var taskObserver: TaskObserver?
    /// The wait before the next attempt.
    var backoff: DispatchWorkItem?
    /// What the current attempt sent, with which credential, and when.
    var sentRequest: URLRequest?
    var credential: TokenAuthenticator.Credential?
    var sendTime = DispatchTime.now()
    var attemptsSent = 0
    /// Whether the one resend after a token refresh has been used.
    var resentAfterRefresh = false
    /// The current attempt's response and the size of its body.
    var response: HTTPURLResponse?
    var bodyBytes = 0
    var startTime: DispatchTime?
    /// Monitor events not yet delivered, and whether a thread is delivering them, so that they arrive in order.
    var pendingEvents: [MonitorEvent] = []
    var isDeliveringEvents = false
}

/// Seconds elapsed since `start`, on the monotonic clock.
private func secondsSince(_ start: DispatchTime) -> TimeInterval {
    Double(DispatchTime.now().uptimeNanoseconds &- start.uptimeNanoseconds) / 1e9
}

/// An event for the monitors, queued so that each operation's events arrive in order.
private enum MonitorEvent {
    case willSend(RequestAttempt)
    case didReceive(RequestAttempt, HTTPURLResponse, bodyBytes: Int, duration: TimeInterval)
    case didFail(RequestAttempt, Error, duration: TimeInterval)
    case didRetry(RequestAttempt, delay: TimeInterval)
    case didFinish(RequestSummary, then: @Sendable () -> Void)

    /// What runs once the monitors have seen the event: the completion, after the finish.
    var continuation: (@Sendable () -> Void)? {
        if case let .didFinish(_, continuation) = self { return continuation }
        return nil
    }

    func deliver(to monitor: any RequestEventMonitor) {
        switch self {
        case let .willSend(attempt):
            monitor.requestWillSend(attempt)
        case let .didReceive(attempt, response, bodyBytes, duration):
            monitor.requestDidReceive(attempt, response: response, bodyBytes: bodyBytes, duration: duration)
        case let .didFail(attempt, error, duration):
            monitor.requestDidFail(attempt, error: error, duration: duration)
        case let .didRetry(attempt, delay):
            monitor.requestDidRetry(attempt, delay: delay)
        case let .didFinish(summary, _):
            monitor.requestDidFinish(summary)
        }
    }
}

/// A processed success value, with what makes it final: `commit` runs in the step that claims the outcome
/// (under the operation's lock, so it must be quick and must not call back into the operation; a throw turns
/// the outcome into that failure), and `abandon` runs if a cancellation claimed it first.
struct Processed<Value> {
    let value: Value
    var commit: (() throws -> Void)?
    var abandon: (() -> Void)?

    init(value: Value, commit: (() throws -> Void)? = nil, abandon: (() -> Void)? = nil) {
        self.value = value
        self.commit = commit
        self.abandon = abandon
    }
}

/// A response's body: bytes in memory, or the file a download wrote.
enum ResponseBody: Sendable {
    case data(Data)
    case file(URL)

    /// Its size in bytes.
    var count: Int {
        switch self {
        case let .data(data): return data.count
        case let .file(url): return ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? NSNumber)?.intValue ?? 0
        }
    }

    /// The bytes validations see: a file's are not read (an empty `Data`).
    var inMemory: Data {
        if case let .data(data) = self { return data }
        return Data()
    }

    /// The bytes a status error carries: a file's first 64 KiB, which is where a server's error payload is.
    var errorPayload: Data {
        switch self {
        case let .data(data): return data
        case let .file(url): return (try? FileHandle(forReadingFrom: url)).flatMap { try? $0.read(upToCount: 64 * 1024) } ?? Data()
        }
    }
}

/// Receives the answers of asynchronous steps: the task, an adapter, the authenticator, the backoff, and a
/// transfer's progress. An existential, so that the @Sendable closures that call it do not capture the
/// operation's generic metatype.
protocol AttemptReceiver: AnyObject, Sendable {
    func receive(body: ResponseBody, response: URLResponse?, error: Error?)
    func transferred(completed: Int64, expected: Int64)
    func adapted(_ result: Result<URLRequest, Error>, step: Int, nextAdapter: Int)
    func authorized(_ urlRequest: URLRequest, with credential: Result<TokenAuthenticator.Credential, Error>, step: Int)
    func reauthenticated(_ decision: TokenAuthenticator.Decision, after failure: Error, attempt: RequestAttempt)
    func startNextAttempt()
}

extension DataRequestOperation: AttemptReceiver {}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON.
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}
