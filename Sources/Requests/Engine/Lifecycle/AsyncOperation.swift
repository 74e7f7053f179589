import Foundation

/// An `Operation` whose work finishes later, on another thread.
///
/// `start()`, `cancel()` and `finish()` are `final`; a subclass overrides ``execute()`` to begin its work,
/// calls ``finish()`` when it is done, and may override ``willCancel()``.
///
/// One lock guards all state, including that of the library's own subclasses. The `isExecuting` and
/// `isFinished` KVO notifications are always sent outside that lock: on Linux `didChangeValue(forKey:)`
/// re-reads those properties at once, which would deadlock inside it.
open class AsyncOperation: Operation, @unchecked Sendable {
    private enum State {
        case pending
        /// `start()` has claimed the operation and is sending the `isExecuting` notifications.
        case starting
        case executing
        /// `finish()` has claimed the operation and is sending the `isFinished` notifications.
        case finishing
        case finished
    }

    private let lock = NSLock()
    private var state = State.pending
    /// `finish()` arrived before `start()` had made the operation executing; `start()` finishes instead of executing.
    private var finishRequested = false
    private var cancelRequested = false

    /// Creates a pending operation.
    public override init() {
        super.init()
    }

    /// Runs `body` while holding the operation's lock, which guards all of its state and its subclasses'.
    /// Do not read `isExecuting`, `isFinished` or `isCancelled`, or call `finish()`, inside `body`: the lock is not recursive.
    @inline(__always)
    final func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Always `true`.
    public final override var isAsynchronous: Bool { true }

    /// `true` from the end of `start()` until `finish()` completes.
    public final override var isExecuting: Bool {
        withLock { state == .executing || state == .finishing }
    }

    /// `true` once `finish()` has completed.
    public final override var isFinished: Bool {
        withLock { state == .finished }
    }

    /// Makes the operation executing and calls ``execute()``, or finishes at once if ``finish()`` was
    /// already called (for example by a cancellation before start). Later calls do nothing.
    public final override func start() {
        let claimed: Bool = withLock {
            guard state == .pending else { return false }
            state = .starting
            return true
        }
        guard claimed else { return }

        willChangeValue(forKey: "isExecuting")
        let finishAtOnce: Bool = withLock {
            state = .executing
            return finishRequested
        }
        didChangeValue(forKey: "isExecuting")

        if finishAtOnce {
            finish()
        } else {
            execute()
        }
    }

    /// Begins the operation's work. Called once, from `start()`, unless the operation finished first; also
    /// when it was cancelled before its queue started it, so check `isCancelled` and finish early.
    /// The default finishes at once.
    open func execute() {
        finish()
    }

    /// Marks the operation finished. Idempotent. Before `start()` it only records the request,
    /// because an `Operation` must not report finished before its queue has started it.
    public final func finish() {
        let claimed: Bool = withLock {
            if state == .pending || state == .starting { finishRequested = true }
            guard state == .executing else { return false }
            state = .finishing
            return true
        }
        guard claimed else { return }

        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        withLock { state = .finished }
        didChangeValue(forKey: "isFinished")
        didChangeValue(forKey: "isExecuting")
    }

    /// `true` once `cancel()` has been called on an operation that had not finished.
    public final override var isCancelled: Bool {
        withLock { cancelRequested }
    }

    /// Cancels the operation, once, unless it has already produced its outcome (then nothing happens and
    /// `isCancelled` stays `false`). Calls ``willCancel()``, then `Operation.cancel()`.
    ///
    /// Two Linux facts shape this. `Operation.cancel()` makes a waiting operation ready and lets its queue
    /// start it at once, on another thread, so the cancellation is claimed and handled first. And each
    /// unfinished dependency keeps an *unretained* pointer to this operation, which `Operation.cancel()` lets
    /// finish (and be freed) before them, so this operation first removes those dependencies; `dependencies`
    /// then lists only the finished ones.
    public final override func cancel() {
        let isFirstCancel: Bool = withLock {
            guard !cancelRequested, state != .finishing, state != .finished, claimCancellation() else { return false }
            cancelRequested = true
            return true
        }
        guard isFirstCancel else { return }
        willCancel()
        for dependency in dependencies where !dependency.isFinished {
            removeDependency(dependency)
        }
        super.cancel()
    }

    /// Called under the lock by the first `cancel()`: returns `false` if it is too late to cancel.
    func claimCancellation() -> Bool {
        true
    }

    /// Called once, by the first effective `cancel()`, on the cancelling thread, before the queue learns of
    /// the cancellation. Stop the work here. The default does nothing.
    open func willCancel() {}
}
