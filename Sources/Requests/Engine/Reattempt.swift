#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Why an operation sends its request again, inside the same operation. Each reason has its own count: a cache reload
/// or a download's range restart does not use up an attempt of the ``RetryPolicy``, and a monitor sees which reason it
/// was (``RequestEventMonitor/requestWillAttemptAgain(_:reason:delay:)``).
public enum ReattemptReason: String, Sendable, Hashable, CaseIterable {
    /// The ``RetryPolicy`` (or its custom decision) asked for another attempt after a failure.
    case retry
    /// The ``TokenAuthenticator`` refreshed a rejected token: the request is sent once more with the new one.
    case reauthentication
    /// A `304` named another representation than the stored one, which it cannot freshen (RFC 9111 §4.3.4): the
    /// response is fetched whole, without the cache's validators. Once per request.
    case cacheReload
    /// A download's bytes on disk could not be continued (the server's range did not fit): it starts again from
    /// byte 0. Once per request.
    case rangeRestart
    /// A stream's connection ended or dropped, and its ``ReconnectPolicy`` connects again.
    case reconnect

    /// How many times a request is sent again for this reason at most, besides what its policy says.
    var limit: Int {
        switch self {
        case .reauthentication, .cacheReload, .rangeRestart: return 1
        case .retry, .reconnect: return .max
        }
    }
}

/// What the transfer says about an attempt that ended without a value (see ``NetworkRequestOperation/transferVerdict(after:)``).
enum TransferVerdict<Success> {
    /// Attempt again for the transfer's own reason (a download's range restart, a stream's reconnection).
    case again(ReattemptReason, delay: TimeInterval)
    /// The transfer decides the outcome (a stream that has delivered elements, or whose reconnections gave up).
    case finish(Result<Success, Error>)
    /// The policies decide: a resend after a token refresh, a retry, or the failure.
    case policies
}

/// Step 4 of an attempt: the one decision after it, finish or attempt again, and the scheduling of the next attempt.
extension NetworkRequestOperation {
    /// After an attempt that ended without a value, with `failure` (or cleanly, for a stream whose connection the
    /// server closed): in order, a cancellation finishes; the transfer's verdict (a range restart, a stream's
    /// reconnection, or its outcome); then a resend after a token refresh (once), then the retry policy; else the
    /// request fails with `failure`. Every failure is reported to the monitors first.
    func decide(after failure: Error?, attempt: RequestAttempt, response: HTTPURLResponse?, duration: TimeInterval) {
        if let failure {
            guard (failure as? URLError)?.code != .cancelled else {
                fail(failure)
                return
            }
            emit(.didFail(attempt, failure, duration: duration))
        }
        switch transferVerdict(after: failure) {
        case let .again(reason, delay) where hasReattemptsLeft(reason):
            attemptAgain(reason, after: delay, failed: attempt)
            return
        case let .finish(outcome):
            complete(with: outcome)
            return
        case .again, .policies:
            break
        }
        guard let failure else {
            complete(with: .failure(RequestQueueError.misuse("\(type(of: self)) ended an attempt with nothing to decide")))
            return
        }
        if !reauthenticate(after: failure, attempt: attempt), !retry(after: failure, attempt: attempt, response: response) {
            fail(failure)
        }
    }

    /// Whether the request may still be sent again for `reason`.
    func hasReattemptsLeft(_ reason: ReattemptReason) -> Bool {
        withLock { run.reattempts[reason, default: 0] < reason.limit }
    }

    /// On a status the authenticator treats as a refused token, waits for the (shared) refresh and sends again, once;
    /// returns whether the failure was handled that way.
    private func reauthenticate(after failure: Error, attempt: RequestAttempt) -> Bool {
        guard let status = (failure as? RequestQueueError)?.statusCode, hasReattemptsLeft(.reauthentication) else { return false }
        let (authenticator, credential) = withLock { (policies.authenticator, run.credential) }
        guard let authenticator, let credential, authenticator.unauthorizedStatusCodes.contains(status) else { return false }
        let callbacks: any AttemptCallbacks = self
        authenticator.requestWasRejected(credential) { [weak callbacks] decision in
            callbacks?.reauthenticated(decision, after: failure, attempt: attempt)
        }
        return true
    }

    func reauthenticated(_ decision: TokenAuthenticator.Decision, after failure: Error, attempt: RequestAttempt) {
        switch decision {
        case .retry:
            attemptAgain(.reauthentication, after: 0, failed: attempt)
        case let .fail(error):
            fail(error)
        case .rateLimited:
            fail(failure)
        }
    }

    /// Schedules the next attempt if the retry policy allows it; returns whether the failure was handled that way.
    /// The policy counts its own attempts only: the first, and each retry.
    private func retry(after failure: Error, attempt: RequestAttempt, response: HTTPURLResponse?) -> Bool {
        let (policy, retries) = withLock { (policies.retryPolicy, run.reattempts[.retry, default: 0]) }
        let counted = retries + 1
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
        attemptAgain(.retry, after: delay, failed: attempt)
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
        let callbacks: any AttemptCallbacks = self
        let answer = FirstAnswer<Result<RetryDecision, Error>> { [weak callbacks] result in
            callbacks?.retrierAnswered(result, context: context, maxDelay: maxDelay, failed: attempt, step: step)
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
            fail(error)
        case .success(.doNotRetry):
            fail(context.error)
        case .success(.retry):
            attemptAgain(.retry, after: 0, failed: attempt)
        case let .success(.retryAfter(seconds)):
            let delay = seconds.isNaN ? 0 : min(max(seconds, 0), max(maxDelay, 0))
            attemptAgain(.retry, after: delay, failed: attempt)
        }
    }

    /// Starts the next attempt after `delay`, for `reason`: every way of sending again goes through here, counted per
    /// reason, and the monitors see it (``RequestEventMonitor/requestWillAttemptAgain(_:reason:delay:)``).
    func attemptAgain(_ reason: ReattemptReason, after delay: TimeInterval, failed attempt: RequestAttempt) {
        // Weak: a cancelled work item stays queued until its deadline, and must not keep the operation alive.
        let callbacks: any AttemptCallbacks = self
        let next = DispatchWorkItem { [weak callbacks] in callbacks?.startNextAttempt() }
        let scheduled: Void? = ifNotCompleted {
            run.attempt += 1
            run.reattempts[reason, default: 0] += 1
            (run.task, run.response, run.bodyBytes, run.backoff) = (nil, nil, 0, next)
        }
        guard scheduled != nil else { return }  // cancelled meanwhile: that cancellation is the outcome
        emit(.willAttemptAgain(attempt, reason, delay: delay))
        DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: next)
    }

    func startNextAttempt() {
        guard ifNotCompleted({ run.backoff = nil }) != nil else { return }
        startAttempt()
    }
}
