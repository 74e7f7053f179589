#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Changes a `URLRequest`, perhaps asynchronously, before it is sent: adds a header, signs the body,
/// fetches something first. Runs again for every attempt.
///
/// An adapter that fails fails the request with its error, and nothing is sent.
public struct RequestAdapter: Sendable {
    private let body: @Sendable (URLRequest, @escaping @Sendable (Result<URLRequest, Error>) -> Void) -> Void

    /// An adapter that calls `completion` once with the changed request or an error. Later calls are ignored.
    public init(_ adapt: @escaping @Sendable (URLRequest, _ completion: @escaping @Sendable (Result<URLRequest, Error>) -> Void) -> Void) {
        body = adapt
    }

    /// An adapter that changes the request synchronously; a thrown error fails the request.
    public static func map(_ transform: @escaping @Sendable (URLRequest) throws -> URLRequest) -> RequestAdapter {
        RequestAdapter { request, completion in
            completion(Result { try transform(request) })
        }
    }

    /// An adapter that sets the header `field` to `value`, replacing any value already there. A name or value
    /// with CR, LF or NUL fails the request with ``RequestBuildingError/invalidHeader(name:)``.
    public static func setHeader(_ value: String, for field: String) -> RequestAdapter {
        map { request in
            try HeaderSafety.check(name: field, value: value)
            var request = request
            request.setValue(value, forHTTPHeaderField: field)
            return request
        }
    }

    /// Adapts `request` and reports the outcome to `completion`.
    public func adapt(_ request: URLRequest, completion: @escaping @Sendable (Result<URLRequest, Error>) -> Void) {
        body(request, completion)
    }
}

/// A check made on the final `URLRequest` just before it is sent, for every attempt. A check that
/// throws fails the request with that error, and nothing is sent.
public struct RequestPrecondition: Sendable {
    private let body: @Sendable (URLRequest) throws -> Void

    /// A precondition that throws when `request` must not be sent.
    public init(_ check: @escaping @Sendable (_ request: URLRequest) throws -> Void) {
        body = check
    }

    /// Throws when `request` must not be sent.
    public func check(_ request: URLRequest) throws {
        try body(request)
    }
}
