#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A typed unit of work: what it produces on success, what it fails with, and a name.
public protocol Request {
    /// The value delivered when the request succeeds.
    associatedtype Success
    /// The error delivered when the request fails. Every error passes through ``mapError(_:)`` first.
    /// Default: `Error`, every error as it is.
    associatedtype Failure: Error = Error

    /// The result handed to a completion handler.
    typealias ResultType = Swift.Result<Success, Failure>
    /// A completion handler for this request.
    typealias CompletionType = (ResultType) -> Void

    /// Names the request. Two requests of the same type with the same identifier are the same request
    /// (see ``RequestQueue/requestCurrentlyExecuting(_:)``).
    var identifier: String { get }

    /// Turns any error met while running the request (transport, status, decoding, ``RequestQueueError/cancelled``)
    /// into this request's `Failure`.
    func mapError(_ error: Error) -> Failure
}

extension Request where Failure == Error {
    /// Passes the error through unchanged.
    public func mapError(_ error: Error) -> Failure {
        error
    }
}

/// A request that is sent over HTTP with `URLSession`.
public protocol NetworkRequest: Request {
    /// Status codes that count as success; any other code fails with ``RequestQueueError/invalidStatusCode(statusCode:response:body:)``.
    /// Default: `200..<300`.
    var validHTTPStatusCodes: [Int] { get }

    /// When a failed attempt is sent again (see ``RetryPolicy``). Default: `nil`, which leaves it to the
    /// queue's ``RequestPolicies/retryPolicy`` (itself `nil`, no retries, unless set).
    var retryPolicy: RetryPolicy? { get }

    /// Run on this request's `URLRequest` after the queue's adapters (see ``RequestPolicies``). Default: none.
    var adapters: [RequestAdapter] { get }
    /// Checked after the queue's preconditions. Default: none.
    var preconditions: [RequestPrecondition] { get }
    /// Run after the queue's validations. Default: none.
    var validations: [ResponseValidation] { get }
    /// Whether the queue's ``RequestPolicies/authenticator`` applies; a login request returns `false`, so that a
    /// wrong password is not taken for an expired token. Default: `true`.
    var usesAuthenticator: Bool { get }
    /// Replaces the queue's ``RequestPolicies/limits``. Default: `nil`, the queue's.
    var limits: TransferLimits? { get }
    /// Replaces the queue's ``RequestPolicies/redirectPolicy``. Default: `nil`, the queue's.
    var redirectPolicy: RedirectPolicy? { get }
    /// Headers, besides the queue's ``RequestPolicies/sensitiveHeaders``, that a redirect never carries to another
    /// origin. Default: none.
    var sensitiveHeaders: [String] { get }
    /// Replaces the queue's ``RequestPolicies/responseCache``. Default: `nil`, the queue's.
    var responseCache: ResponseCache? { get }
    /// How this request uses the response cache, when there is one. Default: ``CacheUse/useCache``.
    var cacheUse: CacheUse { get }

    /// Builds the `URLRequest` to send, once per attempt (again for each retry). Call `completion` once;
    /// later calls are ignored.
    /// A `.failure` fails the request with that error and nothing is sent.
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void)
}

/// Every 2xx code, built once because `validHTTPStatusCodes` is read on every response.
let successfulHTTPStatusCodes = Array(200..<300)

extension NetworkRequest {
    /// `200..<300`.
    public var validHTTPStatusCodes: [Int] {
        successfulHTTPStatusCodes
    }
}
