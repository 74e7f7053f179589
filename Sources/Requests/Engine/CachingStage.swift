#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What the cache knows about an attempt sent to the network: the entry whose validators it carries, if any.
struct CachedAttempt {
    let cache: ResponseCache
    /// The request as the cache judges it; `nil` for a method whose responses are never stored.
    let request: CacheableRequest?
    let entry: CachedResponse?
    let requestTime: Date
}

/// What the cache makes of the prepared request, decided before the final check so that the check sees the
/// request as it will be sent (with the stored validators, which come from a file on disk).
enum CachePlan {
    /// Send `request` (maybe conditional); `cached` is the cache's part in the attempt.
    case send(URLRequest, cached: CachedAttempt?)
    /// Answer with a stored response, without the network.
    case serve(CachedResponse)
    /// Nothing may be sent, and nothing stored answers (``CacheUse/onlyIfCached``).
    case fail(Error)

    /// The request the final check is to see.
    func checked(_ prepared: URLRequest) -> URLRequest {
        if case let .send(request, _) = self { return request }
        return prepared
    }
}

/// The ``ResponseCache`` as a stage around a send whose body is kept in memory: before it, a fresh hit answers without
/// the network and a stale entry adds its validators; after it, a `304` is answered with the stored body and a
/// storable response is stored. Either way the body is interpreted like any other (status rule, validations, kind).
extension NetworkRequestOperation {
    /// The plan of `cache` (the policies', if any) for `urlRequest`, which carries the authenticator's `token` if there
    /// is one: through the response cache when it applies to the request's kind; else sent as it is.
    func cachePlan(for urlRequest: URLRequest, in cache: ResponseCache?, token: String?) -> CachePlan {
        guard let cache, usesResponseCache else { return .send(urlRequest, cached: nil) }
        // The request's own code, read outside the lock.
        let requested = currentRequest?.cacheUse ?? .useCache
        let reloads = withLock { run.reattempts[.cacheReload, default: 0] > 0 }
        let use: CacheUse = reloads ? .reload : requested
        guard use != .bypass else { return .send(urlRequest, cached: nil) }
        let now = Date()
        let cacheable = CacheableRequest(urlRequest, session: session, token: token)
        let entry = use == .reload ? nil : cacheable.flatMap(cache.entry(for:))
        if let entry, (use == .onlyIfCached && entry.mayServeWithoutNetwork) || (use == .useCache && entry.isFresh(for: urlRequest, now: now)) {
            return .serve(entry)
        }
        if use == .onlyIfCached {
            return .fail(ResponseCacheError.notCached(urlRequest.url))
        }
        var sent = entry?.conditional(urlRequest)
        let revalidates = sent != nil
        // One cache: the platform's URLCache (a default session's URLCache.shared) must not answer a request the
        // ResponseCache sends on, nor keep its answer (see `TransferSession`'s willCacheResponse).
        sent = sent ?? urlRequest
        sent?.cachePolicy = .reloadIgnoringLocalCacheData
        cacheable?.snapshotCookies()
        return .send(
            sent ?? urlRequest, cached: CachedAttempt(cache: cache, request: cacheable, entry: revalidates ? entry : nil, requestTime: now))
    }

    /// Follows the plan, once the final check passed: serves, fails, or sends.
    func follow(_ plan: CachePlan, for urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        switch plan {
        case let .fail(error):
            fail(error)
        case let .serve(entry):
            serve(entry, for: urlRequest)
        case let .send(request, nil):
            transmit(request, credential: credential)
        case let .send(request, cached?):
            let attempt: RequestAttempt? = ifNotCompleted {
                run.cachedAttempt = cached
                return currentAttempt(sending: request)
            }
            guard let attempt else { return }
            emit(.cache(attempt, .miss(revalidating: cached.entry != nil)))
            transmit(request, credential: credential)
        }
    }

    /// Answers the attempt with `entry`, without the network.
    private func serve(_ entry: CachedResponse, for urlRequest: URLRequest) {
        guard let url = urlRequest.url.flatMap(CacheableRequest.bare), let response = entry.httpResponse(for: url) else {
            fail(ResponseCacheError.notCached(urlRequest.url))
            return
        }
        let attempt: RequestAttempt? = ifNotCompleted {
            (run.sentRequest, run.sendTime) = (urlRequest, .now())
            return currentAttempt(sending: urlRequest)
        }
        guard let attempt else { return }
        emit(.cache(attempt, .hit))
        receive(body: .data(entry.body), response: response, error: nil)
    }

    /// What the network answered, through the cache: a `304` for the stored entry is answered with it; a storable
    /// response is stored. A response that came through a redirect, or owes something to a credential the transport
    /// supplied, neither refreshes nor is stored: it is not the answer of the request the entry is kept for.
    func receiveThroughCache(_ cached: CachedAttempt, body: ResponseBody, response: URLResponse?, error: Error?) {
        let (sent, redirects, answeredChallenge) = withLock { (run.sentRequest, run.metrics?.redirectCount ?? 0, run.answeredChallenge) }
        guard error == nil, let sent, let http = response as? HTTPURLResponse, case let .data(data) = body else {
            finishAttempt(body: body, response: response, error: error)
            return
        }
        let now = Date()
        let attempt = withLock { currentAttempt(sending: sent) }
        cached.cache.invalidate(after: sent, status: http.statusCode)
        guard let request = cached.request else {
            finishAttempt(body: body, response: response, error: error)
            return
        }
        let refusal: NotStoredReason? = redirects > 0 ? .redirected : answeredChallenge ? .challengeAnsweredByTransport : nil
        if http.statusCode == 304, let entry = cached.entry {
            let newTag = http.value(forHTTPHeaderField: "ETag")
            let otherRepresentation = newTag != nil && entry.header("ETag").map { $0 != newTag } == true
            // RFC 9111 §4.3.4: a 304 for another representation (or from elsewhere) cannot freshen this one.
            if refusal != nil || otherRepresentation, hasReattemptsLeft(.cacheReload) {
                cached.cache.remove(for: request)
                attemptAgain(.cacheReload, after: 0, failed: attempt)
                return
            }
            if let refusal {
                cached.cache.remove(for: request)
                reportNotStored(refusal, attempt: attempt)
                finishAttempt(body: body, response: response, error: error)
                return
            }
            let refreshed = entry.refreshed(by: http, requestTime: cached.requestTime, responseTime: now)
            let dropped = cached.cache.replace(refreshed, for: request)
            emit(.cache(attempt, .revalidated))
            if let dropped { reportNotStored(dropped, attempt: attempt) }
            finishAttempt(body: .data(refreshed.body), response: refreshed.httpResponse(for: request.url) ?? http, error: nil)
            return
        }
        if let reason = cached.cache.store(data, response: http, for: request, requestTime: cached.requestTime, responseTime: now, refusing: refusal) {
            reportNotStored(reason, attempt: attempt)
        } else {
            emit(.cache(attempt, .stored))
        }
        finishAttempt(body: body, response: response, error: error)
    }

    /// Tells monitors why the response was not stored: ``CacheEvent/notStored(reason:)`` always, and for a refusal
    /// (a response the rules allow but that is not safe to keep) ``RequestNotice/notStored(reason:)`` too, as before
    /// the event existed.
    private func reportNotStored(_ reason: NotStoredReason, attempt: RequestAttempt) {
        emit(.cache(attempt, .notStored(reason: reason)))
        if reason.isRefusal { emit(.notice(attempt, .notStored(reason: reason.description))) }
    }
}
