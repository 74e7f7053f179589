#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``DataRequest``: a ``NetworkRequestOperation`` whose body, kept in memory up to the
/// ``TransferLimits/maximumBodySize``, becomes `Success` through the request's
/// ``DataRequest/processResponse(_:response:)``. With a ``ResponseCache`` in its policies, a stored response may
/// answer it instead of the network, or after a `304` (see `Caching/CachedAttempts.swift`).
open class DataRequestOperation<R: DataRequest>: NetworkRequestOperation<R>, @unchecked Sendable {
    /// The cache's part in the current attempt. Guarded by the lock.
    var cachedAttempt: CachedAttempt?
    /// Set after a `304` that named another validator: the next attempt ignores what is stored. Guarded by the lock.
    var reloadsCache = false

    /// Whether this kind of request goes through the response cache; downloads and uploads do not.
    var usesResponseCache: Bool {
        true
    }

    override func send(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        guard usesResponseCache, let cache = withLock({ policies.responseCache }) else {
            super.send(urlRequest, credential: credential)
            return
        }
        sendThroughCache(cache, urlRequest, credential: credential)
    }

    override func receive(body: ResponseBody, response: URLResponse?, error: Error?) {
        guard
            let cached = withLock({ () -> CachedAttempt? in
                defer { cachedAttempt = nil }
                return cachedAttempt
            })
        else {
            super.receive(body: body, response: response, error: error)
            return
        }
        receiveThroughCache(cached, body: body, response: response, error: error)
    }

    override func process(_ body: ResponseBody, response: HTTPURLResponse, sent: URLRequest, of request: R) throws -> Processed<R.Success> {
        guard case let .data(data) = body else {
            throw RequestQueueError.misuse("\(type(of: self)) received a file it cannot process")
        }
        return Processed(value: try request.processResponse(data, response: response))
    }
}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON, or is empty
/// (see ``DecodableRequest``).
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {
    override func process(_ body: ResponseBody, response: HTTPURLResponse, sent: URLRequest, of request: R) throws -> Processed<R.Success> {
        guard body.count == 0 else {
            return try super.process(body, response: response, sent: sent, of: request)
        }
        let method = HTTPMethod(rawValue: sent.httpMethod ?? "GET")
        if request.emptyResponseStatusCodes.contains(response.statusCode) || request.emptyResponseMethods.contains(method),
            let empty = (R.Success.self as? EmptyResponse.Type)?.emptyValue() as? R.Success
        {
            return Processed(value: empty)
        }
        do {
            return try super.process(body, response: response, sent: sent, of: request)
        } catch RequestQueueError.didNotReceiveData {
            throw RequestQueueError.unexpectedEmptyBody(statusCode: response.statusCode, method: method.rawValue)
        }
    }
}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}
