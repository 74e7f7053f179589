#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// An operation that produces one typed `Result` and hands it to a completion handler exactly once.
///
/// Whichever comes first wins: the work's outcome or a cancellation. The completion handler runs on
/// ``completionQueue`` and **returns before the operation finishes**, so operations that depend on this
/// one see its effects. The result stays readable in ``result`` afterwards.
open class RequestOperation<Success, Failure: Error>: AsyncOperation, ProgressReporting, @unchecked Sendable {
    /// A completion handler.
    public typealias Completion = (Result<Success, Failure>) -> Void

    /// Where the completion handler runs. `nil` runs it on the thread that produced the outcome (a global
    /// queue for a response, where its body was processed off the session's delegate queue), or on a global queue
    /// after a cancellation, so that user code never runs inside `cancel()`.
    public let completionQueue: DispatchQueue?

    // All guarded by the lock of `AsyncOperation`.
    private var completion: Completion?
    private var mapError: ((Error) -> Failure)?
    private var isCompleted = false
    private var storedOutcome: StoredOutcome?
    /// Set by the queue that runs the operation, so that it can be found by identifier until it completes.
    var registryKey: RequestRegistry.Key?
    /// Operations built from this one's result (`addRequest(after:)`) that have not been cancelled.
    private var liveChainedDependents = 0
    /// Created on first use, so that a queued operation nobody watches stays small.
    private var storedProgress: Progress?
    /// The readers of ``progressUpdates``, if any.
    var progressWatchers: ProgressWatchers?
    /// The result observers of the queue that runs the operation (see `observeResults`), set when it is added.
    var resultObservers: QueueResultObservers?
    /// Run once the completion handler has returned (``value`` waits with them); `nil` until one is added.
    private var resultWaiters: [() -> Void]?
    /// Whether the result waiters have been run, so a new one runs at once.
    private var hasRunResultWaiters = false

    /// Creates an operation that maps every error with `mapError` and reports to `completion` on `completionQueue`.
    public init(
        completionQueue: DispatchQueue?,
        mapError: @escaping (Error) -> Failure,
        completion: Completion?
    ) {
        self.completionQueue = completionQueue
        self.mapError = mapError
        self.completion = completion
        super.init()
    }

    /// The operation's progress. Downloads and uploads count bytes as they are transferred (the total is the
    /// expected length, when known, else a little more than what has arrived); other requests have one unit. It
    /// reaches its total only on success, and stays where it was on failure. Cancelling it cancels the
    /// operation; add it to a parent `Progress` to compose.
    ///
    /// On Linux, Foundation's `Progress` takes no lock. Requests updates a transfer's progress from the transfer
    /// session's serial queue, and completes it from the thread that completes the operation; reading it from
    /// another thread may see a slightly stale value.
    open var progress: Progress {
        withLock {
            if let storedProgress { return storedProgress }
            // Discrete: never made a child of whatever progress is current on this thread.
            let progress = Progress.discreteProgress(totalUnitCount: 1)
            progress.isCancellable = true
            progress.cancellationHandler = { [weak self] in self?.cancel() }
            if storedOutcome?.isSuccess == true {
                progress.completedUnitCount = 1
            }
            storedProgress = progress
            return progress
        }
    }

    /// Shows `completed` of `total` units (`total` ≤ 0: unknown). Until the operation succeeds the progress stays
    /// below its total: Foundation's `Progress` counts a child that reaches its total as done in its parent, and
    /// counts it again if it moves on (a retry, a body longer than announced). It never moves backwards.
    final func updateProgress(completed: Int64, total: Int64) {
        let progress = self.progress
        let newTotal = total > 0 ? max(total, progress.totalUnitCount) : max(progress.totalUnitCount, completed + 1)
        let shown = min(max(completed, progress.completedUnitCount), newTotal - 1)
        if progress.totalUnitCount != newTotal {
            progress.totalUnitCount = newTotal
        }
        if progress.completedUnitCount != shown {
            progress.completedUnitCount = shown
        }
        publishProgress(ProgressSnapshot(completedUnitCount: shown, totalUnitCount: newTotal))
    }

    /// Hands `snapshot` to the readers of ``progressUpdates``.
    final func publishProgress(_ snapshot: ProgressSnapshot) {
        withLock { progressWatchers?.yield(snapshot) }
    }

    /// Whether the completion handler has been taken to run (then ``progressUpdates`` ends), for a caller that holds the lock.
    final var hasDeliveredUnderLock: Bool {
        mapError == nil
    }

