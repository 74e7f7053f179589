#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Something that runs requests. `OperationQueue` conforms.
public protocol RequestQueue {
    /// Runs `request` on `URLSession.shared`; see ``addRequest(_:session:completionQueue:completion:)``.
    @discardableResult
    func addRequest<T: DataRequest>(_ request: T, completion: T.CompletionType?) -> Operation

    /// Runs `request` on `session`; see ``addRequest(_:session:completionQueue:completion:)``.
    @discardableResult
    func addRequest<T: DataRequest>(_ request: T, session: URLSession, completion: T.CompletionType?) -> Operation

    /// Runs `request` on `session` and calls `completion` exactly once, on `completionQueue` when given.
    /// Returns the operation, so that other operations can depend on it; it is a ``RequestOperation``
    /// whose `result` holds the typed result once it has one.
    @discardableResult
    func addRequest<T: DataRequest>(
        _ request: T,
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: T.CompletionType?
    ) -> Operation

    /// The operation running a request of the same type and identifier, if one has not completed yet. O(1).
    func requestCurrentlyExecuting<T: Request>(_ request: T) -> Operation?
}

extension RequestQueue {
    /// Runs `request` on `URLSession.shared`, calling `completion` on the default completion queue.
    @discardableResult
    public func addRequest<T: DataRequest>(_ request: T, completion: T.CompletionType?) -> Operation {
        addRequest(request, session: .shared, completionQueue: nil, completion: completion)
    }

    /// Runs `request` on `session`, calling `completion` on the default completion queue.
    @discardableResult
    public func addRequest<T: DataRequest>(_ request: T, session: URLSession, completion: T.CompletionType?) -> Operation {
        addRequest(request, session: session, completionQueue: nil, completion: completion)
    }
}

extension OperationQueue: RequestQueue {
    /// Runs `request` on `session` as an operation of this queue, and returns its typed operation.
    ///
    /// `completion` runs on `completionQueue`; when that is `nil`, on this queue's `underlyingQueue` if set
    /// (captured now and retained by the operation, because `OperationQueue` holds it unowned); otherwise on
    /// the thread that produced the outcome (see ``RequestOperation/completionQueue``).
    ///
    /// The returned ``RequestOperation`` is an `Operation` that others can depend on, and its
    /// ``RequestOperation/result`` is typed. Every form of `addRequest` on an `OperationQueue` resolves here.
    @discardableResult
    public func addRequest<T: DataRequest>(
        _ request: T,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: T.CompletionType? = nil
    ) -> RequestOperation<T.Success, T.Failure> {
        addRequest(request, session: session, completionQueue: completionQueue, dependencies: [], completion: completion)
    }

    /// Adds `request` after `dependencies`; they are added before the operation reaches the queue.
    func addRequest<T: DataRequest>(
        _ request: T,
        session: URLSession,
        completionQueue: DispatchQueue?,
        dependencies: [Operation],
        completion: T.CompletionType?
    ) -> RequestOperation<T.Success, T.Failure> {
        let operation = request.makeOperation(
            session: session,
            completionQueue: completionQueue ?? underlyingQueue,
            completion: completion
        )
        dependencies.forEach(operation.addDependency)
        let key = RequestRegistry.Key(queue: self, request: request)
        operation.withLock { operation.registryKey = key }
        RequestRegistry.shared.add(operation, for: key)
        addOperation(operation)
        return operation
    }

    /// The ``RequestQueue`` requirement: the typed `addRequest` above, returned as an `Operation`.
    /// Disfavoured so that calls on an `OperationQueue` get the typed operation.
    @_disfavoredOverload
    @discardableResult
    public func addRequest<T: DataRequest>(
        _ request: T,
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: T.CompletionType?
    ) -> Operation {
        let operation: RequestOperation<T.Success, T.Failure> = addRequest(
            request, session: session, completionQueue: completionQueue, completion: completion)
        return operation
    }

    /// The oldest operation of this queue running a request of the same type and identifier that has not
    /// completed yet. O(1): a table kept by `addRequest`, not a scan of `operations`.
    public func requestCurrentlyExecuting<T: Request>(_ request: T) -> Operation? {
        RequestRegistry.shared.first(for: RequestRegistry.Key(queue: self, request: request))
    }
}

/// The operations each queue is running, by request type and identifier, from `addRequest` until they complete.
final class RequestRegistry: @unchecked Sendable {
    struct Key: Hashable {
        let queue: ObjectIdentifier
        let requestType: ObjectIdentifier
        let identifier: String

        init<T: Request>(queue: OperationQueue, request: T) {
            self.queue = ObjectIdentifier(queue)
            self.requestType = ObjectIdentifier(T.self)
            self.identifier = request.identifier
        }
    }

    static let shared = RequestRegistry()

    private let lock = NSLock()
    private var operations: [Key: [Operation]] = [:]

    func add(_ operation: Operation, for key: Key) {
        lock.lock()
        defer { lock.unlock() }
        operations[key, default: []].append(operation)
    }

    func remove(_ operation: Operation, for key: Key) {
        lock.lock()
        defer { lock.unlock() }
        guard var list = operations[key] else { return }
        list.removeAll { $0 === operation }
        operations[key] = list.isEmpty ? nil : list
    }

    func first(for key: Key) -> Operation? {
        lock.lock()
        defer { lock.unlock() }
        return operations[key]?.first
    }
}
