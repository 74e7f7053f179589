#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``DataRequest``: builds the `URLRequest`, sends it with a data task, validates the status code,
/// and turns the body into `Success` with the request's ``DataRequest/processResponse(_:response:)``.
///
/// With a ``NetworkRequest/retryPolicy``, a failed attempt may be sent again, inside this same operation,
/// after a backoff: `makeURLRequest` runs again for each attempt.
///
/// Cancelling it cancels the `URLSessionTask` (or the backoff) and completes at once with
/// ``RequestQueueError/cancelled``, without waiting for the server. After it finishes it holds no request,
/// task or completion handler.
open class DataRequestOperation<R: DataRequest>: RequestOperation<R.Success, R.Failure>, @unchecked Sendable {
    /// The session the request is sent on.
    public let session: URLSession
    /// The request's identifier.
    public let identifier: String

    // All guarded by the lock of `AsyncOperation`.
    private var request: R?
    /// The attempt in progress, from 1.
    private var attempt = 1
    /// The last attempt whose `makeURLRequest` has called back; later calls for it are ignored.
    private var answeredAttempt = 0
    private var method = "GET"
    private var task: URLSessionTask?
    /// The wait before the next attempt.
    private var backoff: DispatchWorkItem?
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

    /// The HTTP response of the last attempt, once one has been received. Kept after finish.
    public var response: HTTPURLResponse? {
        withLock { storedResponse }
    }

    /// The data task while the request is in flight; `nil` before and after.
    var currentTask: URLSessionTask? {
        withLock { task }
    }

    /// Starts the first attempt.
    public final override func execute() {
        startAttempt()
    }

    /// Cancels the data task, or the wait before the next attempt.
    ///
    /// `URLSessionTask.cancel()` waits for the session's internal queue (about a millisecond on Linux), so it
    /// runs on a global queue: `cancelAllOperations()` over thousands of requests would otherwise crawl,
    /// and the queue would start (and send) the requests it had not reached yet.
    public final override func cancelWork() {
        let (task, backoff): (URLSessionTask?, DispatchWorkItem?) = withLock { (self.task, self.backoff) }
        backoff?.cancel()
        if let task {
            DispatchQueue.global().async { task.cancel() }
        }
    }

    /// Drops the request and the task.
    public final override func releaseResources() {
        withLock {
            request = nil
            task = nil
            backoff = nil
        }
    }

    /// Asks the request for the `URLRequest` of the current attempt.
    private func startAttempt() {
        guard let (request, attempt) = ifNotCompleted({ (self.request, self.attempt) }) as (R?, Int)?, let request else { return }
        request.makeURLRequest { [self] urlRequest in
            send(urlRequest, attempt: attempt)
        }
    }

    private func send(_ urlRequest: Result<URLRequest, Error>, attempt: Int) {
        let isFirstCall: Bool = withLock {
            guard attempt == self.attempt, attempt > answeredAttempt else { return false }
            answeredAttempt = attempt
            return true
        }
        guard isFirstCall else { return }

        switch urlRequest {
        case let .failure(error):
            complete(with: .failure(error))
        case let .success(urlRequest):
            guard !hasCompleted else { return }
            // Through an existential: the session's handler is @Sendable and must not capture `R`'s metatype.
            let receiver: any AttemptReceiver = self
            let task = session.dataTask(with: urlRequest) { data, response, error in
                receiver.receive(data: data, response: response, error: error)
            }
            // Resume outside the lock. A cancellation that wins before the task is stored never sees it, so the
            // task is cancelled here, unsent; one that wins after cancels it from a global queue, maybe only
            // after resume(), so the task is also cancelled here as soon as the cancellation is visible.
            let stored: Bool? = ifNotCompleted {
                self.task = task
                self.method = urlRequest.httpMethod ?? "GET"
                return true
            }
            guard stored != nil else {
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
        let httpResponse = response as? HTTPURLResponse
        let outcome = outcome(of: request, data: data, response: response, error: error)
        if case let .failure(failure) = outcome, retry(after: failure, response: httpResponse, policy: request.retryPolicy) {
            return
        }
        complete(with: outcome)
    }

    private func outcome(of request: R, data: Data?, response: URLResponse?, error: Error?) -> Result<R.Success, Error> {
        if let error {
            return .failure(error)
        }
        guard let httpResponse = response as? HTTPURLResponse else {
            return .failure(RequestQueueError.nonHTTPResponse(response))
        }
        withLock { storedResponse = httpResponse }
        let body = data ?? Data()
        guard request.validHTTPStatusCodes.contains(httpResponse.statusCode) else {
            return .failure(RequestQueueError.invalidStatusCode(
                statusCode: httpResponse.statusCode, response: httpResponse, body: body))
        }
        return Result { try request.processResponse(body, response: httpResponse) }
    }

    /// Schedules the next attempt if `policy` allows it; returns whether the failure was handled that way.
    private func retry(after failure: Error, response: HTTPURLResponse?, policy: RetryPolicy?) -> Bool {
        guard let policy else { return false }
        let (attempt, method): (Int, String) = withLock { (self.attempt, self.method) }
        guard let delay = policy.delay(afterAttempt: attempt, method: method, error: failure, response: response) else {
            return false
        }
        // Weak: a cancelled work item stays queued until its deadline, and must not keep the operation alive.
        let receiver: any AttemptReceiver = self
        let next = DispatchWorkItem { [weak receiver] in receiver?.startNextAttempt() }
        let scheduled: Bool? = ifNotCompleted {
            self.attempt = attempt + 1
            self.task = nil
            self.storedResponse = nil
            self.backoff = next
            return true
        }
        guard scheduled != nil else {
            return true // cancelled meanwhile: that cancellation is the outcome
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay, execute: next)
        return true
    }

    fileprivate func startNextAttempt() {
        guard ifNotCompleted({ backoff = nil }) != nil else { return }
        startAttempt()
    }
}

/// Receives the end of a data task and the end of a backoff. An existential, so that the @Sendable closures
/// that call it do not capture the operation's generic metatype.
private protocol AttemptReceiver: AnyObject, Sendable {
    func receive(data: Data?, response: URLResponse?, error: Error?)
    func startNextAttempt()
}

extension DataRequestOperation: AttemptReceiver {}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON.
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}
