#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// When a failed request is sent again, and after how long. Retries happen inside the same operation:
/// dependents wait for the final outcome and the completion handler still runs once.
///
/// Set it per queue with ``RequestPolicies/retryPolicy`` or per request with ``NetworkRequest/retryPolicy``.
/// Every default is stated where it is declared.
public struct RetryPolicy: Sendable {
    /// Attempts in all, the first one included. Default: 3.
    public var maxAttempts: Int
    /// The delay before the first retry. Default: 0.5 s.
    public var baseDelay: TimeInterval
    /// Each further retry waits this many times longer. Default: 2.
    public var backoffMultiplier: Double
    /// The longest wait between attempts. A `Retry-After` longer than this stops the retries instead
    /// (retrying sooner than the server asked is pointless). Default: 30 s.
    public var maxDelay: TimeInterval
    /// A computed delay `d` becomes a random value in `d × (1 − jitter) … d × (1 + jitter)`, so that clients do
    /// not retry in step. `Retry-After` delays are not jittered. Default: 0.2.
    public var jitter: Double
    /// Only requests with these methods (compared without regard to case) are retried. Default: the
    /// idempotent ones, GET, HEAD, PUT, DELETE, OPTIONS and TRACE. Add `.post` or `.patch` (`alsoRetrying:` in the
    /// initializer) only for an API that makes them safe to repeat (an idempotency key, for example): a retried POST
    /// whose first answer was lost applies twice.
    public var retryableMethods: Set<HTTPMethod>
    /// Responses with these statuses are retried. Default: 408, 429, 500, 502, 503, 504.
    public var retryableStatusCodes: Set<Int>
    /// Transport errors with these codes are retried. Default: timed out, network connection lost, cannot
    /// connect to host, cannot find host (DNS lookup failed), DNS lookup failed, not connected to the internet,
    /// and bad server response, which is how URLSession on Linux reports a connection dropped before any
    /// response (−1011, "Empty reply from server"). A body cut off mid-way is reported as network connection lost on
    /// every platform (libcurl says −1), so it is retried the same way everywhere.
    public var retryableURLErrorCodes: Set<URLError.Code>
    /// Whether a `Retry-After` header (delta-seconds or an HTTP-date) sets the delay. A value that is neither
    /// is ignored, and the computed backoff applies. Default: `true`.
    public var honorsRetryAfter: Bool
    /// App code that decides instead of the rules above (see ``custom(maxAttempts:maxDelay:timeout:_:)``); only
    /// ``maxAttempts`` and ``maxDelay`` still apply. Default: `nil`.
    public var retrier: (@Sendable (RetryContext) async throws -> RetryDecision)?
    /// How long the ``retrier`` may take to answer; after that the request fails with the error of its last
    /// attempt, as for ``RetryDecision/doNotRetry``. Default: 30 s.
    public var retrierTimeout: TimeInterval = 30

    /// A policy with the defaults above, each of which can be changed here. The idempotent methods are always
    /// retried; `alsoRetrying` adds others: `RetryPolicy(alsoRetrying: [.post])` retries a `POST` too, for an API that
    /// makes it safe to repeat (an idempotency key, for example). For another set of methods altogether, use
    /// ``init(maxAttempts:baseDelay:backoffMultiplier:maxDelay:jitter:retryingOnly:retryableStatusCodes:retryableURLErrorCodes:honorsRetryAfter:)``.
    public init(
        maxAttempts: Int = 3,
        baseDelay: TimeInterval = 0.5,
        backoffMultiplier: Double = 2,
        maxDelay: TimeInterval = 30,
        jitter: Double = 0.2,
        alsoRetrying extraMethods: Set<HTTPMethod> = [],
        retryableStatusCodes: Set<Int> = RetryPolicy.defaultRetryableStatusCodes,
        retryableURLErrorCodes: Set<URLError.Code> = RetryPolicy.defaultRetryableURLErrorCodes,
        honorsRetryAfter: Bool = true
    ) {
        self.init(
            maxAttempts: maxAttempts, baseDelay: baseDelay, backoffMultiplier: backoffMultiplier, maxDelay: maxDelay, jitter: jitter,
            retryingOnly: RetryPolicy.defaultRetryableMethods.union(extraMethods), retryableStatusCodes: retryableStatusCodes,
            retryableURLErrorCodes: retryableURLErrorCodes, honorsRetryAfter: honorsRetryAfter)
    }

