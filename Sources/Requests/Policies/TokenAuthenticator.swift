#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Adds a token to every request and, when the server rejects it, refreshes it **once** for all the requests
/// that were rejected or that arrive while the refresh runs (single flight).
///
/// - A request rejected with one of ``unauthorizedStatusCodes`` waits for the refresh and is sent again,
///   **at most once**, with the new token. If the token changed since it was sent, it is sent again at once.
/// - Requests that arrive during a refresh wait for it and are sent with the new token.
/// - If the refresh fails, every waiting request fails with its error.
/// - At most one refresh starts per ``minimumRefreshInterval``: a request rejected sooner after the last one
///   fails with its status error (``RequestQueueError/invalidStatusCode(statusCode:response:body:)``), so a
///   server that always answers 401 cannot cause a loop.
///
/// Waiting requests keep their queue slots, so run the refresh outside the queue it authenticates (with
/// the session directly, or on another queue): on the same queue it could wait for a slot forever.
/// Attach it with ``RequestPolicies/authenticator``; a request opts out with ``NetworkRequest/usesAuthenticator``.
public final class TokenAuthenticator: @unchecked Sendable {
    /// A token together with the refresh that produced it, so that a rejection can tell whether it is stale.
    struct Credential: Sendable {
        let token: String?
        let generation: Int
    }

    /// What a rejected request does next.
    enum Decision: Sendable {
        case retry
        case fail(Error)
        case rateLimited
    }

    /// The waiting requests fail with this when a refresh has not called back within ``refreshTimeout``.
    public struct RefreshTimedOut: Error, CustomStringConvertible {
        /// Names the problem.
        public var description: String { "The token refresh did not call back in time." }
    }

    /// The shortest time between the end of one refresh and the start of the next. Default: 10 s.
    public let minimumRefreshInterval: TimeInterval
    /// How long a refresh may take before the requests waiting for it fail with ``RefreshTimedOut``; its late
    /// answer is then ignored. Default: 60 s.
    public let refreshTimeout: TimeInterval
    /// Statuses that mean "the token was refused". Default: 401.
    public let unauthorizedStatusCodes: Set<Int>
    private let authorize: @Sendable (inout URLRequest, String) -> Void
    private let refreshToken: @Sendable (String?, @escaping @Sendable (Result<String, Error>) -> Void) -> Void

    private let lock = NSLock()
    private var currentToken: String?
    private var generation = 0
    private typealias Waiter = @Sendable (Result<Credential, Error>) -> Void
    /// Non-nil while a refresh runs: the requests waiting for it.
    private var waiters: [Waiter]?
    private var refreshNumber = 0
    private var lastRefreshEnd: DispatchTime?

    /// An authenticator starting with `token` (`nil`: none yet, so the first request is rejected and triggers
    /// a refresh).
    ///
    /// - Parameters:
    ///   - token: The token to start with; `nil` when none is known yet.
    ///   - minimumRefreshInterval: The shortest time between the end of one refresh and the start of the next, so a
    ///     server that refuses every token cannot make the authenticator refresh in a loop. Default: 10 seconds.
    ///   - refreshTimeout: How long a refresh may take before the waiting requests fail. Default: 60 seconds.
    ///   - unauthorizedStatusCodes: The statuses that mean "the token was refused". Default: 401.
    ///   - authorize: Puts the token on a request. Default: `Authorization: Bearer <token>`.
    ///   - refresh: Gets a new token; receives the rejected one. Call `completion` once; later calls are ignored.
    public init(
        token: String?,
        minimumRefreshInterval: TimeInterval = 10,
        refreshTimeout: TimeInterval = 60,
        unauthorizedStatusCodes: Set<Int> = [401],
        authorize: @escaping @Sendable (inout URLRequest, String) -> Void = { request, token in
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        },
        refresh: @escaping @Sendable (_ rejectedToken: String?, _ completion: @escaping @Sendable (Result<String, Error>) -> Void) -> Void
    ) {
        self.currentToken = token
        self.minimumRefreshInterval = minimumRefreshInterval
        self.refreshTimeout = refreshTimeout
        self.unauthorizedStatusCodes = unauthorizedStatusCodes
        self.authorize = authorize
        self.refreshToken = refresh
    }

    /// The current token.
    public var token: String? {
        lock.withLock { currentToken }
    }

    /// Replaces the token, for example after a login. A request rejected after being sent with the old one is
    /// sent again with this one, without a refresh. A refresh in progress ends: the requests waiting for it go
    /// on with this token, and its answer is ignored.
    public func setToken(_ token: String?) {
        let (waiting, credential) = lock.withLock {
            currentToken = token
            generation += 1
            let waiting = waiters
            if waiting != nil {
                waiters = nil
                refreshNumber += 1
                lastRefreshEnd = .now()
            }
            return (waiting, Credential(token: currentToken, generation: generation))
        }
        waiting?.forEach { $0(.success(credential)) }
    }

    /// Calls back with the credential to send, after the refresh in progress if there is one.
    func credential(_ completion: @escaping @Sendable (Result<Credential, Error>) -> Void) {
        let credential: Credential? = lock.withLock {
            guard waiters == nil else {
                waiters?.append(completion)
                return nil
            }
            return Credential(token: currentToken, generation: generation)
        }
        if let credential { completion(.success(credential)) }
    }

    /// `request` with `credential` applied.
    func authorizing(_ request: URLRequest, with credential: Credential) -> URLRequest {
        guard let token = credential.token else { return request }
        var request = request
        authorize(&request, token)
        return request
    }

    /// A request sent with `rejected` was refused: calls back once it may be sent again, or must fail.
    func requestWasRejected(_ rejected: Credential, decide: @escaping @Sendable (Decision) -> Void) {
        let wait: @Sendable (Result<Credential, Error>) -> Void = { outcome in
            switch outcome {
            case .success: decide(.retry)
            case let .failure(error): decide(.fail(error))
            }
        }
        // A decision to report now, or the refresh this request starts; neither when it waits for the one in progress.
        let (decision, refresh): (Decision?, (number: Int, token: String?)?) = lock.withLock {
            if generation != rejected.generation { return (.retry, nil) }
            if waiters != nil {
                waiters?.append(wait)
                return (nil, nil)
            }
            if let lastRefreshEnd, DispatchTime.now() < lastRefreshEnd + minimumRefreshInterval { return (.rateLimited, nil) }
            waiters = [wait]
            refreshNumber += 1
            return (nil, (refreshNumber, currentToken))
        }
        if let decision { decide(decision) }
        guard let refresh else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + refreshTimeout) { [weak self] in
            self?.refreshEnded(refresh.number, with: .failure(RefreshTimedOut()))
        }
        refreshToken(refresh.token) { [self] result in
            refreshEnded(refresh.number, with: result)
        }
    }

    private func refreshEnded(_ number: Int, with result: Result<String, Error>) {
        let ended: (waiting: [Waiter], credential: Credential)? = lock.withLock {
            // Otherwise a second or late answer, after a timeout or setToken.
            guard number == refreshNumber, let waiting = waiters else { return nil }
            waiters = nil
            lastRefreshEnd = .now()
            if case let .success(token) = result {
                currentToken = token
                generation += 1
            }
            return (waiting, Credential(token: currentToken, generation: generation))
        }
        guard let ended else { return }
        let outcome = result.map { _ in ended.credential }
        ended.waiting.forEach { $0(outcome) }
    }
}
