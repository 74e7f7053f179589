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
    public convenience init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: R.CompletionType? = nil
    ) {
        self.init(request: request, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind(of: R.self))
    }

    /// Creates an operation whose parts come from `kind`: the interpreter, and whether the body is an upload and the
    /// response cache applies. The `makeOperation` defaults pass the kind they know statically.
    init(request: R, session: URLSession, completionQueue: DispatchQueue?, completion: R.CompletionType?, kind: RequestKind) {
        super.init(
            request: request, session: session, completionQueue: completionQueue, completion: completion,
            interpreter: kind.isDownload ? .download : .data(isDecodable: kind.isDecodable), isUpload: kind.isUpload,
            usesResponseCache: !kind.isUpload && !kind.isDownload)
    }
}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON, or is empty
/// (see ``DecodableRequest``).
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// What a data request's kind adds to its operation's parts, known statically where the `makeOperation` defaults
/// make the operation (`RequestKind(of:)` tests the type for an operation created directly).
struct RequestKind {
    var isUpload = false
    var isDownload = false
    var isDecodable = false
}

extension RequestKind {
    init<R: DataRequest>(of type: R.Type) {
        self.init(isUpload: R.self is any UploadRequest.Type, isDownload: R.self is any DownloadRequest.Type, isDecodable: R.self is any DecodableRequest.Type)
    }
}
