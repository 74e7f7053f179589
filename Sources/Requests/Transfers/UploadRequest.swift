#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What an upload sends.
public enum UploadBody: Sendable {
    /// Bytes in memory, sent with their `Content-Length`.
    case data(Data)
    /// A file, never read whole into memory, sent with its `Content-Length` (on Linux streamed from the file, which
    /// lets it be sent again whole on a fresh connection: see <doc:LinuxNotes>). A missing file fails with
    /// ``RequestBuildingError/unreadableFile(_:)``.
    case file(URL)
    /// A multipart form, built for each attempt: in memory when small, streamed from a temporary file when large.
    case multipart(MultipartFormData)
}

/// A request that uploads a body and turns the response into `Success` like any ``DataRequest`` of its kind: a
/// ``DecodableRequest`` upload decodes JSON (with the empty-body rules), a ``NoContentRequest`` upload expects no
/// body, a ``TextRequest`` upload decodes text. The body replaces any `httpBody` that `makeURLRequest` set. It runs as
/// an ``UploadRequestOperation``, with the bytes sent in ``RequestOperation/progress``.
public protocol UploadRequest: DataRequest {
    /// What to send, read for each attempt.
    var uploadBody: UploadBody { get }
}

extension UploadRequest {
    /// Creates an ``UploadRequestOperation``.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        UploadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind(isUpload: true))
    }
}

// Without these two, an upload that is also a decodable or no-content request would get that protocol's operation
// (the most specific default wins); its body and interpreter would be the same, but not its class.
extension UploadRequest where Self: DecodableRequest {
    /// Creates an ``UploadRequestOperation`` whose response is decoded as JSON.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        UploadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind(isUpload: true, isDecodable: true))
    }
}

extension UploadRequest where Self: NoContentRequest {
    /// Creates an ``UploadRequestOperation`` that expects no response body.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        UploadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind(isUpload: true))
    }
}

/// Runs an ``UploadRequest``: a ``DataRequestOperation`` whose task sends the request's ``UploadRequest/uploadBody``
/// and reports the bytes sent to ``RequestOperation/progress``; its response is interpreted as its kind says.
public final class UploadRequestOperation<R: UploadRequest>: DataRequestOperation<R>, @unchecked Sendable {}
