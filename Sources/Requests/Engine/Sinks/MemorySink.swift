#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The callbacks of a task whose response body is kept in memory, up to the body limit: a data request's, or an
/// upload's (which also reports the bytes sent as progress).
final class MemorySink: TransferSink, @unchecked Sendable {
    private weak var progressCallbacks: (any AttemptCallbacks)?
    /// The upload's length when URLSession does not know it (a stream); `nil` for a request that is no upload.
    private let uploadLength: Int64?
    private var sent: Int64 = 0

    init(callbacks: any AttemptCallbacks, rules: TransferRules, uploadLength: Int64? = nil) {
        self.progressCallbacks = callbacks
        self.uploadLength = uploadLength
        super.init(callbacks: callbacks, rules: rules)
    }

    override func didSend(total: Int64, expected: Int64) {
        lock.lock()
        let sentBefore = sent
        sent = total
        lock.unlock()
        moved(total - sentBefore)
        let length = expected > 0 ? expected : (uploadLength ?? -1)
        if length > 0, total >= length { speedWindowWaits() }
        if let uploadLength {
            progressCallbacks?.transferred(completed: total, expected: expected > 0 ? expected : uploadLength)
        }
    }

    override func didReceive(_ data: Data) {
        moved(Int64(data.count))
        let fits = receiving { () -> Bool? in
            let fits = rules.limits.maximumBodySize.map { Int64(bufferedBody.count + data.count) <= $0 } ?? true
            if fits { bufferedBody.append(data) }
            return fits
        }
        if fits == false, let limit = rules.limits.maximumBodySize {
            stop(with: TransferLimitError.responseTooLarge(limit: limit))
        }
    }
}

extension MemorySink {
    /// The task of one attempt whose response body is kept in memory: a data task, or an upload of `upload` as the
    /// preparation left it (a multipart form encoded into the request; an upload's bytes sent also count as progress).
    static func task(
        for urlRequest: URLRequest, uploading upload: (body: UploadBody, length: Int64)?, on session: URLSession, rules: TransferRules,
        callbacks: any AttemptCallbacks
    ) throws -> any TransportTask {
        guard let upload else {
            #if canImport(FoundationNetworking)
            // URLSession on Linux serves a cached response whatever the policy says: a request that must ignore the
            // local cache has its entry removed first.
            if urlRequest.cachePolicy == .reloadIgnoringLocalCacheData || urlRequest.cachePolicy == .reloadIgnoringLocalAndRemoteCacheData {
                session.configuration.urlCache?.removeCachedResponse(for: urlRequest)
            }
            #endif
            return Transport.dataTask(for: urlRequest, on: session, sink: MemorySink(callbacks: callbacks, rules: rules))
        }
        var urlRequest = urlRequest
        let body: SentBody
        switch upload.body {
        case let .data(data):
            body = .data(data)
        case let .file(file):
            let size = (try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber
            guard file.isFileURL, FileManager.default.isReadableFile(atPath: file.path), let size else {
                throw RequestBuildingError.unreadableFile(file)
            }
            body = .file(file, length: size.int64Value)
        case .multipart:
            // Encoded into the request by `prepareTransfer`: in memory, or a stream over a temporary file.
            if let data = urlRequest.httpBody {
                body = .data(data)
            } else if let stream = urlRequest.httpBodyStream {
                body = .stream(stream, length: upload.length >= 0 ? upload.length : nil)
            } else {
                body = .data(Data())
            }
        }
        urlRequest.httpBody = nil
        urlRequest.httpBodyStream = nil
        let sink = MemorySink(callbacks: callbacks, rules: rules, uploadLength: body.length ?? upload.length)
        return Transport.uploadTask(for: urlRequest, body: body, on: session, sink: sink)
    }
}
