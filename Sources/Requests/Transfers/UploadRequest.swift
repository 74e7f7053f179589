#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What an upload sends.
public enum UploadBody: Sendable {
    /// Bytes in memory, sent with their `Content-Length`.
    case data(Data)
    /// A file, never read whole into memory. On Apple platforms it is uploaded from the file, with its
    /// `Content-Length`. On Linux it is streamed `Transfer-Encoding: chunked` (URLSession there cannot send a stream
    /// with a length; its upload-from-file path can, but crashes Foundation when the upload is cancelled). A missing
    /// file fails with ``RequestBuildingError/unreadableFile(_:)``.
    case file(URL)
    /// A multipart form, built for each attempt: in memory when small, streamed from a temporary file when large.
    case multipart(MultipartFormData)
}

/// A request that uploads a body and turns the response into `Success` like any ``DataRequest``; the body
/// replaces any `httpBody` that `makeURLRequest` set. It runs as an ``UploadRequestOperation``, with the bytes
/// sent in ``RequestOperation/progress``.
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
        UploadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}

extension UploadRequest where Self: DecodableRequest {
    /// Creates an ``UploadRequestOperation`` whose response is decoded as JSON.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        UploadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}

extension UploadRequest where Self: NoContentRequest {
    /// Creates an ``UploadRequestOperation`` that expects no response body.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<Success, Failure> {
        UploadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}

/// Runs an ``UploadRequest`` as a task whose callbacks Requests receives (see `TransferSession`), so that the
/// bytes sent reach ``RequestOperation/progress``.
public final class UploadRequestOperation<R: UploadRequest>: DataRequestOperation<R>, @unchecked Sendable {
    override var usesResponseCache: Bool {
        false
    }

    override func makeTask(for urlRequest: URLRequest, rules: TransferRules, receiver: any AttemptReceiver) throws -> URLSessionTask {
        // User code: read outside the lock.
        guard let body = currentRequest?.uploadBody else { throw RequestQueueError.cancelled }
        var urlRequest = urlRequest
        urlRequest.httpBody = nil
        urlRequest.httpBodyStream = nil
        let make: (URLSession) -> URLSessionTask
        var length: Int64 = -1
        switch body {
        case let .data(data):
            make = { $0.uploadTask(with: urlRequest, from: data) }
        case let .file(file):
            let size = (try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber
            guard file.isFileURL, FileManager.default.isReadableFile(atPath: file.path), let size else {
                throw RequestBuildingError.unreadableFile(file)
            }
            length = size.int64Value
            #if canImport(FoundationNetworking)
            guard let stream = InputStream(url: file) else { throw RequestBuildingError.unreadableFile(file) }
            urlRequest.httpBodyStream = stream
            make = { [urlRequest] in $0.dataTask(with: urlRequest) }
            #else
            make = { [urlRequest] in $0.uploadTask(with: urlRequest, fromFile: file) }
            #endif
        case let .multipart(form):
            length = Int64(try form.apply(to: &urlRequest))
            if let data = urlRequest.httpBody {
                urlRequest.httpBody = nil
                make = { [urlRequest] in $0.uploadTask(with: urlRequest, from: data) }
            } else {
                make = { [urlRequest] in $0.dataTask(with: urlRequest) }
            }
        }
        return TransferSession.task(on: session, handler: MemoryTransfer(receiver: receiver, rules: rules, uploadLength: length), make)
    }
}
