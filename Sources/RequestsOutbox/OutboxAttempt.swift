#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// One attempt of an outbox entry: the entry's frozen request (or, for an entry stored by an older version, the
/// stored request's `makeURLRequest`) with its `Idempotency-Key`, the engine's own retries turned off (the outbox
/// decides when to send again), no response cache, and the raw answer as its success, so that the outbox can keep it.
/// The answer is judged as the queue judges the same request: the request's status codes and validations, then its
/// own kind's body interpretation (``DataRequest/interpretBody(_:response:sent:)``), whose failure fails the attempt.
/// Its limits are the request's (or the queue's) with the outbox's attempt timeout as their deadline (see
/// `Outbox.attemptLimits(own:)`).
struct OutboxAttempt<Inner: OutboxRequest>: DataRequest {
    typealias Success = OutboxResponse
    typealias Failure = Error

    let inner: Inner
    let idempotencyKey: String
    let frozen: FrozenRequest?
    /// `frozen`'s URL request, made once per entry.
    let made: URLRequest?
    let limits: TransferLimits?
    /// The request made for the attempt, and the answer its body interpretation refused.
    let answer = OutboxAnswer()

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
        let answer = answer
        let keyed: (URLRequest) -> URLRequest = { request in
            var request = request
            answer.made(request)
            // The IETF httpapi draft's header: a structured-field string, so quoted.
            request.setValue("\"\(key)\"", forHTTPHeaderField: "Idempotency-Key")
            return request
        }
        if frozen != nil {
            guard let request = made else { return completion(.failure(URLError(.badURL))) }
            return completion(.success(keyed(request)))
        }
        inner.makeURLRequest { completion($0.map(keyed)) }
    }

    func processData(_ data: Data) throws -> OutboxResponse {
        OutboxResponse(statusCode: 0, headers: [:], body: data)
    }

    func processResponse(_ data: Data, response: HTTPURLResponse) throws -> OutboxResponse {
        let kept = OutboxResponse(statusCode: response.statusCode, headers: OutboxVerdict.headers(of: response), body: data)
        let sent = answer.request ?? URLRequest(url: response.url ?? URL(fileURLWithPath: "/"))
        do {
            _ = try inner.interpretBody(data, response: response, sent: sent)
        } catch {
            answer.refused(kept)
            throw error
        }
        return kept
    }
}

/// One attempt of an entry that carries files: the same attempt, run as an upload whose body is the entry's files,
/// streamed from the outbox's folder (``OutboxStoredFiles/uploadBody(frozen:store:)``).
struct OutboxUploadAttempt<Inner: OutboxRequest>: UploadRequest {
    typealias Success = OutboxResponse
    typealias Failure = Error

    let attempt: OutboxAttempt<Inner>
    let uploadBody: UploadBody

    var identifier: String { attempt.identifier }
    var validHTTPStatusCodes: [Int] { attempt.validHTTPStatusCodes }
    var retryPolicy: RetryPolicy? { attempt.retryPolicy }
    var adapters: [RequestAdapter] { attempt.adapters }
    var preconditions: [RequestPrecondition] { attempt.preconditions }
    var validations: [ResponseValidation] { attempt.validations }
    var usesAuthenticator: Bool { attempt.usesAuthenticator }
    var limits: TransferLimits? { attempt.limits }
    var redirectPolicy: RedirectPolicy? { attempt.redirectPolicy }
    var sensitiveHeaders: [String] { attempt.sensitiveHeaders }
    var responseCache: ResponseCache? { nil }
    var cacheUse: CacheUse { .bypass }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { attempt.makeURLRequest(completion: completion) }
    func processData(_ data: Data) throws -> OutboxResponse { try attempt.processData(data) }
    func processResponse(_ data: Data, response: HTTPURLResponse) throws -> OutboxResponse {
        try attempt.processResponse(data, response: response)
    }
}

/// What an attempt saw, for the verdict: the request it made, and an answer whose body the request refused.
final class OutboxAnswer: @unchecked Sendable {
    private let lock = NSLock()
    private var madeRequest: URLRequest?
    private var refusedResponse: OutboxResponse?

    var request: URLRequest? { lock.withLock { madeRequest } }
    var refusal: OutboxResponse? { lock.withLock { refusedResponse } }

    func made(_ request: URLRequest) { lock.withLock { madeRequest = request } }
    func refused(_ response: OutboxResponse) { lock.withLock { refusedResponse = response } }
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
    /// `refusal`: the answer whose body the request's interpretation refused, kept with the parked entry.
    static func judge(
        _ result: Result<OutboxResponse, Error>, refusal: OutboxResponse? = nil, attemptTimeout: TimeInterval? = nil, now: Date = Date()
    ) -> OutboxVerdict {
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
            if let refusal {
                let kept = OutboxResponse(statusCode: refusal.statusCode, headers: refusal.headers, body: refusal.body.prefix(OutboxRecord.maximumParkedBody))
                return .permanent(.failed(describe(error)), kept)
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
