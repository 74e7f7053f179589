#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Every `URLSessionTask.cancel()` Requests makes goes through here, so that these rules hold in one place.
///
/// Why a cancel can crash on Linux (docs/reliability.md, "The cancel storm"): `cancel()` marks the task "canceling"
/// inside a `sync` on the task's work queue and queues a block there that reports the cancellation, which looks the
/// task up in the session's registry. A natural completion reports itself (on Linux on the session's work queue: see
/// `CallbackQueue`), marks the task completed and queues its removal from the registry on that same serial queue. If
/// the cancel's block is queued by the time `cancel()` returns, it runs before that removal and finds the task
/// (FIFO). Two things let it be queued later, after the removal, and then it crashes the process
/// (`TaskRegistry.swift:118`): a second `sync` on the task's work queue waiting when `cancel()` ends (two overlapping
/// cancels: the first rule below), and a cache lookup still pending when `cancel()` runs, which parks the block until
/// the lookup answers from a background queue (closed by ``ImmediateLookupCache``, which answers at once).
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

extension TaskCancellation {
    /// The configuration of a session Requests derives from `configuration`: on Linux, its `URLCache` (if any) is
    /// wrapped in an ``ImmediateLookupCache``, so that no cancel's block waits for a cache lookup (see there).
    static func derived(from configuration: URLSessionConfiguration) -> URLSessionConfiguration {
        #if canImport(FoundationNetworking)
        // `URLSession.configuration` is the session's own object: changed on a copy only.
        guard let cache = configuration.urlCache, !(cache is ImmediateLookupCache),
            let derived = configuration.copy() as? URLSessionConfiguration
        else { return configuration }
        derived.urlCache = ImmediateLookupCache(cache)
        return derived
        #else
        return configuration
        #endif
    }
}

#if canImport(FoundationNetworking)
/// The `URLCache` of a session Requests derives on Linux: the caller's, except that a data task's lookup answers at
/// once, on the thread that asks, instead of from a background queue later.
///
/// Why (docs/reliability.md, "The cancel storm"): corelibs creates a data task's protocol object only when its cache
/// lookup answers, and the lookup starts at the first `resume()` or `cancel()`. A `cancel()` made while it is pending
/// parks the block that reports the cancellation beside `resume()`'s start block; the answer then queues both, one
/// after the other, from the background thread. If that thread is preempted between the two, the task starts,
/// completes and leaves the session's registry before the cancel's block is queued, and that block crashes the process
/// (`TaskRegistry.swift:118`). Answered at once, the lookup ends inside the `resume()` (or `cancel()`) that started it,
/// on the task's work queue, so a later `cancel()` finds the protocol and queues its block itself, ahead of any
/// completion's removal.
///
/// The lookup is the caller's cache's `cachedResponse(for:)` (what corelibs' `getCachedResponse(for:)` runs on the
/// background queue); it now runs on the session's work queue, as corelibs' own stores do. Everything else is passed
/// on to the caller's cache.
final class ImmediateLookupCache: URLCache, @unchecked Sendable {
    let cache: URLCache

    init(_ cache: URLCache) {
        self.cache = cache
        // Nothing is kept here. A path that cannot be a folder, so that this cache has none: corelibs' URLCache takes
        // the folder it is given for its own and evicts files from it.
        super.init(memoryCapacity: 0, diskCapacity: 0, diskPath: "/dev/null")
    }

    override func getCachedResponse(for dataTask: URLSessionDataTask, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void) {
        completionHandler(dataTask.currentRequest.flatMap(cache.cachedResponse(for:)))
    }

    override func cachedResponse(for request: URLRequest) -> CachedURLResponse? { cache.cachedResponse(for: request) }
    override func storeCachedResponse(_ cachedResponse: CachedURLResponse, for request: URLRequest) {
        cache.storeCachedResponse(cachedResponse, for: request)
    }
    override func storeCachedResponse(_ cachedResponse: CachedURLResponse, for dataTask: URLSessionDataTask) {
        cache.storeCachedResponse(cachedResponse, for: dataTask)
    }
    override func removeCachedResponse(for request: URLRequest) { cache.removeCachedResponse(for: request) }
    override func removeCachedResponse(for dataTask: URLSessionDataTask) { cache.removeCachedResponse(for: dataTask) }
    override func removeAllCachedResponses() { cache.removeAllCachedResponses() }
    override func removeCachedResponses(since date: Date) { cache.removeCachedResponses(since: date) }
    override var memoryCapacity: Int {
        get { cache.memoryCapacity }
        set { cache.memoryCapacity = newValue }
    }
    override var diskCapacity: Int {
        get { cache.diskCapacity }
        set { cache.diskCapacity = newValue }
    }
    override var currentMemoryUsage: Int { cache.currentMemoryUsage }
    override var currentDiskUsage: Int { cache.currentDiskUsage }
}
#endif

/// What `TaskCancellation` cancels: a `URLSessionTask` (a stand-in in the tests).
protocol CancellableTask: AnyObject {
    func cancel()
}

extension URLSessionTask: CancellableTask {}