    /// The result, once the operation has one. Set before the completion handler runs and kept after finish.
    public var result: Result<Success, Failure>? {
        withLock { storedOutcome }?.result
    }

    /// Completes the operation with `outcome`, unless it has already completed (for example because it was
    /// cancelled). Errors are mapped with the request's `mapError`; `URLError.cancelled` becomes
    /// ``RequestQueueError/cancelled``. Returns whether this call completed the operation.
    @discardableResult
    public final func complete(with outcome: Result<Success, Error>) -> Bool {
        switch outcome {
        case let .success(value): succeed(with: value)
        case let .failure(error): fail(error)
        }
    }

    /// ``complete(with:)`` with `.success(value)`, running `commit` in the same locked step that claims the outcome, so
    /// that nothing can cancel between the two; a throw from `commit` turns the outcome into that failure. `commit`
    /// must be quick and must not call back into the operation. Returns whether this call completed the operation.
    @discardableResult
    final func succeed(with value: Success, committing commit: (() throws -> Void)? = nil) -> Bool {
        let (claimed, commitError) = claim(running: commit)
        guard claimed else { return false }
        if let commitError {
            deliver(failure: commitError)
        } else if withLock({ mapError }) != nil {
            deliver(StoredOutcome(success: value), error: nil, fromCancel: false)
        }
        return true
    }

    /// ``complete(with:)`` with `.failure(error)`. The engine's steps fail through this rather than building a
    /// `Result` themselves: in generic code the compiler could not specialize (a request type of the app's own), each
    /// function that holds a `Result` of the operation's types looks its metadata up at run time, on every call.
    @inline(never)
    @discardableResult
    final func fail(_ error: Error) -> Bool {
        guard claim().claimed else { return false }
        deliver(failure: error)
        return true
    }

    /// Completes with `error` from outside the work (a deadline): like a cancellation, ``cancelWork()`` runs
    /// before the completion is scheduled, so the work in progress is stopped. Returns whether this call completed it.
    @discardableResult
    final func interrupt(with error: Error) -> Bool {
        guard claim().claimed else { return false }
        deliver(failure: error, stoppingWork: true)
        return true
    }

    /// Claims the outcome: whether this caller is the first. `commit` runs in the same locked step, and what it
    /// throws is returned.
    private func claim(running commit: (() throws -> Void)? = nil) -> (claimed: Bool, commitError: Error?) {
        withLock {
            guard !isCompleted else { return (false, nil) }
            isCompleted = true
            do {
                try commit?()
                return (true, nil)
            } catch {
                return (true, error)
            }
        }
    }

    /// `true` once an outcome (a result or the cancellation) has been claimed, slightly before ``result`` is set.
    final var hasCompleted: Bool {
        withLock { isCompleted }
    }

    /// ``hasCompleted`` for a caller that holds the lock.
    final var isCompletedUnderLock: Bool {
        isCompleted
    }

    /// Runs `body` under the lock if the operation has not completed yet; returns `nil` if it has. Always inlined: in
    /// generic code the compiler could not specialize, a call would look `Optional<T>`'s metadata up at run time.
    @inline(__always)
    final func ifNotCompleted<T>(_ body: () -> T) -> T? {
        withLock { isCompleted ? nil : body() }
    }

    /// A cancellation claims the outcome in the same locked step that makes `isCancelled` true, so an
    /// operation that produced its result first is never seen as cancelled.
    override final func claimCancellation() -> Bool {
        guard !isCompleted else { return false }
        isCompleted = true
        return true
    }

    /// Completes with ``RequestQueueError/cancelled``, calling ``cancelWork()`` first.
    public final override func willCancel() {
        deliver(failure: RequestQueueError.cancelled, fromCancel: true)
    }

    /// Registers this already-running operation for lookup by identifier, once the request it runs is known.
    final func register<T>(requestType: T.Type, key: RequestRegistry.Key) {
        guard ifNotCompleted({ registryKey = key }) != nil else { return }
        RequestRegistry.shared.add(self, requestType: requestType, for: key)
        if hasCompleted {
            // Completed between the two steps, so its own removal found nothing to remove.
            RequestRegistry.shared.remove(self, for: key)
        }
    }

    /// Records an operation built from this one's result.
    final func addChainedDependent() {
        withLock { liveChainedDependents += 1 }
    }

    /// A chained dependent was cancelled; when none is left, this operation is cancelled too,
    /// so cancelling the last link of a chain cancels the whole chain, but not a branch others still need.
    final func chainedDependentWasCancelled() {
        let noneLeft: Bool = withLock {
            liveChainedDependents -= 1
            return liveChainedDependents == 0
        }
        if noneLeft {
            cancel()
        }
    }