    /// A policy that retries the methods in `methods` and no others (compared without regard to case), for example
    /// `RetryPolicy(retryingOnly: [.get])`; the other parameters as in
    /// ``init(maxAttempts:baseDelay:backoffMultiplier:maxDelay:jitter:alsoRetrying:retryableStatusCodes:retryableURLErrorCodes:honorsRetryAfter:)``.
    public init(
        maxAttempts: Int = 3,
        baseDelay: TimeInterval = 0.5,
        backoffMultiplier: Double = 2,
        maxDelay: TimeInterval = 30,
        jitter: Double = 0.2,
        retryingOnly methods: Set<HTTPMethod>,
        retryableStatusCodes: Set<Int> = RetryPolicy.defaultRetryableStatusCodes,
        retryableURLErrorCodes: Set<URLError.Code> = RetryPolicy.defaultRetryableURLErrorCodes,
        honorsRetryAfter: Bool = true
    ) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.backoffMultiplier = backoffMultiplier
        self.maxDelay = maxDelay
        self.jitter = jitter
        self.retryableMethods = Set(methods.map { HTTPMethod(rawValue: $0.rawValue.uppercased()) })
        self.retryableStatusCodes = retryableStatusCodes
        self.retryableURLErrorCodes = retryableURLErrorCodes
        self.honorsRetryAfter = honorsRetryAfter
    }

    /// The policy that retries exactly `retryableMethods`. Deprecated because the name hid that: `[.post]` alone
    /// stopped `GET` and the other idempotent methods from being retried.
    @_disfavoredOverload
    @available(
        *, deprecated,
        message: "retryableMethods: replaces the idempotent methods ([.post] stops GET from being retried): use alsoRetrying: to add, retryingOnly: for an exact set"
    )
    public init(
        maxAttempts: Int = 3,
        baseDelay: TimeInterval = 0.5,
        backoffMultiplier: Double = 2,
        maxDelay: TimeInterval = 30,
        jitter: Double = 0.2,
        retryableMethods: Set<HTTPMethod> = RetryPolicy.defaultRetryableMethods,
        retryableStatusCodes: Set<Int> = RetryPolicy.defaultRetryableStatusCodes,
        retryableURLErrorCodes: Set<URLError.Code> = RetryPolicy.defaultRetryableURLErrorCodes,
        honorsRetryAfter: Bool = true
    ) {
        self.init(
            maxAttempts: maxAttempts, baseDelay: baseDelay, backoffMultiplier: backoffMultiplier, maxDelay: maxDelay, jitter: jitter,
            retryingOnly: retryableMethods, retryableStatusCodes: retryableStatusCodes, retryableURLErrorCodes: retryableURLErrorCodes,
            honorsRetryAfter: honorsRetryAfter)
    }

    /// The policy that retries exactly `retryableMethods`, given as strings, as before they were ``HTTPMethod``s; the
    /// other parameters as in
    /// ``init(maxAttempts:baseDelay:backoffMultiplier:maxDelay:jitter:retryingOnly:retryableStatusCodes:retryableURLErrorCodes:honorsRetryAfter:)``.
    @_disfavoredOverload
    @available(
        *, deprecated,
        message: "pass HTTPMethods to alsoRetrying: (added to the idempotent methods), such as [.post], or to retryingOnly: (an exact set)"
    )
    public init(
        maxAttempts: Int = 3,
        baseDelay: TimeInterval = 0.5,
        backoffMultiplier: Double = 2,
        maxDelay: TimeInterval = 30,
        jitter: Double = 0.2,
        retryableMethods: Set<String>,
        retryableStatusCodes: Set<Int> = RetryPolicy.defaultRetryableStatusCodes,
        retryableURLErrorCodes: Set<URLError.Code> = RetryPolicy.defaultRetryableURLErrorCodes,
        honorsRetryAfter: Bool = true
    ) {
        self.init(
            maxAttempts: maxAttempts, baseDelay: baseDelay, backoffMultiplier: backoffMultiplier, maxDelay: maxDelay,
            jitter: jitter, retryingOnly: Set(retryableMethods.map(HTTPMethod.init(rawValue:))),
            retryableStatusCodes: retryableStatusCodes, retryableURLErrorCodes: retryableURLErrorCodes,
            honorsRetryAfter: honorsRetryAfter)
    }

    /// The default ``retryableMethods``: the idempotent ones.
    public static let defaultRetryableMethods: Set<HTTPMethod> = [.get, .head, .put, .delete, .options, .trace]
    /// The default ``retryableStatusCodes``.
    public static let defaultRetryableStatusCodes: Set<Int> = [408, 429, 500, 502, 503, 504]
    /// The default ``retryableURLErrorCodes``.
    public static let defaultRetryableURLErrorCodes: Set<URLError.Code> = [
        .timedOut, .networkConnectionLost, .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed,
        .notConnectedToInternet, .badServerResponse,
    ]

    /// The policy with every default.
    public static let `default` = RetryPolicy()

    /// Retries only a connection that was lost (`networkConnectionLost`, and `badServerResponse`, which is how
    /// Linux reports a connection dropped before any response), for the idempotent methods, up to 3 attempts with
    /// the default backoff: Alamofire's `ConnectionLostRetryPolicy`.
    public static let connectionLost = RetryPolicy(
        retryableStatusCodes: [],
        retryableURLErrorCodes: [.networkConnectionLost, .badServerResponse]
    )

    /// A policy whose decisions your code makes, asynchronously, from the failed attempt's number, request, error
    /// and response: retry now, after a delay, or not. Any method may be retried.
    ///
    /// - The request fails with the error `decide` throws (throw the context's error to keep it).
    /// - A decision that takes longer than `timeout` counts as ``RetryDecision/doNotRetry``.
    /// - A delay below 0 (or not a number) is 0, one above `maxDelay` is `maxDelay`.
    /// - At most `maxAttempts` attempts, the first one included, whatever `decide` says.
    /// - A cancellation while `decide` runs completes the request at once; its answer is then ignored.
    public static func custom(
        maxAttempts: Int = 5,
        maxDelay: TimeInterval = 300,
        timeout: TimeInterval = 30,
        _ decide: @escaping @Sendable (RetryContext) async throws -> RetryDecision
    ) -> RetryPolicy {
        var policy = RetryPolicy(maxAttempts: maxAttempts, maxDelay: maxDelay)
        policy.retrier = decide
        policy.retrierTimeout = timeout
        return policy
    }

    /// The wait before attempt `attempt + 1`, after attempt `attempt` (counted from 1) failed with `error`
    /// (and `response`, for a status error), or `nil` when the request should not be sent again.
    /// `random` is in `0...1` and picks the jitter.
    public func delay(
        afterAttempt attempt: Int,
        method: String,
        error: Error,
        response: HTTPURLResponse?,
        now: Date = Date(),
        random: Double = Double.random(in: 0...1)
    ) -> TimeInterval? {
        guard attempt < maxAttempts, retryableMethods.contains(where: { $0.rawValue.caseInsensitiveCompare(method) == .orderedSame })
        else { return nil }
        let status = (error as? RequestQueueError)?.statusCode
        let code = (error as? URLError)?.code
        guard status.map(retryableStatusCodes.contains) ?? code.map(retryableURLErrorCodes.contains) ?? false else { return nil }
        if honorsRetryAfter,
            let header = response?.value(forHTTPHeaderField: "Retry-After"),
            let wait = Self.retryAfterSeconds(header, now: now)
        {
            return wait <= maxDelay ? wait : nil
        }
        // Jitter below the cap too, so that clients that reached it do not retry in step.
        let backoff = min(baseDelay * pow(backoffMultiplier, Double(attempt - 1)), maxDelay)
        let jittered = backoff * (1 - jitter + 2 * jitter * min(max(random, 0), 1))
        return min(max(jittered, 0), maxDelay)
    }

    /// Seconds to wait for a `Retry-After` value: delta-seconds (`120`) or an HTTP-date
    /// (`Wed, 21 Oct 2026 07:28:00 GMT`). `nil` when it is neither.
    public static func retryAfterSeconds(_ value: String, now: Date = Date()) -> TimeInterval? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(trimmed) {
            return seconds >= 0 ? TimeInterval(seconds) : nil
        }
        return HTTPDate.parse(trimmed).map { max(0, $0.timeIntervalSince(now)) }
    }
}

/// What a ``RetryPolicy/custom(maxAttempts:maxDelay:timeout:_:)`` decider is told about a failed attempt.
public struct RetryContext: Sendable {
    /// The attempt that failed, from 1 (a resend after a token refresh is not counted).
    public let attempt: Int
    /// What it sent.
    public let request: URLRequest
    /// Why it failed.
    public let error: Error
    /// The response, for a status error.
    public let response: HTTPURLResponse?
}

/// What a custom retrier decides.
public enum RetryDecision: Sendable, Equatable {
    /// Send the request again now.
    case retry
    /// Send it again after this many seconds (clamped to `0...maxDelay`).
    case retryAfter(TimeInterval)
    /// Fail with the attempt's error.
    case doNotRetry
}

/// HTTP dates (RFC 9110 §5.6.7): the IMF-fixdate, and the obsolete RFC 850 and asctime forms a recipient must accept.
enum HTTPDate {
    static func parse(_ value: String) -> Date? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        // A formatter per call: DateFormatter is not known to be thread-safe in corelibs.
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: trimmed) { return date }
        }
        return nil
    }
}
