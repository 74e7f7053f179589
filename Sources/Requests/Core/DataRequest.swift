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
        DataRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind())
    }
}

/// A request whose JSON response body decodes to `Success`.
///
/// An empty body is accepted when `Success` can be empty (an `Optional`, or ``EmptyBody``) and the status is one of
/// ``emptyResponseStatusCodes`` or the method one of ``emptyResponseMethods``: it becomes `nil` or `EmptyBody()`. Any
/// other empty body fails with ``RequestQueueError/unexpectedEmptyBody(statusCode:method:)``; invalid JSON fails with
/// the `DecodingError`.
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

    /// Statuses whose empty body is `Success`'s empty value, when `Success` conforms to ``EmptyResponse``, besides
    /// those of responses that never have a body (a `1xx`, `204`, `205` or `304`, and any answer to `HEAD`), which always
    /// count. List a status here for an API that answers it with nothing, such as a `201` without a body.
    /// Default: 204 and 205.
    var emptyResponseStatusCodes: Set<Int> { get }
    /// Methods whose empty response body is `Success`'s empty value, when `Success` conforms to ``EmptyResponse``,
    /// besides `HEAD`, which always counts. Default: `HEAD`.
    var emptyResponseMethods: Set<HTTPMethod> { get }
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

    /// 204 and 205.
    public var emptyResponseStatusCodes: Set<Int> { [204, 205] }
    /// `HEAD`.
    public var emptyResponseMethods: Set<HTTPMethod> { [.head] }

    /// A new `JSONDecoder` with each strategy that is not `nil` applied.
    public var jsonDecoder: JSONDecoder {
        let decoder = JSONDecoder()
        if let keyDecodingStrategy { decoder.keyDecodingStrategy = keyDecodingStrategy }
        if let dateDecodingStrategy { decoder.dateDecodingStrategy = dateDecodingStrategy }
        if let dataDecodingStrategy { decoder.dataDecodingStrategy = dataDecodingStrategy }
        if let nonConformingFloatDecodingStrategy { decoder.nonConformingFloatDecodingStrategy = nonConformingFloatDecodingStrategy }
        return decoder
    }

    /// Decodes `Success` from the body with ``jsonDecoder``.
    /// Throws ``RequestQueueError/didNotReceiveData`` for an empty body (which the operation reports as
    /// ``RequestQueueError/unexpectedEmptyBody(statusCode:method:)``), and the `DecodingError` for invalid JSON.
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
        DecodableRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind(isDecodable: true))
    }
}

/// A `Success` type that stands for an empty response body (see ``DecodableRequest``).
public protocol EmptyResponse {
    /// The value of an empty body.
    static func emptyValue() -> Self
}

/// The `Success` of a ``DecodableRequest`` whose response has no body worth decoding: an empty body (for the
/// statuses and methods the request allows) and any JSON value both decode to it. Not called `Empty`, so that it
/// does not clash with Combine's `Empty`.
public struct EmptyBody: Codable, Sendable, Hashable, EmptyResponse {
    /// The empty value.
    public init() {}

    /// Decodes from any JSON value, which it ignores.
    public init(from decoder: Decoder) throws {}

    /// Encodes as an empty JSON object.
    public func encode(to encoder: Encoder) throws {
        _ = encoder.container(keyedBy: NoKeys.self)
    }

    /// `EmptyBody()`.
    public static func emptyValue() -> EmptyBody {
        EmptyBody()
    }

    private enum NoKeys: CodingKey {}
}

extension Optional: EmptyResponse {
    /// `nil`.
    public static func emptyValue() -> Wrapped? {
        nil
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
        guard !shouldEnforceNoContent || data.isEmpty else { throw RequestQueueError.nonEmptyData }
    }

    /// Creates a ``NoContentRequestOperation``.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        NoContentRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind())
    }
}
