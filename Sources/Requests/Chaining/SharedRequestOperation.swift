#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension OperationQueue {
    /// Adds `request` like `addRequest`, except that a request of the same type and identifier already in
    /// flight on this queue (added with this method) shares its network call instead of sending another.
    ///
    /// ```swift
    /// queue.addSharedRequest(AvatarRequest(userId: 7)) { result in cell.show(result) }
    /// ```
    ///
    /// Each caller gets its own operation, and its completion runs on its own `completionQueue`.
    /// Cancelling one caller completes only that caller; the network call is cancelled once every caller
    /// sharing it has cancelled. A request added after the shared call has completed starts a new one.
    @discardableResult
    public func addSharedRequest<T: DataRequest>(
        _ request: T,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: T.CompletionType? = nil
    ) -> RequestOperation<T.Success, T.Failure> {
        let key = SharedCallKey(queue: ObjectIdentifier(self), requestType: ObjectIdentifier(T.self), identifier: request.identifier)
        let (call, isNew) = SharedCalls.shared.join(key) {
            SharedCall<T.Success, T.Failure>(
                operation: makeOperation(for: request, session: session, completionQueue: nil) { _ in
                    SharedCalls.shared.removeCompletedCall(key, of: SharedCall<T.Success, T.Failure>.self)
                })
        }
        let caller = SharedRequestOperation(
            call: call,
            completionQueue: completionQueue ?? underlyingQueue,
            mapError: request.mapError,
            completion: completion
        )
        addOperations(isNew ? [call.operation, caller] : [caller], waitUntilFinished: false)
        return caller
    }
}

/// One caller of a shared network call: it waits for the call and reports its result to its own completion.
final class SharedRequestOperation<Success, Failure: Error>: RequestOperation<Success, Failure>, @unchecked Sendable {
    // Guarded by the lock of `AsyncOperation`; released once the completion handler has run.
    private var call: SharedCall<Success, Failure>?

    init(
        call: SharedCall<Success, Failure>,
        completionQueue: DispatchQueue?,
        mapError: @escaping (Error) -> Failure,
        completion: Completion?
    ) {
        self.call = call
        // The call's failures are already mapped and arrive wrapped; everything else (this caller's own
        // cancellation) goes through the request's mapError.
        super.init(
            completionQueue: completionQueue,
            mapError: { ($0 as? MappedFailure<Failure>)?.failure ?? mapError($0) },
            completion: completion
        )
        addDependency(call.operation)
    }

    override func execute() {
        guard let call = ifNotCompleted({ self.call }) ?? nil else { return }
        switch call.operation.result {
        case let .success(value)?:
            complete(with: .success(value))
        case let .failure(error)?:
            complete(with: .failure(MappedFailure(failure: error)))
        case nil:
            complete(with: .failure(RequestQueueError.cancelled))
        }
    }

    override func cancelWork() {
        withLock { call }?.callerCancelled()
    }

    override func releaseResources() {
        withLock { call = nil }
    }
}

/// A failure the shared call has already passed through the request's `mapError`.
private struct MappedFailure<Failure: Error>: Error {
    let failure: Failure
}

/// A network call and the number of callers that still want it.
final class SharedCall<Success, Failure: Error>: @unchecked Sendable {
    let operation: RequestOperation<Success, Failure>
    private let lock = NSLock()
    private var liveCallers = 0
    private var isAbandoned = false

    init(operation: RequestOperation<Success, Failure>) {
        self.operation = operation
    }

    /// Adds a caller, unless every earlier caller has cancelled (the call is being cancelled).
    func tryJoin() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !isAbandoned else { return false }
        liveCallers += 1
        return true
    }

    func callerCancelled() {
        let cancelCall = lock.withLock {
            liveCallers -= 1
            isAbandoned = liveCallers == 0
            return isAbandoned
        }
        if cancelCall { operation.cancel() }
    }
}

struct SharedCallKey: Hashable {
    let queue: ObjectIdentifier
    let requestType: ObjectIdentifier
    let identifier: String
}

/// The shared calls in flight, by queue, request type and identifier, until each call completes.
final class SharedCalls: @unchecked Sendable {
    static let shared = SharedCalls()

    private let lock = NSLock()
    private var calls: [SharedCallKey: AnyObject] = [:]

    /// Joins the call in flight for `key` (one without a result yet, that not every caller has abandoned),
    /// or makes a new one with `makeCall` and joins that.
    func join<S, F>(_ key: SharedCallKey, makeCall: () -> SharedCall<S, F>) -> (call: SharedCall<S, F>, isNew: Bool) {
        lock.lock()
        defer { lock.unlock() }
        if let existing = calls[key] as? SharedCall<S, F>, !existing.operation.hasCompleted, existing.tryJoin() {
            return (existing, false)
        }
        let call = makeCall()
        _ = call.tryJoin()
        calls[key] = call
        return (call, true)
    }

    /// Removes the call for `key` once its network call has a result; a newer call that replaced an
    /// abandoned one under the same key stays.
    func removeCompletedCall<S, F>(_ key: SharedCallKey, of _: SharedCall<S, F>.Type) {
        lock.lock()
        defer { lock.unlock() }
        if let call = calls[key] as? SharedCall<S, F>, call.operation.hasCompleted {
            calls[key] = nil
        }
    }
}
