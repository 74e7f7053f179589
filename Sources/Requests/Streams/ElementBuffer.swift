import Foundation

/// The elements of a stream read with `for try await`, waiting for their consumer: the pump stops while the bytes
/// they were decoded from reach ``byteLimit`` (or ``maximumCount`` of them wait; the bytes behind them then wait in
/// the operation, as the consumer's lag) and goes on when the consumer takes one (``onRoom``). Then the outcome: the
/// end, or the failure, thrown after the elements before it (at once to a cancelled consumer).
final class ElementBuffer<Element: Sendable>: @unchecked Sendable {
    /// How many taken elements may stay in the storage before it is compacted.
    static var capacity: Int { 64 }
    /// The most elements that wait, whatever their bytes: tiny elements cost more than their bytes.
    static var maximumCount: Int { 65_536 }

    /// The bytes of waiting elements at which the buffer is full.
    let byteLimit: Int
    private let lock = NSLock()
    /// Each element with the bytes of the body it stands for (the first element of a chunk carries the chunk's).
    private var elements: [(element: Element, bytes: Int)] = []
    private var head = 0
    /// The bytes of the elements that wait: offered to the consumer and not taken yet.
    private var waitingBytes = 0
    private var outcome: Result<Void, Error>?
    private var waiter: CheckedContinuation<Element?, Error>?
    /// Called when the consumer has taken an element and there is room. Set before the operation starts.
    var onRoom: (@Sendable () -> Void)?

    /// A buffer that is full when its elements stand for `byteLimit` bytes (at least 1).
    init(byteLimit: Int = .max) {
        self.byteLimit = max(byteLimit, 1)
    }

    /// How many elements the storage holds, taken ones not yet dropped included (tests).
    var storedCount: Int {
        lock.withLock { elements.count }
    }

    /// Whether the waiting elements stand for ``byteLimit`` bytes, or ``maximumCount`` of them wait.
    var isFull: Bool {
        lock.withLock { waitingBytes >= byteLimit || elements.count - head >= Self.maximumCount }
    }

    /// The bytes of the elements offered to the consumer and not taken yet.
    var offeredBytes: Int {
        lock.withLock { waitingBytes }
    }

    /// Keeps `element`, which stands for `bytes` bytes of the body, for the consumer; ``flush()`` hands it to a
    /// waiting one. (Waking the consumer once per chunk, not per element: a wake-up can cost the pump its core.)
    func push(_ element: Element, bytes: Int = 0) {
        lock.withLock {
            elements.append((element, bytes))
            waitingBytes += bytes
        }
    }

    /// Hands the first element that waits to a waiting consumer.
    func flush() {
        lock.lock()
        guard let waiter, head < elements.count else {
            lock.unlock()
            return
        }
        self.waiter = nil
        let element = takeFirstUnderLock()
        lock.unlock()
        waiter.resume(returning: element)
    }

    /// Ends the stream with `outcome`, after the elements that wait. Later calls are ignored.
    func finish(_ outcome: Result<Void, Error>) {
        lock.lock()
        guard self.outcome == nil else {
            lock.unlock()
            return
        }
        self.outcome = outcome
        guard let waiter else {
            lock.unlock()
            return
        }
        self.waiter = nil
        if head < elements.count {
            let element = takeFirstUnderLock()
            lock.unlock()
            waiter.resume(returning: element)
        } else {
            // Given once; the next call returns `nil`.
            self.outcome = .success(())
            lock.unlock()
            deliver(outcome, to: waiter)
        }
    }

    /// Takes the first element that waits (there is one). Must be called under the lock.
    private func takeFirstUnderLock() -> Element {
        let (element, bytes) = elements[head]
        waitingBytes -= bytes
        head += 1
        // Taken elements are dropped once they are half the array, so that a consumer that is always a little behind
        // does not keep every element it has read.
        if head == elements.count {
            elements.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= Self.capacity, head * 2 >= elements.count {
            elements.removeFirst(head)
            head = 0
        }
        return element
    }

    /// The next element, or `nil` after the end; throws the failure once, then returns `nil`.
    func next() async throws -> Element? {
        let isCancelled = Task.isCancelled
        return try await withCheckedThrowingContinuation { continuation in
            lock.lock()
            if isCancelled {
                elements.removeAll()
                head = 0
                waitingBytes = 0
            }
            if waiter != nil {
                // Two loops over one stream: the second is told so, rather than left waiting.
                lock.unlock()
                continuation.resume(throwing: RequestQueueError.misuse("a stream's elements are read by one loop at a time"))
            } else if head < elements.count {
                let element = takeFirstUnderLock()
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
