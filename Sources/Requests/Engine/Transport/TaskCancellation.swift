#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Cancels `task` a moment later, unless it has completed by then.
///
/// `URLSessionTask.cancel()` waits for the session's internal queue (about a millisecond on Linux), so it runs
/// on a global queue: `cancelAllOperations()` over thousands of requests would otherwise crawl, and the queue
/// would start (and send) the requests it had not reached yet. And on Linux, cancelling a task while it
/// fails or finishes crashes Foundation (`TaskRegistry.swift:118`, "a behaviour for a task that is not in the
/// registry"; 2 of 2 soak runs of 100,000 requests with 5 % cancellations and 1 % server faults crashed before
/// this wait). A task in that state completes within milliseconds, and `cancel()` ignores a completed task, so
/// waiting 50 ms leaves the race only to tasks that begin to fail in the instant of the cancellation. The cost:
/// a cancelled task goes on for 50 ms (a short upload may finish meanwhile). On Apple platforms the task is
/// cancelled at once (on a global queue still), so that a cancelled request is not sent.
func cancelSoon(_ task: URLSessionTask) {
    #if canImport(FoundationNetworking)
    DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) {
        guard !PendingRedirects.deferCancel(of: task) else { return }
        task.cancel()
    }
    #else
    DispatchQueue.global().async {
        task.cancel()
    }
    #endif
}

#if canImport(FoundationNetworking)
/// The tasks whose redirect is being ruled on. Foundation on Linux crashes when a task is cancelled while it waits
/// for the answer to a redirect and the answer comes after ("Received callback for HTTP redirection, but we're not
/// waiting for it"), and a ruling may take its time (a custom policy, the monitors). So a cancel meanwhile is held
/// back, and made once the answer has been handed over: Foundation queues the answer on the task's work queue,
/// ahead of the cancel.
enum PendingRedirects {
    private static let lock = NSLock()
    /// Per task: whether a cancel was held back.
    nonisolated(unsafe) private static var rulings: [ObjectIdentifier: Bool] = [:]

    static func begin(_ task: URLSessionTask) {
        lock.withLock { rulings[ObjectIdentifier(task)] = false }
    }

    /// Call after the answer has been handed to Foundation.
    static func end(_ task: URLSessionTask) {
        let cancelWanted = lock.withLock { rulings.removeValue(forKey: ObjectIdentifier(task)) ?? false }
        if cancelWanted { cancelSoon(task) }
    }

    /// Whether `task` is waiting for a ruling; if so, it is cancelled when the ruling ends.
    static func deferCancel(of task: URLSessionTask) -> Bool {
        lock.withLock {
            guard rulings[ObjectIdentifier(task)] != nil else { return false }
            rulings[ObjectIdentifier(task)] = true
            return true
        }
    }
}
#endif
