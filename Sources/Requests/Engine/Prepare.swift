#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Step 1 of an attempt, preparing it: `makeURLRequest`, the adapters in order, the authenticator's credential, what
/// the transfer adds, the cache's plan, and the one final check. Each asynchronous step's answer is taken once (see
/// `beginStep`).
extension NetworkRequestOperation {
    /// Asks the request for the `URLRequest` of the current attempt.
    func startAttempt() {
        guard let step = ifNotCompleted({ beginStep() }), let held else { return }
        // Weak, like every callback held by user code: a cancelled operation is not kept until it is called.
        held.value.makeURLRequest { [weak self] urlRequest in
            self?.adapted(urlRequest, step: step, nextAdapter: 0)
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
        let callbacks: any AttemptCallbacks = self
        adapters[index].adapt(urlRequest) { [weak callbacks] result in
            callbacks?.adapted(result, step: step, nextAdapter: index + 1)
        }
    }

    /// The answer of `makeURLRequest` (`nextAdapter` 0) or of the adapter before `nextAdapter`.
    func adapted(_ result: Result<URLRequest, Error>, step: Int, nextAdapter: Int) {
        guard endStep(step) else { return }
        switch result {
        case let .failure(error): fail(error)
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
        let callbacks: any AttemptCallbacks = self
        authenticator.credential { [weak callbacks] credential in
            callbacks?.authorized(urlRequest, with: credential, step: step)
        }
    }

    func authorized(_ urlRequest: URLRequest, with credential: Result<TokenAuthenticator.Credential, Error>, step: Int) {
        guard endStep(step), let authenticator = ifNotCompleted({ policies.authenticator }) ?? nil else { return }
        switch credential {
        case let .failure(error):
            fail(error)
        case let .success(credential):
            checkAndSend(authenticator.authorizing(urlRequest, with: credential), credential: credential)
        }
    }

    /// The transfer's headers, the response cache's plan (its validators), then the one final check
    /// (``Boundary/checkFinal(_:preconditions:redirectPolicy:)``) of the request as it will be sent; then it is sent, or served.
    func checkAndSend(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        var urlRequest = urlRequest
        guard let rule = prepareTransfer(&urlRequest),
            let (preconditions, cache, redirectPolicy) = ifNotCompleted({ () -> ([RequestPrecondition], ResponseCache?, RedirectPolicy) in
                run.statusRule = rule
                return (policies.preconditions, policies.responseCache, policies.redirectPolicy)
            })
        else { return }
        let plan = cache == nil ? CachePlan.send(urlRequest, cached: nil) : cachePlan(for: urlRequest, in: cache, token: credential?.token)
        do {
            try Boundary.checkFinal(plan.checked(urlRequest), preconditions: preconditions, redirectPolicy: redirectPolicy)
        } catch {
            fail(error)
            return
        }
        follow(plan, for: urlRequest, credential: credential)
    }

    // MARK: - Steps

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
}
