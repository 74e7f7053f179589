import Foundation

extension OperationQueue {
    /// The typed operation of the oldest request of type `T` with `identifier` that this queue has not
    /// completed yet, or `nil`. O(1). Observe its result with ``RequestOperation/whenFinished(on:_:)``:
    ///
    /// ```swift
    /// queue.requestOperation(RecipeRequest.self, identifier: "1")?.whenFinished { result in … }
    /// ```
    public func requestOperation<T: DataRequest>(_ type: T.Type, identifier: String) -> RequestOperation<T.Success, T.Failure>? {
        RequestRegistry.shared.first(for: RequestRegistry.Key(queue: self, identifier: identifier), requestType: type)
            as? RequestOperation<T.Success, T.Failure>
    }

    /// Cancels every request with `identifier`, of any type, that this queue has not completed yet. O(1).
    public func cancelRequests(identifier: String) {
        RequestRegistry.shared.operations(for: RequestRegistry.Key(queue: self, identifier: identifier)).forEach { $0.cancel() }
    }

    /// `true` when no request with `identifier` added to this queue is still waiting or running, that is,
    /// every one has completed (or there never was one). O(1).
    public func isRequestFinished(identifier: String) -> Bool {
        !RequestRegistry.shared.contains(RequestRegistry.Key(queue: self, identifier: identifier))
    }
}
