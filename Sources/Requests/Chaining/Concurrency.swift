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

extension Operation {
    /// Waits, without blocking a thread, until this operation has finished, then returns; throws `CancellationError`
    /// if the waiting `Task` is cancelled first. Any operation can be awaited this way: one the library returns (the
    /// step of ``RequestOperation/whenFinished(on:_:)``, a batch) or one of your own, finished already, running, or
    /// not started yet (the wait lasts until its queue has run it; an operation never added to a queue or started
    /// never finishes).
    ///
    /// ```swift
    /// let shown = list.whenFinished(with: first) { _, post in print((try? post.get())?.title ?? "none") }
    /// try await shown.finished()
    /// ```
    ///
    /// The way for a command-line tool to wait for a step on `OperationQueue.main`: `waitUntilFinished()` on the main
    /// thread deadlocks there, because the main queue runs the step only while the main thread is free, and `await`
    /// leaves it free. Waiting does not own the operation: cancelling the waiting `Task` ends the wait and leaves
    /// the operation as it was (cancel the operation itself to cancel it). Wait with as many tasks as you like.
    public func finished(isolation: isolated (any Actor)? = #isolation) async throws {
        let wait = ResultWait<Void>()
        let cancellation = OperationCancellation()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                wait.start(continuation)
                // A step that depends on this operation, on a queue of its own: it runs once this operation has
                // finished (at once if it has), and, cancelled, leaves its dependency alone.
                let step = ResultStepOperation.add(to: FinishWatchers.shared.queue, after: [self]) { wait.resume(with: .success(())) }
                cancellation.attach(step)
            }
        } onCancel: {
            wait.resume(with: .failure(CancellationError()))
            cancellation.cancel()
        }
    }

}

/// The queue of the steps that `Operation.finished(isolation:)` waits for: each one is ready only once the operation it
/// watches has finished, so none takes a thread while it waits. (A box: Apple's SDKs do not mark `OperationQueue`
/// `Sendable`, although it is documented as safe to use from any thread.)
private final class FinishWatchers: @unchecked Sendable {
    static let shared = FinishWatchers()
    let queue: OperationQueue

    private init() {
        queue = OperationQueue()
        queue.name = "Requests.Operation.finished"
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
