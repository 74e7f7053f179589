#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``DataRequest``: the engine (``NetworkRequestOperation``) with the body kept in memory, up to the
/// ``TransferLimits/maximumBodySize``, and interpreted as the request's kind says: JSON with the empty-body rules for a
/// ``DecodableRequest``, text for a ``TextRequest``, ``DataRequest/processResponse(_:response:)`` otherwise. With a
/// ``ResponseCache`` in its policies, a stored response may answer it instead of the network, or after a `304`.
///
/// The subclasses name the kinds (``DecodableRequestOperation``, ``NoContentRequestOperation``,
/// ``UploadRequestOperation``, ``DownloadRequestOperation``); what they do comes from their parts, so an upload that
/// is also a ``DecodableRequest`` gets the empty-body rules like any decodable request.
public class DataRequestOperation<R: DataRequest>: NetworkRequestOperation<R>, @unchecked Sendable {
    /// Creates an operation for `request`; it does nothing until started, usually by an `OperationQueue`.
    /// `addRequest` and the other ways of adding a request give it the queue's ``RequestPolicies``; a plain
    /// `addOperation` does not. Keep a reference to an operation you start yourself until it finishes.
    public override init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: R.CompletionType? = nil
    ) {
        super.init(request: request, session: session, completionQueue: completionQueue, completion: completion, interpreter: .forKind(of: request))
    }
}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON, or is empty
/// (see ``DecodableRequest``).
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}
