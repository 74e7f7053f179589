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
        let operation = makeOperation(for: request, session: session, completionQueue: completionQueue, completion: completion)
        dependencies.forEach(operation.addDependency)
        addOperation(operation)
        return operation
    }

    /// Creates the operation for `request` and registers it for lookup by identifier; the caller queues it.
    package func makeOperation<T: DataRequest>(
        for request: T,
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: T.CompletionType?
    ) -> RequestOperation<T.Success, T.Failure> {
        let operation = request.makeOperation(
            session: session,
            completionQueue: completionQueue ?? underlyingQueue,
            completion: completion
        )
        register(operation, for: request)
        return operation
    }

    /// Gives `operation` this queue's policies and registers it for lookup by `request`'s identifier.
    func register<T: NetworkRequest>(_ operation: RequestOperation<T.Success, T.Failure>, for request: T) {
        operation.adopt(requestPolicyBox)
        // The key is set before the operation becomes reachable through the registry, so that whoever
        // completes it (for example cancelRequests(identifier:)) also removes it.
        let key = RequestRegistry.Key(queue: self, identifier: request.identifier)
        let observers = QueueResultObservers.observers(of: self)
        operation.withLock {
            operation.registryKey = key
            operation.resultObservers = observers
        }
        RequestRegistry.shared.add(operation, requestType: T.self, for: key)
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
        addRequest(request, session: session, completionQueue: completionQueue, dependencies: [], completion: completion)
    }

    /// The oldest operation of this queue running a request of the same type and identifier that has not
    /// completed yet. O(1): a table kept by `addRequest`, not a scan of `operations`.
    public func requestCurrentlyExecuting<T: Request>(_ request: T) -> Operation? {
        RequestRegistry.shared.first(for: RequestRegistry.Key(queue: self, identifier: request.identifier), requestType: T.self)
    }
}

/// The request operations each queue is running, by identifier, from `addRequest` until their
/// completion is scheduled. Keyed by queue and identifier, then by request type: adding, removing and
/// finding the oldest are O(1) (amortised).
final class RequestRegistry: @unchecked Sendable {
    struct Key: Hashable {
        let queue: ObjectIdentifier
        let identifier: String
        /// Computed once: every request's key is hashed when it is added and again when it is removed.
        private let hashed: Int

        init(queue: ObjectIdentifier, identifier: String) {
            self.queue = queue
            self.identifier = identifier
            var hasher = Hasher()
            hasher.combine(queue)
            hasher.combine(identifier)
            hashed = hasher.finalize()
        }

        static func == (lhs: Key, rhs: Key) -> Bool {
            lhs.hashed == rhs.hashed && lhs.queue == rhs.queue && lhs.identifier == rhs.identifier
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(hashed)
        }
    }

    /// The operations of one request type under one key: O(1) insert and remove, oldest first.
    private struct Bucket {
        private var order: [(sequence: Int, id: ObjectIdentifier)] = []
        private var head = 0
        private var live: [ObjectIdentifier: (sequence: Int, operation: Operation)] = [:]

        var isEmpty: Bool { live.isEmpty }
        var operations: [Operation] { live.values.sorted { $0.sequence < $1.sequence }.map(\.operation) }

        mutating func append(_ operation: Operation, sequence: Int) {
            order.append((sequence, ObjectIdentifier(operation)))
            live[ObjectIdentifier(operation)] = (sequence, operation)
        }

        mutating func remove(_ operation: Operation) {
            live[ObjectIdentifier(operation)] = nil
            // While the oldest entry stays live, `first()` cannot drop the removed ones behind it.
            if order.count - head > 2 * live.count + 32 {
                order = live.map { (sequence: $0.value.sequence, id: $0.key) }.sorted { $0.sequence < $1.sequence }
                head = 0
            }
        }

        /// Skips removed entries at the front (amortised O(1)) and returns the oldest live one.
        mutating func first() -> Operation? {
            while head < order.count, live[order[head].id]?.sequence != order[head].sequence {
                head += 1
            }
            if head > 32, head * 2 > order.count {
                order.removeFirst(head)
                head = 0
            }
            return head < order.count ? live[order[head].id]?.operation : nil
        }
    }

