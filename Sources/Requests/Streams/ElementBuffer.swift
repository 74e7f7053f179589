import Foundation

/// The elements of a stream read with `for try await`, waiting for their consumer: the pump stops while ``capacity``
/// of them wait (the bytes behind them then wait in the operation) and goes on when the consumer takes one (``onRoom``).
/// Then the outcome: the end, or the failure, thrown after the elements before it (at once to a cancelled consumer).
final class ElementBuffer<Element: Sendable>: @unchecked Sendable {
    /// How many elements may wait for the consumer.
    static var capacity: Int { 64 }

    private let lock = NSLock()
    private var elements: [Element] = []
    private var head = 0
    private var outcome: Result<Void, Error>?
    private var waiter: CheckedContinuation<Element?, Error>?
    /// Called when the consumer has taken an element and there is room. Set before the operation starts.
    var onRoom: (@Sendable () -> Void)?

    /// How many elements the storage holds, taken ones not yet dropped included (tests).
    var storedCount: Int {
        lock.withLock { elements.count }
    }

    /// Whether ``capacity`` elements wait.
    var isFull: Bool {
        lock.withLock { elements.count - head >= Self.capacity }
    }

    /// Hands `element` to a waiting consumer, or keeps it.
    func push(_ element: Element) {
        let waiter: CheckedContinuation<Element?, Error>? = lock.withLock {
            guard let waiter = self.waiter else {
                elements.append(element)
                return nil
            }
            self.waiter = nil
            return waiter
        }
        waiter?.resume(returning: element)
    }

    /// Ends the stream with `outcome`, after the elements that wait. Later calls are ignored.
    func finish(_ outcome: Result<Void, Error>) {
        let waiter: CheckedContinuation<Element?, Error>? = lock.withLock {
            guard self.outcome == nil else { return nil }
            self.outcome = outcome
            defer { self.waiter = nil }
            return self.waiter
        }
        if let waiter { deliver(outcome, to: waiter) }
    }

    /// The next element, or `nil` after the end; throws the failure once, then returns `nil`.
    func next() async throws -> Element? {
        let isCancelled = Task.isCancelled
        return try await withCheckedThrowingContinuation { continuation in
            lock.lock()
            if isCancelled {
                elements.removeAll()
                head = 0
            }
            if waiter != nil {
                // Two loops over one stream: the second is told so, rather than left waiting.
                lock.unlock()
                continuation.resume(throwing: RequestQueueError.misuse("a stream's elements are read by one loop at a time"))
            } else if head < elements.count {
                let element = elements[head]
                head += 1
                // Taken elements are dropped once they are half the array, so that a consumer that is always a little
                // behind does not keep every element it has read.
                if head == elements.count {
                    elements.removeAll(keepingCapacity: true)
                    head = 0
                } else if head >= Self.capacity, head * 2 >= elements.count {
                    elements.removeFirst(head)
                    head = 0
                }
                let onRoom = self.onRoom
                lock.unlock()
                continuation.resume(returning: element)
                onRoom?()
            } else if let outcome {
                self.outcome = .success(())
                lock.unlock()
                deliver(outcome, to: continuation)
            } else {
                waiter = continuation
                lock.unlock()
            }
        }
    }

    private func deliver(_ outcome: Result<Void, Error>, to continuation: CheckedContinuation<Element?, Error>) {
        switch outcome {
        case .success: continuation.resume(returning: nil)
        case let .failure(error): continuation.resume(throwing: error)
        }
    }
}
