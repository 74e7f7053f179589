#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The policy pipeline of a ``NetworkRequestOperation``: what happens before an attempt is sent (`makeURLRequest`,
/// adapters, the authenticator, the checks) and after one fails (a resend after a token refresh, a retry), and
/// the monitor events. The transport is `TransferSession` and the `AttemptTransfer` of the attempt.
extension NetworkRequestOperation {
    // MARK: - Preparing an attempt

    /// Asks the request for the `URLRequest` of the current attempt.
    func startAttempt() {
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
    func adapt(_ urlRequest: URLRequest, from index: Int) {
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
    func authorize(_ urlRequest: URLRequest) {
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

    func checkAndSend(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        guard let preconditions = ifNotCompleted({ policies.preconditions }) else { return }
        do {
            // libcurl would speak FTP (and wait for a greeting until the timeout) or other protocols.
            guard let scheme = urlRequest.url?.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
                throw RequestBuildingError.unsupportedScheme(urlRequest.url?.absoluteString ?? "")
            }
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

    // MARK: - Sending again

    /// On a status the authenticator treats as a refused token, waits for the (shared) refresh and sends
    /// again once; returns whether the failure was handled that way.
    func reauthenticate(after failure: Error, attempt: RequestAttempt) -> Bool {
        guard mayAttemptAgain(), let status = (failure as? RequestQueueError)?.statusCode else { return false }
        let state = withLock { (policies.authenticator, run.credential, run.resentAfterRefresh) }
        guard let authenticator = state.0, let credential = state.1, !state.2,
            authenticator.unauthorizedStatusCodes.contains(status)
        else { return false }
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
    func retry(after failure: Error, attempt: RequestAttempt, response: HTTPURLResponse?) -> Bool {
        guard mayAttemptAgain() else { return false }
        let (policy, resent) = withLock { (policies.retryPolicy, run.resentAfterRefresh) }
        // The resend after a refresh is not one of the policy's attempts.
        let counted = attempt.number - (resent ? 1 : 0)
        if let policy, let retrier = policy.retrier {
            guard counted < policy.maxAttempts else { return false }
            let context = RetryContext(attempt: counted, request: attempt.urlRequest, error: failure, response: response)
            ask(retrier, context, timeout: policy.retrierTimeout, maxDelay: policy.maxDelay, failed: attempt)
            return true
        }
        let method = attempt.urlRequest.httpMethod ?? "GET"
        guard let delay = policy?.delay(afterAttempt: counted, method: method, error: failure, response: response) else {
            return false
        }
        scheduleNextAttempt(after: delay, failed: attempt, isResendAfterRefresh: false)
        return true
    }

    /// Asks a custom retrier, in a Task of its own; the first of its answer and the timeout decides.
    private func ask(
        _ retrier: @escaping @Sendable (RetryContext) async throws -> RetryDecision,
        _ context: RetryContext,
        timeout: TimeInterval,
        maxDelay: TimeInterval,
        failed attempt: RequestAttempt
    ) {
        guard let step = ifNotCompleted({ beginStep() }) else { return }
        let receiver: any AttemptReceiver = self
        let answer = FirstAnswer<Result<RetryDecision, Error>> { [weak receiver] result in
            receiver?.retrierAnswered(result, context: context, maxDelay: maxDelay, failed: attempt, step: step)
        }
        Task {
            do {
                answer.give(.success(try await retrier(context)))
            } catch {
                answer.give(.failure(error))
            }
        }
        let wait = timeout.isNaN ? 0 : min(max(timeout, 0), 1e6)
        DispatchQueue.global().asyncAfter(deadline: .now() + wait) { answer.give(.success(.doNotRetry)) }
    }

    func retrierAnswered(_ result: Result<RetryDecision, Error>, context: RetryContext, maxDelay: TimeInterval, failed attempt: RequestAttempt, step: Int) {
        guard endStep(step) else { return }
        switch result {
        case let .failure(error):
            complete(with: .failure(error))
        case .success(.doNotRetry):
            complete(with: .failure(context.error))
        case .success(.retry):
            scheduleNextAttempt(after: 0, failed: attempt, isResendAfterRefresh: false)
        case let .success(.retryAfter(seconds)):
            let delay = seconds.isNaN ? 0 : min(max(seconds, 0), max(maxDelay, 0))
            scheduleNextAttempt(after: delay, failed: attempt, isResendAfterRefresh: false)
        }
    }

    func scheduleNextAttempt(after delay: TimeInterval, failed attempt: RequestAttempt, isResendAfterRefresh: Bool) {
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
        guard scheduled != nil else { return }  // cancelled meanwhile: that cancellation is the outcome
        emit(.didRetry(attempt, delay: delay))
        DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: next)
    }

    func startNextAttempt() {
        guard ifNotCompleted({ run.backoff = nil }) != nil else { return }
        startAttempt()
    }

    // MARK: - Steps, attempts and events

    /// Must be called under the lock.
    func beginStep() -> Int {
        run.stepCount += 1
        run.awaitedStep = run.stepCount
        return run.stepCount
    }

    /// Whether this is the first answer to `step`, while the operation has not completed.
    func endStep(_ step: Int) -> Bool {
        ifNotCompleted {
            guard run.awaitedStep == step else { return false }
            run.awaitedStep = nil
            return true
        } ?? false
    }

    /// Must be called under the lock.
    func currentAttempt(sending urlRequest: URLRequest) -> RequestAttempt {
        RequestAttempt(identifier: identifier, number: run.attempt, urlRequest: urlRequest)
    }

    func redirected(_ response: HTTPURLResponse, to request: URLRequest) {
        guard let attempt = ifNotCompleted({ run.sentRequest.map(currentAttempt(sending:)) }) ?? nil else { return }
        emit(.willRedirect(attempt, response, to: request))
    }

    /// Hands `event` to the monitors, after the events before it. Attempt events that come after the outcome
    /// (from an attempt a cancellation overtook) are dropped, so ``RequestEventMonitor/requestDidFinish(_:)`` is
    /// last; the completion is scheduled only after it, by whichever thread delivers it.
    func emit(_ event: MonitorEvent) {
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