    /// What is registered under one key: almost always a single operation, held without the buckets' allocations.
    private enum Slot {
        case one(type: ObjectIdentifier, operation: Operation)
        case many([ObjectIdentifier: Bucket])
    }

    static let shared = RequestRegistry()

    private let lock = NSLock()
    private var slots: [Key: Slot] = [:]
    private var nextSequence = 0

    func add<T>(_ operation: Operation, requestType: T.Type, for key: Key) {
        lock.lock()
        defer { lock.unlock() }
        let type = ObjectIdentifier(requestType)
        // One hashed step for the usual case, a key nobody else holds. Otherwise the old slot goes back, and is
        // released here (a second reference would make the buckets below copy themselves whole on each change).
        do {
            guard let existing = slots.updateValue(.one(type: type, operation: operation), forKey: key) else { return }
            slots[key] = existing
        }
        var byType: [ObjectIdentifier: Bucket]
        switch slots[key] {
        case nil:
            slots[key] = .one(type: type, operation: operation)
            return
        case let .one(firstType, first)?:
            // The single operation was the oldest: it goes first.
            nextSequence += 1
            byType = [firstType: Bucket()]
            byType[firstType]?.append(first, sequence: nextSequence)
        case .many?:
            byType = takeBuckets(for: key) ?? [:]
        }
        nextSequence += 1
        byType[type, default: Bucket()].append(operation, sequence: nextSequence)
        slots[key] = .many(byType)
    }

    func remove(_ operation: Operation, for key: Key) {
        lock.lock()
        defer { lock.unlock() }
        // One hashed step for the usual case, the slot holding only `operation`; otherwise it goes back first.
        do {
            guard let taken = slots.removeValue(forKey: key) else { return }
            if case let .one(_, registered) = taken, registered === operation { return }
            slots[key] = taken
        }
        switch slots[key] {
        case nil:
            return
        case let .one(_, registered)?:
            if registered === operation { slots[key] = nil }
        case .many?:
            guard var byType = takeBuckets(for: key) else { return }
            for type in Array(byType.keys) {
                byType[type]?.remove(operation)
                if byType[type]?.isEmpty == true { byType[type] = nil }
            }
            if !byType.isEmpty { slots[key] = .many(byType) }
        }
    }

    /// The oldest operation for `key` of `requestType`.
    func first<T>(for key: Key, requestType: T.Type) -> Operation? {
        lock.lock()
        defer { lock.unlock() }
        let type = ObjectIdentifier(requestType)
        switch slots[key] {
        case nil:
            return nil
        case let .one(registeredType, operation)?:
            return registeredType == type ? operation : nil
        case .many?:
            guard var byType = takeBuckets(for: key) else { return nil }
            defer { slots[key] = .many(byType) }
            return byType[type]?.first()
        }
    }

    /// Takes the buckets out of `slots`, so that they are the only reference while they change: a bucket shared
    /// with a copy would be copied whole on each change (with 100,000 requests under one identifier, minutes).
    /// Must be called under the lock; put them back after.
    private func takeBuckets(for key: Key) -> [ObjectIdentifier: Bucket]? {
        guard case let .many(byType)? = slots.removeValue(forKey: key) else { return nil }
        return byType
    }

    /// Every operation for `key`, of any type.
    func operations(for key: Key) -> [Operation] {
        lock.withLock {
            switch slots[key] {
            case nil: return []
            case let .one(_, operation): return [operation]
            case let .many(byType)?: return byType.values.flatMap { $0.operations }
            }
        }
    }

    /// Whether any operation is registered for `key`.
    func contains(_ key: Key) -> Bool {
        lock.withLock { slots[key] != nil }
    }
}

extension RequestRegistry.Key {
    init(queue: OperationQueue, identifier: String) {
        self.init(queue: ObjectIdentifier(queue), identifier: identifier)
    }
}
