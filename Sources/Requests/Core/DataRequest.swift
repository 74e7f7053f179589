#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A network request whose response body is turned into `Success` by ``processData(_:)``.
///
/// Runs as a ``DataRequestOperation``. Conform to ``DecodableRequest`` for JSON and to ``NoContentRequest``
/// when no body is expected; both provide `processData` for you.
public protocol DataRequest: NetworkRequest {
    /// Turns the response body into the success value. A thrown error fails the request with that error.
    func processData(_ data: Data) throws -> Success

    /// Turns the body and the HTTP response into the success value. Implement this instead of
    /// ``processData(_:)`` when the value needs headers too. Default: calls ``processData(_:)``.
    func processResponse(_ data: Data, response: HTTPURLResponse) throws -> Success

    /// Creates the operation that runs this request. The default picks the operation class for the
    /// request's kind: ``DataRequestOperation``, ``DecodableRequestOperation`` or ``NoContentRequestOperation``.
    func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure>
}

extension DataRequest {
    /// Calls ``processData(_:)``.
    public func processResponse(_ data: Data, response: HTTPURLResponse) throws -> Success {
        try processData(data)
    }

    /// Creates a ``DataRequestOperation``.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        DataRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}

/// A request whose JSON response body decodes to `Success`.
///
/// An empty body fails with ``RequestQueueError/didNotReceiveData``; invalid JSON fails with the `DecodingError`.
public protocol DecodableRequest: DataRequest where Success: Decodable {
    /// Key strategy for the default ``jsonDecoder``. Default: `nil`, which keeps `JSONDecoder`'s own default.
    var keyDecodingStrategy: JSONDecoder.KeyDecodingStrategy? { get }
    /// Date strategy for the default ``jsonDecoder``. Default: `nil`, which keeps `JSONDecoder`'s own default.
    var dateDecodingStrategy: JSONDecoder.DateDecodingStrategy? { get }
    /// Data strategy for the default ``jsonDecoder``. Default: `nil`, which keeps `JSONDecoder`'s own default.
    var dataDecodingStrategy: JSONDecoder.DataDecodingStrategy? { get }
    /// Non-conforming float strategy for the default ``jsonDecoder``. Default: `nil`, which keeps `JSONDecoder`'s own default.
    var nonConformingFloatDecodingStrategy: JSONDecoder.NonConformingFloatDecodingStrategy? { get }

    /// The decoder used for the response. Default: a new `JSONDecoder` configured with the four strategies above.
    /// Return your own (for example a shared, preconfigured one) to take full control; the strategies are then ignored.
    var jsonDecoder: JSONDecoder { get }
}

extension DecodableRequest {
    /// `nil`: keep `JSONDecoder`'s default.
    public var keyDecodingStrategy: JSONDecoder.KeyDecodingStrategy? { nil }
    /// `nil`: keep `JSONDecoder`'s default.
    public var dateDecodingStrategy: JSONDecoder.DateDecodingStrategy? { nil }
    /// `nil`: keep `JSONDecoder`'s default.
    public var dataDecodingStrategy: JSONDecoder.DataDecodingStrategy? { nil }
    /// `nil`: keep `JSONDecoder`'s default.
    public var nonConformingFloatDecodingStrategy: JSONDecoder.NonConformingFloatDecodingStrategy? { nil }

    /// A new `JSONDecoder` with each strategy that is not `nil` applied.
    public var jsonDecoder: JSONDecoder {
        let decoder = JSONDecoder()
        if let keyDecodingStrategy { decoder.keyDecodingStrategy = keyDecodingStrategy }
        if let dateDecodingStrategy { decoder.dateDecodingStrategy = dateDecodingStrategy }
        if let dataDecodingStrategy { decoder.dataDecodingStrategy = dataDecodingStrategy }
        if let nonConformingFloatDecodingStrategy {
            decoder.nonConformingFloatDecodingStrategy = nonConformingFloatDecodingStrategy
        }
        return decoder
    }

    /// Decodes `Success` from the body with ``jsonDecoder``.
    /// Throws ``RequestQueueError/didNotReceiveData`` for an empty body, and the `DecodingError` for invalid JSON.
    public func processData(_ data: Data) throws -> Success {
        guard !data.isEmpty else { throw RequestQueueError.didNotReceiveData }
        return try jsonDecoder.decode(Success.self, from: data)
    }

    /// Creates a ``DecodableRequestOperation``.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        DecodableRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}

/// A request that expects no response body, such as a `DELETE` answered with `204 No Content`.
/// Any 2xx status is valid by default.
public protocol NoContentRequest: DataRequest where Success == Void {
    /// When `true`, a non-empty body fails the request with ``RequestQueueError/nonEmptyData``. Default: `true`.
    var shouldEnforceNoContent: Bool { get }
}

extension NoContentRequest {
    /// `true`.
    public var shouldEnforceNoContent: Bool { true }

    /// Succeeds for an empty body; fails with ``RequestQueueError/nonEmptyData`` for a body when
    /// ``shouldEnforceNoContent`` is `true`.
    public func processData(_ data: Data) throws {
        if shouldEnforceNoContent && !data.isEmpty {
            throw RequestQueueError.nonEmptyData
        }
    }

    /// Creates a ``NoContentRequestOperation``.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        NoContentRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}
