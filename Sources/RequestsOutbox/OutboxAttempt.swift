#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// One attempt of an outbox entry: the stored request with its `Idempotency-Key`, the engine's own retries turned
/// off (the outbox decides when to send again), no response cache, and the raw answer as its success, so that the
/// outbox can keep it and judge the status itself. Its limits are the request's (or the queue's) with the outbox's
/// attempt timeout as their deadline (see `Outbox.attemptLimits(own:)`).
struct OutboxAttempt<Inner: OutboxRequest>: DataRequest {
    typealias Success = OutboxResponse
    typealias Failure = Error

    let inner: Inner
    let idempotencyKey: String
    let limits: TransferLimits?

    var identifier: String { inner.identifier }
    var validHTTPStatusCodes: [Int] { inner.validHTTPStatusCodes }
    var retryPolicy: RetryPolicy? { RetryPolicy(maxAttempts: 1) }
    var adapters: [RequestAdapter] { inner.adapters }
    var preconditions: [RequestPrecondition] { inner.preconditions }
    var validations: [ResponseValidation] { inner.validations }
    var usesAuthenticator: Bool { inner.usesAuthenticator }
    var redirectPolicy: RedirectPolicy? { inner.redirectPolicy }
    var sensitiveHeaders: [String] { inner.sensitiveHeaders }
    var responseCache: ResponseCache? { nil }
    var cacheUse: CacheUse { .bypass }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        let key = idempotencyKey
        inner.makeURLRequest { result in
            completion(
                result.map { request in
                    var request = request
                    // The IETF httpapi draft's header: a structured-field string, so quoted.
                    request.setValue("\"\(key)\"", forHTTPHeaderField: "Idempotency-Key")
                    return request
                })
        }
    }

    func processData(_ data: Data) throws -> OutboxResponse {
        OutboxResponse(statusCode: 0, headers: [:], body: data)
    }

    func processResponse(_ data: Data, response: HTTPURLResponse) throws -> OutboxResponse {
        OutboxResponse(statusCode: response.statusCode, headers: OutboxVerdict.headers(of: response), body: data)
    }
}

/// What one attempt's outcome means for its entry. The one place the outbox classifies answers.
enum OutboxVerdict: Equatable {
    case sent(OutboxResponse)
    /// Send again after `delay` (a `Retry-After`, or `nil` for the backoff); `offline` when the error says there
    /// is no connectivity.
    case transient(retryAfter: TimeInterval?, offline: Bool, description: String)
    case permanent(OutboxDeadLetter.Reason, OutboxResponse?)

    /// Status codes that retrying can fix.
    static func isTransient(status: Int) -> Bool { status == 408 || status == 429 || (500...599).contains(status) }

    /// Transport errors that mean there is no path to the server, rather than a failure of this one request.
    static let offlineCodes: Set<URLError.Code> = [
        .notConnectedToInternet, .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .timedOut,
        .internationalRoamingOff, .dataNotAllowed, .callIsActive,
    ]

    /// `attemptTimeout`: the outbox's timeout when it is the attempt's deadline, so that missing it is described as
    /// the outbox's timeout rather than as the request's deadline.
    static func judge(_ result: Result<OutboxResponse, Error>, attemptTimeout: TimeInterval? = nil, now: Date = Date()) -> OutboxVerdict {
        switch result {
        case let .success(response):
            return .sent(response)
        case let .failure(error):
            if let attemptTimeout, case TransferLimitError.deadlineExceeded = error {
                return .transient(retryAfter: nil, offline: false, description: timedOut(after: attemptTimeout))
            }
            if case let .invalidStatusCode(status, response, body) = error as? RequestQueueError {
                let kept = OutboxResponse(
                    statusCode: status, headers: headers(of: response), body: body.prefix(OutboxRecord.maximumParkedBody))
                guard isTransient(status: status) else { return .permanent(.rejected(statusCode: status), kept) }
                let wait = response.value(forHTTPHeaderField: "Retry-After").flatMap { RetryPolicy.retryAfterSeconds($0, now: now) }
                return .transient(retryAfter: wait, offline: false, description: "HTTP \(status)")
            }
            if let urlError = error as? URLError {
                guard urlError.code != .cancelled, urlError.code != .unsupportedURL, urlError.code != .badURL else {
                    return .permanent(.failed(describe(error)), nil)
                }
                return .transient(retryAfter: nil, offline: offlineCodes.contains(urlError.code), description: describe(error))
            }
            if isTransient(error) { return .transient(retryAfter: nil, offline: false, description: describe(error)) }
            return .permanent(.failed(describe(error)), nil)
        }
    }

    /// Failures of one exchange that the next one may not meet: a deadline or minimum speed missed, a connection
    /// that answered nothing or not HTTP.
    static func isTransient(_ error: Error) -> Bool {
        switch error {
        case TransferLimitError.deadlineExceeded, TransferLimitError.tooSlow: return true
        case RequestQueueError.didNotReceiveData, RequestQueueError.nonHTTPResponse: return true
        default: return false
        }
    }

    /// The description of an attempt cancelled by ``OutboxOptions/attemptTimeout``.
    static func timedOut(after seconds: TimeInterval) -> String {
        "The attempt did not finish within the outbox's attempt timeout of \(String(format: "%g", seconds)) s "
            + "(OutboxOptions.attemptTimeout) and was cancelled; the entry will be sent again with the same key."
    }

    static func describe(_ error: Error) -> String {
        ErrorText.clipped((error as? LocalizedError)?.errorDescription ?? String(describing: error))
    }

    static func headers(of response: HTTPURLResponse) -> [String: String] {
        var headers: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return headers
    }
}
