import Foundation

/// A request's ``RequestOperation/progress`` at one moment, as a value that can cross to any task.
public struct ProgressSnapshot: Sendable, Hashable {
    /// Units done: bytes for a download or an upload, one unit per request for a batch, `0` or `1` otherwise.
    public let completedUnitCount: Int64
    /// Units expected; never `0`.
    public let totalUnitCount: Int64

    /// Creates a snapshot.
    public init(completedUnitCount: Int64, totalUnitCount: Int64) {
        self.completedUnitCount = completedUnitCount
        self.totalUnitCount = totalUnitCount
    }

    /// `completedUnitCount / totalUnitCount`, from 0 to 1.
    public var fractionCompleted: Double {
        totalUnitCount > 0 ? min(1, Double(completedUnitCount) / Double(totalUnitCount)) : 0
    }
}

extension RequestOperation {
    /// The operation's progress as it moves, for `for await`: the current value first, then each change, never
    /// backwards. A slow reader gets the latest value, not every one. The sequence ends once the completion handler
    /// has returned (at once if it already has); a success ends on a complete snapshot, a failure or a cancellation
    /// where the progress stopped. Ending the loop, or cancelling its task, stops the observation and nothing else:
    /// cancel the operation to cancel the request.
    ///
    /// ```swift
    /// let operation = queue.addRequest(download) { _ in }
    /// for await progress in operation.progressUpdates {
    ///     bar.value = progress.fractionCompleted
    /// }
    /// ```
    public var progressUpdates: AsyncStream<ProgressSnapshot> {
        let progress = self.progress
        let (stream, continuation) = AsyncStream.makeStream(of: ProgressSnapshot.self, bufferingPolicy: .bufferingNewest(1))
        let registration: Int? = withLock {
            let current = ProgressSnapshot(completedUnitCount: progress.completedUnitCount, totalUnitCount: progress.totalUnitCount)
            continuation.yield(current)
            guard !hasDeliveredUnderLock else { return nil }
            let watchers = progressWatchers ?? ProgressWatchers(last: current)
            progressWatchers = watchers
            return watchers.add(continuation)
        }
        guard let registration else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.withLock { self?.progressWatchers?.remove(registration) }
        }
        return stream
    }
}

/// The readers of one operation's ``RequestOperation/progressUpdates``. Guarded by the operation's lock; yielding
/// under it keeps the snapshots in order (a yield only enqueues: it runs no reader code).
final class ProgressWatchers {
    private var continuations: [Int: AsyncStream<ProgressSnapshot>.Continuation] = [:]
    private var nextID = 0
    private var last: ProgressSnapshot

    init(last: ProgressSnapshot) {
        self.last = last
    }

    func add(_ continuation: AsyncStream<ProgressSnapshot>.Continuation) -> Int {
        nextID += 1
        continuations[nextID] = continuation
        return nextID
    }

    func remove(_ id: Int) {
        continuations[id] = nil
    }

    /// Hands `snapshot` on, unless it would move backwards (two threads reporting at once) or repeats the last.
    func yield(_ snapshot: ProgressSnapshot) {
        guard snapshot.completedUnitCount >= last.completedUnitCount, snapshot != last else { return }
        last = snapshot
        continuations.values.forEach { $0.yield(snapshot) }
    }

    func finish() {
        continuations.values.forEach { $0.finish() }
        continuations = [:]
    }
}
