#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension OperationQueue {
    /// Adds every request in `requests` to this queue, and a ``BatchOperation`` that finishes after all of
    /// them with their results in input order.
    ///
    /// ```swift
    /// let batch = queue.addBatch(ids.map { RecipeRequest(recipeId: $0) }) { result in
    ///     let recipes = (try? result.get())?.compactMap { try? $0.get() }
    /// }
    /// ```
    ///
    /// With `failFast`, the first failure (a cancellation counts) cancels every request that has not
    /// finished. The batch fails only if it is cancelled itself, which cancels every request in it.
    @discardableResult
    public func addBatch<T: DataRequest>(
        _ requests: [T],
        session: URLSession = .shared,
        failFast: Bool = false,
        completionQueue: DispatchQueue? = nil,
        completion: ((Result<[Result<T.Success, T.Failure>], Error>) -> Void)? = nil
    ) -> BatchOperation<T.Success, T.Failure> {
        let batch = BatchOperation<T.Success, T.Failure>(
            count: requests.count,
            failFast: failFast,
            completionQueue: completionQueue ?? underlyingQueue,
            completion: completion
        )
        let operations = requests.map { request in
            makeOperation(for: request, session: session, completionQueue: nil) { [weak batch] result in
                let failed = if case .failure = result { true } else { false }
                batch?.requestDidComplete(failed: failed)
            }
        }
        batch.setOperations(operations)
        addOperations(operations + [batch], waitUntilFinished: false)
        return batch
    }
}

/// One operation that finishes after a group of request operations, with their results in input order.
///
/// Others can depend on it. Its ``progress`` has one unit per request.
public final class BatchOperation<Success, Failure: Error>:
    RequestOperation<[Result<Success, Failure>], Error>, @unchecked Sendable
{
    /// One unit per request, completed as each request completes. Cancelling it cancels the batch.
    public override var progress: Progress { batchProgress }
    private let batchProgress: Progress

    private let failFast: Bool

    // Guarded by the lock of `AsyncOperation`; `operations` is released once the completion handler has run.
    private var operations: [RequestOperation<Success, Failure>] = []
    private var completedCount: Int64 = 0
    private var hasFailedFast = false

    init(count: Int, failFast: Bool, completionQueue: DispatchQueue?, completion: Completion?) {
        self.failFast = failFast
        batchProgress = Progress.discreteProgress(totalUnitCount: Int64(count))
        super.init(completionQueue: completionQueue, mapError: { $0 }, completion: completion)
        batchProgress.isCancellable = true
        batchProgress.cancellationHandler = { [weak self] in self?.cancel() }
    }

    /// Called once, before the batch is queued.
    func setOperations(_ operations: [RequestOperation<Success, Failure>]) {
        operations.forEach(addDependency)
        withLock { self.operations = operations }
    }

    /// Counts a completed request. `Progress` on Linux has no lock of its own and completions arrive on
    /// several threads, so it is written under the operation's lock (do not read the batch's state from a
    /// progress observer).
    func requestDidComplete(failed: Bool) {
        let (cancelTheRest, snapshot): (Bool, ProgressSnapshot) = withLock {
            completedCount += 1
            progress.completedUnitCount = completedCount
            let snapshot = ProgressSnapshot(completedUnitCount: completedCount, totalUnitCount: progress.totalUnitCount)
            // Once only: the cancellations it causes complete as failures too.
            guard failed, failFast, !hasFailedFast else { return (false, snapshot) }
            hasFailedFast = true
            return (true, snapshot)
        }
        publishProgress(snapshot)
        if cancelTheRest { cancelOperations() }
    }

    /// Every request has finished: completes with their results, in input order.
    public override func execute() {
        guard let operations = ifNotCompleted({ self.operations }) else { return }
        let results = operations.compactMap { $0.result }  // a key path would be built on every call in generic code
        // Fewer results: a request finished without one, as it was never run by a queue.
        complete(with: results.count == operations.count ? .success(results) : .failure(RequestQueueError.cancelled))
    }

    /// Cancels every request in the batch.
    public override func cancelWork() {
        cancelOperations()
    }

    /// Drops the requests.
    public override func releaseResources() {
        withLock { operations = [] }
    }

    private func cancelOperations() {
        withLock { operations }.forEach { $0.cancel() }
    }
}