    /// Subclasses override this to start their work and call ``complete(with:)`` when it ends.
    /// The default fails with ``RequestQueueError/misuse(_:)``, so a subclass that forgets still completes.
    open override func execute() {
        complete(with: .failure(RequestQueueError.misuse("\(type(of: self)) does not override execute()")))
    }

    /// Takes the policies of the queue the operation is added to. The default ignores them.
    func adopt(_ queuePolicies: SharedPolicies) {}

    /// Called once the outcome is stored, with its error before `mapError` (`nil` on success); must call
    /// `runCompletion` exactly once, which schedules the completion handler. The default calls it at once.
    func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        runCompletion()
    }

    /// Stops work in progress when a cancellation has won. Called before the completion is scheduled,
    /// so the work is still there to stop. The default does nothing.
    open func cancelWork() {}

    /// Drops what the work held (request, task). Called after the completion handler has returned,
    /// just before the operation finishes. The default does nothing.
    open func releaseResources() {}

    /// Maps and stores the failure this caller has claimed, then runs the completion where it belongs.
    private func deliver(failure error: Error, fromCancel: Bool = false, stoppingWork: Bool = false) {
        if fromCancel || stoppingWork {
            cancelWork()
        }
        // Set until the completion has run, which only the claimer can schedule.
        guard let mapError = withLock({ mapError }) else { return }
        let error = (error as? URLError)?.code == .cancelled ? RequestQueueError.cancelled : error
        deliver(StoredOutcome(failure: mapError(error)), error: error, fromCancel: fromCancel)
    }

    /// Stores the outcome this caller has claimed (`error` before `mapError`, `nil` on success), then runs the
    /// completion where it belongs.
    private func deliver(_ outcome: StoredOutcome, error: Error?, fromCancel: Bool) {
        let key = withLock {
            storedOutcome = outcome
            return registryKey.take()
        }
        // Unregister before the handler runs, so a request added from inside it is not taken for this one.
        if let key { RequestRegistry.shared.remove(self, for: key) }

        if error == nil, let progress = withLock({ storedProgress }) {
            progress.completedUnitCount = max(progress.totalUnitCount, progress.completedUnitCount)
            publishProgress(ProgressSnapshot(completedUnitCount: progress.completedUnitCount, totalUnitCount: progress.totalUnitCount))
        }
        let completionQueue = completionQueue
        let runCompletion: @Sendable () -> Void = {
            if let completionQueue {
                completionQueue.async { self.runCompletionAndFinish() }
            } else {
                self.runCompletionAndFinish()
            }
        }
        if fromCancel {
            // Monitors and the completion handler are user code, and never run inside `cancel()`.
            DispatchQueue.global().async { self.willDeliver(error, then: runCompletion) }
        } else {
            willDeliver(error, then: runCompletion)
        }
    }

    private func runCompletionAndFinish() {
        var completion: Completion?
        let outcome: StoredOutcome? = withLock {
            mapError = nil
            // Not `take()`: a generic call that would look the metadata of `Optional<Completion>` up.
            completion = self.completion
            self.completion = nil
            return storedOutcome
        }
        if let outcome {
            if let completion {
                outcome.hand(to: completion)
            }
            if let observers = withLock({ resultObservers }), !observers.isEmpty {
                outcome.hand(to: observers)
            }
        }
        releaseResources()
        finish()
        let (watchers, waiters) = withLock {
            hasRunResultWaiters = true
            return (progressWatchers.take(), resultWaiters.take())
        }
        watchers?.finish()
        waiters?.forEach { $0() }
    }

    /// Runs `body` once the completion handler has returned: at once if it has, else on the thread that ran it.
    final func whenCompletionHasRun(_ body: @escaping () -> Void) {
        let runNow: Bool = withLock {
            guard !hasRunResultWaiters else { return true }
            resultWaiters = (resultWaiters ?? []) + [body]
            return false
        }
        if runNow { body() }
    }

    /// The result, in a box: code the compiler could not specialize passes one reference around, instead of looking up
    /// the metadata of `Result<Success, Failure>` in every function that holds one.
    private final class StoredOutcome: @unchecked Sendable {
        let result: Result<Success, Failure>
        let isSuccess: Bool

        init(success value: Success) {
            result = .success(value)
            isSuccess = true
        }

        init(failure: Failure) {
            result = .failure(failure)
            isSuccess = false
        }

        func hand(to completion: Completion) {
            completion(result)
        }

        func hand(to observers: QueueResultObservers) {
            observers.deliver(result)
        }
    }
}
