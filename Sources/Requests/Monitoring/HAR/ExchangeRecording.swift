#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A monitor that is also handed the bodies of each exchange: the one hook through which bodies leave the engine
/// (``HARRecorder`` is its only conformer). Internal, so that what a body costs stays the library's decision: the
/// engine copies bodies only when a monitor of the queue conforms, and no more bytes than the largest
/// ``maximumBodyBytes`` of those monitors.
protocol ExchangeRecording: RequestEventMonitor {
    /// The most bytes of each body this monitor keeps.
    var maximumBodyBytes: Int { get }
    /// An attempt got a response (called right after ``RequestEventMonitor/requestDidReceive(_:response:bodyBytes:duration:)``),
    /// or none because of a transport error (before ``RequestEventMonitor/requestDidFail(_:error:duration:)``), in the
    /// same order as the other events.
    func requestDidExchange(_ exchange: RecordedExchange)
}

/// One request and the response it got, with the first bytes of both bodies.
struct RecordedExchange: Sendable {
    let attempt: RequestAttempt
    /// When the attempt was sent (wall clock).
    let startedDate: Date
    /// Seconds from the send to the end of the response.
    let duration: TimeInterval
    let metrics: TransferMetrics?
    /// The request's body; `nil` without one.
    let requestBody: CapturedBody?
    /// `nil` when the attempt got no response: then ``transportError`` says why.
    let response: HTTPURLResponse?
    let transportError: Error?
    let responseBody: CapturedBody
}

/// The first bytes of a body, and its whole size.
struct CapturedBody: Sendable {
    /// At most the recording monitors' limit; empty when the body was not kept (a stream's, a multipart form's).
    let bytes: Data
    /// The whole body's size in bytes; `-1` when unknown.
    let size: Int
    /// Why the bytes are missing although the body is not empty; `nil` when they are there.
    var omission: String? = nil

    var isTruncated: Bool { size < 0 || bytes.count < size }

    /// The first `limit` bytes of `data`.
    init(_ data: Data, limit: Int) {
        (bytes, size) = (data.count > limit ? data.prefix(limit) : data, data.count)
    }

    /// The first `limit` bytes of the file `url` (which it does not move or change).
    init(file url: URL, limit: Int) {
        let handle = try? FileHandle(forReadingFrom: url)
        defer { try? handle?.close() }
        let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue ?? -1
        let bytes = (try? handle?.read(upToCount: limit)) ?? nil
        self.init(bytes: bytes ?? Data(), size: size, omission: bytes == nil && size != 0 ? "the file could not be read" : nil)
    }

    init(bytes: Data, size: Int, omission: String?) {
        (self.bytes, self.size, self.omission) = (bytes, size, omission)
    }

    /// What `request` sent as its body: an upload's body, or its `httpBody`.
    static func sent(_ request: URLRequest, upload: UploadBody?, limit: Int) -> CapturedBody? {
        switch upload {
        case let .data(data): return CapturedBody(data, limit: limit)
        case let .file(url): return CapturedBody(file: url, limit: limit)
        case .multipart:
            let length = request.value(forHTTPHeaderField: "Content-Length").flatMap { Int($0) } ?? -1
            return .omitted(size: length, reason: "a multipart form is not recorded")
        case nil:
            if let body = request.httpBody { return CapturedBody(body, limit: limit) }
            if request.httpBodyStream != nil { return .omitted(size: -1, reason: "a body stream is not recorded") }
            return nil
        }
    }

    /// A body that is not kept, for `reason`.
    static func omitted(size: Int, reason: String) -> CapturedBody {
        CapturedBody(bytes: Data(), size: size, omission: reason)
    }
}

extension NetworkRequestOperation {
    /// The largest body limit of the queue's recording monitors; `nil` when none records (the usual case: no copy).
    func exchangeBodyLimit() -> Int? {
        let monitors = withLock { policies.monitors }
        return monitors.compactMap { ($0 as? any ExchangeRecording)?.maximumBodyBytes }.max()
    }

    /// Hands the recording monitors the exchange of an attempt that got `response` (or `error` and no response),
    /// when any is attached. Called before the body is interpreted, so a download's file is still where the transfer
    /// left it; a stream's body (`nil`, of `streamedBytes`) is not kept.
    func emitExchange(
        _ attempt: RequestAttempt, response: HTTPURLResponse?, error: Error? = nil, body: ResponseBody?, streamedBytes: Int = 0,
        duration: TimeInterval
    ) {
        guard let limit = exchangeBodyLimit() else { return }
        let (upload, metrics) = withLock { (run.upload?.body, run.metrics) }
        let responseBody: CapturedBody
        switch body {
        case let .data(data)?: responseBody = CapturedBody(data, limit: limit)
        case let .file(url)?: responseBody = CapturedBody(file: url, limit: limit)
        case nil where response == nil: responseBody = CapturedBody(Data(), limit: limit)
        case nil: responseBody = .omitted(size: streamedBytes, reason: "a stream's body is not recorded")
        }
        emit(
            .didExchange(
                RecordedExchange(
                    attempt: attempt, startedDate: Date(timeIntervalSinceNow: -duration), duration: duration, metrics: metrics,
                    requestBody: CapturedBody.sent(attempt.urlRequest, upload: upload, limit: limit), response: response,
                    transportError: error, responseBody: responseBody)))
    }
}
