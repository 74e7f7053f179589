#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension OperationQueue {
    /// Adds a request built from `previous`'s success value, to run after `previous` finishes.
    ///
    /// ```swift
    /// let token = queue.addRequest(LoginRequest(user: "ada", password: "…"))
    /// let profile = queue.addRequest(after: token) { ProfileRequest(token: $0) }
    /// let avatar = queue.addRequest(after: profile) { AvatarRequest(url: $0.avatarURL) }
    /// ```
    ///
    /// If `previous` fails or is cancelled, the new request is never built or sent, and it completes with
    /// ``RequestQueueError/dependencyFailed(_:)`` carrying `previous`'s error. An error thrown by
    /// `makeRequest` fails it too. Cancelling it cancels `previous` as well, unless another request built
    /// from `previous` still needs it. Its `Failure` is `Error`, because the error can come from either request.
    @discardableResult
    public func addRequest<Input, InputFailure: Error, T: DataRequest>(
        after previous: RequestOperation<Input, InputFailure>,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        makeRequest: @escaping (Input) throws -> T,
        completion: ((Result<T.Success, Error>) -> Void)? = nil
    ) -> RequestOperation<T.Success, Error> {
        let operation = ChainedRequestOperation(
            after: previous,
            queue: self,
            session: session,
            completionQueue: completionQueue ?? underlyingQueue,
            makeRequest: makeRequest,
            completion: completion
        )
        operation.adopt(requestPolicyBox)
        addOperation(operation)
        return operation
    }
}

/// Runs a request built from another operation's success value, once that operation has finished.
/// The request itself runs as its kind's operation, started directly inside this one's queue slot.
final class ChainedRequestOperation<Input, InputFailure: Error, T: DataRequest>:
    RequestOperation<T.Success, Error>, @unchecked Sendable
{
    private let session: URLSession
    /// The queue it runs on, to register the built request for lookup by identifier.
    private let queueID: ObjectIdentifier

    // All guarded by the lock of `AsyncOperation`; released once the completion handler has run.
    private var previous: RequestOperation<Input, InputFailure>?
    private var makeRequest: ((Input) throws -> T)?
    private var requestOperation: RequestOperation<T.Success, T.Failure>?
    /// The queue's policies, for the request once it is built.
    private var queuePolicies = SharedPolicies.none

    init(
        after previous: RequestOperation<Input, InputFailure>,
        queue: OperationQueue,
        session: URLSession,
        completionQueue: DispatchQueue?,
        makeRequest: @escaping (Input) throws -> T,
        completion: Completion?
    ) {
        self.session = session
        self.queueID = ObjectIdentifier(queue)
        self.previous = previous
        self.makeRequest = makeRequest
        super.init(completionQueue: completionQueue, mapError: { $0 }, completion: completion)
        resultObservers = QueueResultObservers.observers(of: queue)
        addDependency(previous)
        previous.addChainedDependent()
    }

    override func execute() {
        guard let (previous, makeRequest) = ifNotCompleted({ (self.previous, self.makeRequest) }),
            let previous, let makeRequest
        else { return }
        switch previous.result {
        case let .success(input)?:
            let request: T
            do { request = try makeRequest(input) } catch {
                complete(with: .failure(error))
                return
            }
            register(requestType: T.self, key: RequestRegistry.Key(queue: queueID, identifier: request.identifier))
            let operation = request.makeOperation(session: session, completionQueue: nil) { result in
                self.complete(with: result.mapError { $0 })
            }
            guard
                let queuePolicies = ifNotCompleted({ () -> SharedPolicies in
                    self.requestOperation = operation
                    return self.queuePolicies
                })
            else { return }
            operation.adopt(queuePolicies)
            operation.start()
        case let .failure(error)?:
            complete(with: .failure(RequestQueueError.dependencyFailed(error)))
        case nil:
            // `previous` finished without a result: it was never run by a queue.
            complete(with: .failure(RequestQueueError.dependencyFailed(RequestQueueError.cancelled)))
        }
    }

    override func adopt(_ queuePolicies: SharedPolicies) {
        withLock { self.queuePolicies = queuePolicies }
    }

    /// A request that was never built (its dependency failed, `makeRequest` threw, or it was cancelled first)
    /// still ends once for the queue's monitors; a built one reports for itself.
    override func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        let (built, monitors) = withLock { (requestOperation != nil, queuePolicies.policies.monitors) }
        if !built, let error {
            let summary = RequestSummary(
                identifier: String(describing: T.self), urlRequest: nil, response: nil,
                bodyBytes: 0, attempts: 0, duration: 0, error: error, metrics: nil
            )
            monitors.forEach { $0.requestDidFinish(summary) }
        }
        runCompletion()
    }

    override func cancelWork() {
        let (previous, requestOperation) = withLock { (self.previous, self.requestOperation) }
        requestOperation?.cancel()
        previous?.chainedDependentWasCancelled()
    }

    override func releaseResources() {
        withLock {
            previous = nil
            makeRequest = nil
            requestOperation = nil
            queuePolicies = .none
        }
    }
}
