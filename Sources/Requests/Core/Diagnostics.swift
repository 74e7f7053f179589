#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

// Overloads that only a mistaken call can select, so that the compiler names the mistake. Without them, a completion
// whose parameter is not the request's `Result` (or that takes two parameters) makes the compiler settle on the stream
// overload, whose `receive` takes a lone trailing closure, and complain that the request is not a `StreamRequest`; and
// a stream added with only a `Result` closure gets "no exact matches". Each overload is unavailable, and the compiler
// ranks a call that uses an unavailable declaration below any call that does not, so a correct call always resolves to
// the real `addRequest`. Each takes a non-optional closure over free generic types: it fits only a closure whose
// parameter types are known (written on the closure, or fixed by how its body uses them) and differ from the
// request's. A closure the compiler cannot type either way, `completion: nil`, and the mistakes the compiler already
// names with the expected type (a stream's or a chained request's completion, a wrong `receive`, a misused value in
// an unannotated closure's body) are diagnosed as before. scripts/check-diagnostics checks both sides.

extension OperationQueue {
    /// Unavailable: the completion of a ``DataRequest`` takes the request's `ResultType`,
    /// `Result<Success, Failure>`. Selected only by a completion that takes something else; the compiler then
    /// reports the mistake. Use ``addRequest(_:session:completionQueue:completion:)``.
    @available(
        *, unavailable,
        message: "the completion must take Result<Request.Success, Request.Failure>, the request's ResultType (Failure is Error unless the request declares one)"
    )
    @discardableResult
    public func addRequest<T: DataRequest, Argument>(
        _ request: T,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: @escaping (Argument) -> Void
    ) -> RequestOperation<T.Success, T.Failure> {
        // Never runs: no call to an unavailable function compiles.
        addRequest(request, session: session, completionQueue: completionQueue, completion: nil)
    }

    /// Unavailable: the completion of a ``DataRequest`` takes one argument, the request's `Result`, rather than a
    /// value and an error. Selected only by a two-parameter completion; the compiler then reports the mistake. Use
    /// ``addRequest(_:session:completionQueue:completion:)``.
    @available(
        *, unavailable,
        message: "the completion takes one argument, Result<Request.Success, Request.Failure> (the request's ResultType), not a value and an error"
    )
    @discardableResult
    public func addRequest<T: DataRequest, First, Second>(
        _ request: T,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: @escaping (First, Second) -> Void
    ) -> RequestOperation<T.Success, T.Failure> {
        // Never runs: no call to an unavailable function compiles.
        addRequest(request, session: session, completionQueue: completionQueue, completion: nil)
    }

    /// Unavailable: a ``StreamRequest`` hands its elements to `receive`, and then its outcome to `completion`.
    /// Selected only by a stream added with a `Result` closure and no `receive`; the compiler then reports the
    /// mistake. Use ``addRequest(_:session:completionQueue:receive:completion:)``.
    @available(
        *, unavailable,
        message: "a stream's elements go to receive: addRequest(request) { element in ... } completion: { result in ... }, result being Result<StreamSummary, Request.Failure>"
    )
    @discardableResult
    public func addRequest<T: StreamRequest, Success, Failure: Error>(
        _ request: T,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: @escaping (Result<Success, Failure>) -> Void
    ) -> StreamRequestOperation<T> {
        // Never runs: no call to an unavailable function compiles.
        addRequest(request, session: session, completionQueue: completionQueue, receive: { _ in }, completion: nil)
    }
}
