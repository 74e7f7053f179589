#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``DataRequest``: builds the `URLRequest`, sends it with a data task, validates the status code,
/// and turns the body into `Success` with the request's ``DataRequest/processResponse(_:response:)``.
///
/// Cancelling it cancels the `URLSessionTask` and completes at once with ``RequestQueueError/cancelled``,
/// without waiting for the server. After it finishes it holds no request, task or completion handler.
open class DataRequestOperation<R: DataRequest>: RequestOperation<R.Success, R.Failure>, @unchecked Sendable {
    /// The session the request is sent on.
    public let session: URLSession
    /// The request's identifier.
    public let identifier: String

    // All guarded by the lock of `AsyncOperation`.
    private var request: R?
    private var hasURLRequest = false
    private var task: URLSessionTask?
    private var storedResponse: HTTPURLResponse?

    /// Creates an operation for `request`; it does nothing until started, usually by an `OperationQueue`.
    public init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: R.CompletionType? = nil
    ) {
        self.session = session
        self.identifier = request.identifier
        self.request = request
        super.init(completionQueue: completionQueue, mapError: request.mapError, completion: completion)
    }

    /// The HTTP response, once one has been received. Kept after finish.
    public var response: HTTPURLResponse? {
        withLock { storedResponse }
    }

    /// The data task while the request is in flight; `nil` before and after.
    var currentTask: URLSessionTask? {
        withLock { task }
    }

    /// Asks the request for its `URLRequest`.
    public final override func execute() {
        guard let request = ifNotCompleted({ self.request }) ?? nil else { return }
        request.makeURLRequest { [self] urlRequest in
            send(urlRequest)
        }
    }

    /// Cancels the data task, if there is one.
    ///
    /// `URLSessionTask.cancel()` waits for the session's internal queue (about a millisecond on Linux), so it
    /// runs on a global queue: `cancelAllOperations()` over thousands of requests would otherwise crawl,
    /// and the queue would start (and send) the requests it had not reached yet.
    public final override func cancelWork() {
        guard let task = withLock({ task }) else { return }
        DispatchQueue.global().async { task.cancel() }
    }

    /// Drops the request and the task.
    public final override func releaseResources() {
        withLock {
            request = nil
            task = nil
        }
    }

    private func send(_ urlRequest: Result<URLRequest, Error>) {
        let isFirstCall: Bool = withLock {
            defer { hasURLRequest = true }
            return !hasURLRequest
        }
        guard isFirstCall else { return }

        switch urlRequest {
        case let .failure(error):
            complete(with: .failure(error))
        case let .success(urlRequest):
            guard !hasCompleted else { return }
            // Through an existential: the session's handler is @Sendable and must not capture `R`'s metatype.
            let receiver: any DataTaskReceiver = self
            let task = session.dataTask(with: urlRequest) { data, response, error in
                receiver.receive(data: data, response: response, error: error)
            }
            // Resume outside the lock. A cancellation that wins before the task is stored never sees it, so the
            // task is cancelled here, unsent; one that wins after cancels it from a global queue, maybe only
            // after resume(), so the task is also cancelled here as soon as the cancellation is visible.
            guard ifNotCompleted({ self.task = task }) != nil else {
                task.cancel()
                return
            }
            task.resume()
            if hasCompleted {
                task.cancel()
            }
        }
    }

    fileprivate func receive(data: Data?, response: URLResponse?, error: Error?) {
        guard let request = ifNotCompleted({ self.request }) ?? nil else { return }
        if let error {
            complete(with: .failure(error))
            return
        }
        guard let httpResponse = response as? HTTPURLResponse else {
            complete(with: .failure(RequestQueueError.nonHTTPResponse(response)))
            return
        }
        withLock { storedResponse = httpResponse }
        let body = data ?? Data()
        guard request.validHTTPStatusCodes.contains(httpResponse.statusCode) else {
            complete(with: .failure(RequestQueueError.invalidStatusCode(
                statusCode: httpResponse.statusCode, response: httpResponse, body: body)))
            return
        }
        complete(with: Result { try request.processResponse(body, response: httpResponse) })
    }
}

/// Receives the end of a data task.
private protocol DataTaskReceiver: AnyObject, Sendable {
    func receive(data: Data?, response: URLResponse?, error: Error?)
}

extension DataRequestOperation: DataTaskReceiver {}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON.
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}
