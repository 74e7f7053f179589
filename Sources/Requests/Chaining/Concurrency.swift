#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension OperationQueue {
    /// Runs `request` as an operation of this queue and returns its success value, or throws its failure.
    ///
    /// ```swift
    /// let recipe = try await queue.response(for: RecipeRequest(recipeId: "1"))
    /// ```
    ///
    /// It runs as an operation of this queue, after `dependencies`, so it respects the queue's
    /// `maxConcurrentOperationCount` and suspension. Cancelling the calling `Task` cancels the operation,
    /// which then throws (the request's mapping of) ``RequestQueueError/cancelled``.
    public func response<T: DataRequest & Sendable>(
        for request: T,
        session: URLSession = .shared,
        after dependencies: [Operation] = []
    ) async throws -> T.Success where T.Success: Sendable {
        let cancellation = OperationCancellation()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let operation = makeOperation(for: request, session: session, completionQueue: nil) { result in
                    continuation.resume(with: result.mapError { $0 })
                }
                dependencies.forEach(operation.addDependency)
                // Attach before queueing, so that a Task cancelled already cancels the operation before any
                // thread of the queue can start it, and nothing is sent.
                cancellation.attach(operation)
                addOperation(operation)
            }
        } onCancel: {
            cancellation.cancel()
        }
    }
}

/// Hands a Task's cancellation to an operation that may not exist yet when the Task is cancelled.
final class OperationCancellation: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelOperation: (() -> Void)?
    private var isCancelled = false

    /// Cancels `operation` with `cancel` (by default `Operation.cancel()`) when the Task is cancelled, or now if it was.
    func attach<O: Operation>(_ operation: O, cancel: @escaping (O) -> Void = { $0.cancel() }) {
        lock.lock()
        let cancelNow = isCancelled
        if !cancelNow { cancelOperation = { cancel(operation) } }
        lock.unlock()
        if cancelNow { cancel(operation) }
    }

    func cancel() {
        lock.lock()
        isCancelled = true
        let cancelOperation = self.cancelOperation
        self.cancelOperation = nil
        lock.unlock()
        cancelOperation?()
    }
}

extension RequestOperation where Success: Sendable {
    /// The operation's success value, once its completion handler has returned; throws its failure (a `Failure`).
    /// Any request operation can be awaited this way, however it was added, and by any number of tasks.
    ///
    /// ```swift
    /// let download = queue.addRequest(api.get("video").download())
    /// let file = try await download.value
    /// ```
    ///
    /// Waiting does not own the operation: cancelling the waiting `Task` ends the wait with `CancellationError` and
    /// leaves the operation running (cancel the operation to cancel the request).
    public var value: Success {
        get async throws {
            let wait = ResultWait<Success>()
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    wait.start(continuation)
                    whenCompletionHasRun { [self] in
                        guard let result else {
                            return wait.resume(with: .failure(RequestQueueError.misuse("the operation completed without a result")))
                        }
                        wait.resume(with: result.mapError { $0 })
                    }
                }
            } onCancel: {
                wait.resume(with: .failure(CancellationError()))
            }
        }
    }
}

/// One wait for an operation's value: resumed once, by the result or by the waiting Task's cancellation, whichever
/// comes first (the cancellation may come before the wait starts).
private final class ResultWait<Success: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Success, Error>?
    private var early: Result<Success, Error>?

    func start(_ continuation: CheckedContinuation<Success, Error>) {
        lock.lock()
        guard let early else {
            self.continuation = continuation
            lock.unlock()
            return
        }
        lock.unlock()
        continuation.resume(with: early)
    }

    func resume(with result: Result<Success, Error>) {
        lock.lock()
        guard let continuation else {
            if early == nil { early = result }
            lock.unlock()
            return
        }
        self.continuation = nil
        lock.unlock()
        continuation.resume(with: result)
    }
}
