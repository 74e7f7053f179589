import Foundation

extension RequestOperation {
    /// Runs `body` on `queue` (the main queue by default) once this operation has finished, with its result.
    /// Returns the step, so that it can be cancelled or depended on.
    ///
    /// ```swift
    /// profile.whenFinished { result in nameLabel.text = try? result.get().name }
    /// ```
    @discardableResult
    public func whenFinished(
        on queue: OperationQueue = .main,
        _ body: @escaping (Result<Success, Failure>) -> Void
    ) -> Operation {
        ResultStepOperation.add(to: queue, after: [self]) {
            guard let result = self.result else { return }
            body(result)
        }
    }

    /// Runs `body` on `queue` (the main queue by default) once this operation and `other` have finished,
    /// with both results.
    @discardableResult
    public func whenFinished<OtherSuccess, OtherFailure>(
        with other: RequestOperation<OtherSuccess, OtherFailure>,
        on queue: OperationQueue = .main,
        _ body: @escaping (Result<Success, Failure>, Result<OtherSuccess, OtherFailure>) -> Void
    ) -> Operation {
        ResultStepOperation.add(to: queue, after: [self, other]) {
            guard let result = self.result, let otherResult = other.result else { return }
            body(result, otherResult)
        }
    }

    /// Runs `body` on `queue` (the main queue by default) once this operation, `second` and `third` have
    /// finished, with their three results.
    @discardableResult
    public func whenFinished<S2, F2, S3, F3>(
        with second: RequestOperation<S2, F2>,
        _ third: RequestOperation<S3, F3>,
        on queue: OperationQueue = .main,
        _ body: @escaping (Result<Success, Failure>, Result<S2, F2>, Result<S3, F3>) -> Void
    ) -> Operation {
        ResultStepOperation.add(to: queue, after: [self, second, third]) {
            guard let result = self.result, let secondResult = second.result, let thirdResult = third.result else { return }
            body(result, secondResult, thirdResult)
        }
    }
}

/// A step that runs a block after other operations. Unlike `BlockOperation`, it accepts a non-Sendable block,
/// which it releases once run, and as an ``AsyncOperation`` it detaches safely from its dependencies when cancelled.
final class ResultStepOperation: AsyncOperation, @unchecked Sendable {
    // Guarded by the lock of `AsyncOperation`.
    private var body: (() -> Void)?

    private init(body: @escaping () -> Void) {
        self.body = body
    }

    static func add(to queue: OperationQueue, after operations: [Operation], body: @escaping () -> Void) -> Operation {
        let step = ResultStepOperation(body: body)
        operations.forEach(step.addDependency)
        queue.addOperation(step)
        return step
    }

    override func execute() {
        let body = withLock { () -> (() -> Void)? in
            defer { self.body = nil }
            return self.body
        }
        if !isCancelled { body?() }
        finish()
    }

    override func willCancel() {
        withLock { body = nil }
    }
}
