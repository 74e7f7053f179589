#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Every `URLSessionTask.cancel()` Requests makes goes through here, so that these rules hold in one place:
///
/// - **One at a time per task.** On Linux, two `cancel()` calls on one task that overlap (an operation's and its
///   sink's, from two threads) let the task complete between the first call and the block that call queued on
///   Foundation's work queue; that block then crashes the process (`TaskRegistry.swift:118`; docs/reliability.md,
///   "The cancel storm"). So a task has at most one cancel in flight: one asked for meanwhile is dropped (the one in
///   flight covers it); one asked for after it returned is made (Linux ignores a cancel that comes too early).
/// - **Never inside a session callback**, which on Linux runs on the session's work queue that `cancel()` waits for
///   (a deadlock): always from a global queue.
/// - **Not while a redirect is ruled on** (Linux): Foundation crashes when a task is cancelled while it waits for the
///   answer to a redirect and the answer comes after, and a ruling may take its time (a custom policy, the
///   monitors). A cancel meanwhile is made once the answer has been handed over, which Foundation queues first.
/// - **On Linux, 50 ms late**: a task completing meanwhile has completed by then, and `cancel()` ignores it. The
///   operation itself completes at once; the cost is a transfer that goes on for 50 ms. On Apple platforms, at once.
enum TaskCancellation {
    #if canImport(FoundationNetworking)
    static let delay: TimeInterval = 0.05
    #else
    static let delay: TimeInterval = 0
    #endif

    /// What is going on with a task: a cancel scheduled or running, a redirect ruling, a cancel held back for it.
    private struct State {
        var cancelInFlight = false
        var isRuling = false
        var cancelWanted = false
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var states: [ObjectIdentifier: State] = [:]
    nonisolated(unsafe) private static var covered = 0

    /// How many cancels were dropped because one of the same task was in flight (for the tests).
    static var coveredCancels: Int { lock.withLock { covered } }

    /// Whether anything is going on with `task`: a cancel in flight, a ruling (for the tests).
    static func isBusy(_ task: any CancellableTask) -> Bool {
        lock.withLock { states[ObjectIdentifier(task)] != nil }
    }

    /// Cancels `task` from a global queue after `delay`, unless a cancel of it is in flight already.
    static func cancel(_ task: any CancellableTask, after delay: TimeInterval = delay) {
        let scheduled = update(task) { state in
            guard !state.isRuling else {
                state.cancelWanted = true
                return false
            }
            guard !state.cancelInFlight else {
                covered += 1
                return false
            }
            state.cancelInFlight = true
            return true
        }
        guard scheduled else { return }
        // Kept alive until it is cancelled; its own methods are thread-safe.
        nonisolated(unsafe) let task = task
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
            let now = update(task) { state in
                // A ruling that began meanwhile holds the cancel back until it ends.
                state.cancelWanted = state.isRuling
                state.cancelInFlight = !state.isRuling
                return !state.isRuling
            }
            guard now else { return }
            task.cancel()
            update(task) { $0.cancelInFlight = false }
        }
    }

    /// Call before a redirect of `task` is handed to its ruling (off the session's work queue).
    static func beginRedirectRuling(of task: any CancellableTask) {
        update(task) { $0.isRuling = true }
    }

    /// Call once the ruling's answer has been handed to Foundation: a cancel held back meanwhile is made now.
    static func endRedirectRuling(of task: any CancellableTask) {
        let wanted = update(task) { state in
            defer { (state.isRuling, state.cancelWanted) = (false, false) }
            return state.cancelWanted
        }
        if wanted { cancel(task) }
    }

    /// Changes `task`'s state under the lock; a state with nothing going on is dropped.
    @discardableResult
    private static func update<T>(_ task: any CancellableTask, _ change: (inout State) -> T) -> T {
        let id = ObjectIdentifier(task)
        return lock.withLock {
            var state = states[id] ?? State()
            let result = change(&state)
            states[id] = state.cancelInFlight || state.isRuling || state.cancelWanted ? state : nil
            return result
        }
    }
}

/// What `TaskCancellation` cancels: a `URLSessionTask` (a stand-in in the tests).
protocol CancellableTask: AnyObject {
    func cancel()
}

extension URLSessionTask: CancellableTask {}
