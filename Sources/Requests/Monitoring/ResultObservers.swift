import Foundation

extension OperationQueue {
    /// Calls `handler` with the result of every request whose `Success` is `type` that completes on this queue:
    /// requests added with `addRequest` and the other `add…` methods of Requests (each request of a batch, a chained
    /// request, a shared call once), including failures and cancellations. It runs on `queue` (default: main),
    /// after the request's own completion handler has returned.
    ///
    /// The owner is held weakly and handed to `handler`, so the closure need not capture it: the observation stops
    /// when the owner is released, or when the returned ``ResultObservation`` is cancelled, whichever comes first.
    /// Dropping the observation does not stop it.
    ///
    /// ```swift
    /// queue.observeResults(of: LogInResponse.self, owner: self) { owner, result in
    ///     owner.showSession(result)
    /// }
    /// ```
    @discardableResult
    public func observeResults<Success, Owner: AnyObject>(
        of type: Success.Type,
        owner: Owner,
        on queue: DispatchQueue = .main,
        _ handler: @escaping (Owner, Result<Success, Error>) -> Void
    ) -> ResultObservation {
        let observers = QueueResultObservers.observers(of: self)
        let id = observers.add(
            ResultObserver(successType: ObjectIdentifier(type), owner: owner, queue: queue) { owner, result in
                guard let owner = owner as? Owner, let result = result as? Result<Success, Error> else { return }
                handler(owner, result)
            })
        return ResultObservation(observers: observers, id: id)
    }
}

/// An observation made with `OperationQueue.observeResults(of:owner:on:_:)`.
public final class ResultObservation: Sendable {
    private let observers: QueueResultObservers
    private let id: Int

    init(observers: QueueResultObservers, id: Int) {
        self.observers = observers
        self.id = id
    }

    /// Stops the observation: no call starts after this returns (one already running finishes).
    public func cancel() {
        observers.remove(id)
    }
}

/// One observer of a queue's results.
struct ResultObserver: @unchecked Sendable {
    let successType: ObjectIdentifier
    weak var owner: AnyObject?
    let queue: DispatchQueue
    /// Takes the owner and a `Result<Success, Error>`; user code, called on `queue` only.
    let handler: (AnyObject, Any) -> Void
}

/// The result observers of one queue. Every request operation the queue runs holds its queue's, so a request
/// completing on a queue that was freed meanwhile still finds the right observers.
final class QueueResultObservers: @unchecked Sendable {
    private static let tableLock = NSLock()
    /// Per queue, with the queue held weakly: an entry whose queue is gone is dropped when another queue's is made.
    nonisolated(unsafe) private static var table: [ObjectIdentifier: (queue: Weak, observers: QueueResultObservers)] = [:]

    struct Weak {
        weak var queue: OperationQueue?
    }

    /// The observers of `queue`, created on first use.
    static func observers(of queue: OperationQueue) -> QueueResultObservers {
        tableLock.withLock {
            if let entry = table[ObjectIdentifier(queue)], entry.queue.queue === queue {
                return entry.observers
            }
            table = table.filter { $0.value.queue.queue != nil }
            let observers = QueueResultObservers()
            table[ObjectIdentifier(queue)] = (Weak(queue: queue), observers)
            return observers
        }
    }

    private let lock = NSLock()
    private var observers: [Int: ResultObserver] = [:]
    private var nextID = 0

    func add(_ observer: ResultObserver) -> Int {
        lock.withLock {
            nextID += 1
            observers[nextID] = observer
            return nextID
        }
    }

    func remove(_ id: Int) {
        lock.withLock { observers[id] = nil }
    }

    /// Whether no observer is registered (then a result need not be handed over at all).
    var isEmpty: Bool {
        lock.withLock { observers.isEmpty }
    }

    /// Hands `result` to every live observer of `Success`, each on its queue.
    func deliver<Success, Failure>(_ result: Result<Success, Failure>) {
        let type = ObjectIdentifier(Success.self)
        let matching: [(Int, ResultObserver)] = lock.withLock {
            guard !observers.isEmpty else { return [] }
            observers = observers.filter { $0.value.owner != nil }
            return observers.filter { $0.value.successType == type }.map { ($0.key, $0.value) }
        }
        guard !matching.isEmpty else { return }
        let erased = ErasedResult(value: result.mapError { $0 as Error })
        for (id, observer) in matching {
            observer.queue.async {
                // Checked again here: the owner may be gone, or the observation cancelled, since the result came.
                guard self.lock.withLock({ self.observers[id] != nil }), let owner = observer.owner else { return }
                observer.handler(owner, erased.value)
            }
        }
    }
}

/// A result on its way to the observers' queues, read only there.
private struct ErasedResult: @unchecked Sendable {
    let value: Any
}
