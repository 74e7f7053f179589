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
    /// At most the recording monitors' limit; empty when the body was not kept (a body stream's, a multipart form
    /// streamed from a file).
    let bytes: Data
    /// The whole body's size in bytes; `-1` when unknown.
    let size: Int
    /// Why the bytes are missing although the body is not empty; `nil` when they are there.
    var omission: String? = nil
    /// A streamed body's pieces as they arrived (``bytes`` is their concatenation); `nil` for a body that was not
    /// streamed.
    var chunks: [CapturedChunk]? = nil

    var isTruncated: Bool { size < 0 || bytes.count < size }

    /// The first `limit` bytes of `data`.
    init(_ data: Data, limit: Int) {
        (bytes, size) = (data.count > limit ? data.prefix(limit) : data, data.count)
    }

    /// The first `limit` bytes of the file `url` after its first `offset` bytes (it does not move or change the file).
    init(file url: URL, limit: Int, skipping offset: Int = 0) {
        let handle = try? FileHandle(forReadingFrom: url)
        defer { try? handle?.close() }
        let fileSize = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue ?? -1
        let size = fileSize < 0 ? -1 : max(fileSize - offset, 0)
        if offset > 0 { _ = try? handle?.seek(toOffset: UInt64(offset)) }
        let bytes = (try? handle?.read(upToCount: limit)) ?? nil
        self.init(bytes: bytes ?? Data(), size: size, omission: bytes == nil && size != 0 ? "the file could not be read" : nil)
    }

    init(bytes: Data, size: Int, omission: String?) {
        (self.bytes, self.size, self.omission) = (bytes, size, omission)
    }

    /// What `request` sent as its body: an upload's body, or its `httpBody`.
    ///
    /// A multipart form below its ``MultipartFormData/streamingThreshold`` is built in memory as the request's
    /// `httpBody` (see `prepareTransfer`) and kept like any body; a larger one is streamed from a temporary file the
    /// transport reads, and is not. A request's own `httpBodyStream` is never read: an `InputStream` can be read only
    /// once, so reading it here would take the bytes from the transport (or from the caller, who may still hold it).
    static func sent(_ request: URLRequest, upload: UploadBody?, limit: Int) -> CapturedBody? {
        switch upload {
        case let .data(data): return CapturedBody(data, limit: limit)
        case let .file(url): return CapturedBody(file: url, limit: limit)
        case .multipart:
            if let body = request.httpBody { return CapturedBody(body, limit: limit) }
            let length = request.value(forHTTPHeaderField: "Content-Length").flatMap { Int($0) } ?? -1
            return .omitted(size: length, reason: "a multipart form streamed from a file is not recorded")
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

/// A hop of an attempt after a redirect: what it sent and when, so that a recording monitor gets one exchange per hop,
/// as browsers write them (the 3xx, with its `Location`, then the next request). Kept in `RunState` for the attempt.
struct RedirectHop {
    /// The request the hop sent.
    let request: URLRequest
    /// When it was sent; `nil` when it is the task's own start (`RunState.sendTime`): a redirect Requests sends again
    /// on a new task (see `RedirectResend`).
    let start: DispatchTime?
    /// Whether the attempt's upload body went with it: only after redirects that kept the method (a 303, or a
    /// POST's 301 or 302, becomes a GET without a body).
    let carriesBody: Bool

    /// The hop that sends `request`, from `start`, in an attempt whose first request was `sent`.
    init(_ request: URLRequest, after sent: URLRequest?, start: DispatchTime?) {
        self.request = request
        self.start = start
        carriesBody = (request.httpMethod ?? "GET").uppercased() == (sent?.httpMethod ?? "GET").uppercased()
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
    /// left it; a stream's body is what its `StreamRecording` kept (`streamed`).
    ///
    /// After a redirect, the exchange is the last hop's: the request that hop sent (not the attempt's first, which the
    /// other events name), timed from when it was sent (see ``redirected(_:to:)``).
    func emitExchange(
        _ attempt: RequestAttempt, response: HTTPURLResponse?, error: Error? = nil, body: ResponseBody?, streamed: CapturedBody? = nil,
        duration: TimeInterval
    ) {
        guard let limit = exchangeBodyLimit() else { return }
        let (upload, metrics, hop, offset) = withLock { () -> (UploadBody?, TransferMetrics?, RedirectHop?, TimeInterval) in
            let hop = run.redirectHop
            let start = hop?.start ?? run.sendTime
            return (run.upload?.body, run.metrics, hop, start > run.sendTime ? Double(start.uptimeNanoseconds - run.sendTime.uptimeNanoseconds) / 1e9 : 0)
        }
        if let hop, let response, (300..<400).contains(response.statusCode), response.url != hop.request.url {
            // A redirect that was not followed after all (the caller's session delegate declined it, or a body stream
            // could not be sent again): its exchange was recorded when it was announced.
            return
        }
        var responseBody: CapturedBody
        switch body {
        case let .data(data)?: responseBody = CapturedBody(data, limit: limit)
        case let .file(url)?:
            // A download resumed by a `206` appended its bytes to an earlier attempt's: the response's own come after
            // those (an accepted `206` always continues the file from its `Content-Range`).
            let contentRange = response?.statusCode == 206 ? ContentRange(response?.value(forHTTPHeaderField: "Content-Range")) : nil
            responseBody = CapturedBody(file: url, limit: limit, skipping: contentRange.map { Int(clamping: $0.first) } ?? 0)
        case nil where response == nil: responseBody = CapturedBody(Data(), limit: limit)
        case nil: responseBody = streamed ?? .omitted(size: -1, reason: "a stream's body is not recorded")
        }
        if let response, let error, responseBody.bytes.isEmpty, responseBody.omission == nil {
            if let kept = bytesKept(afterBreaking: response) {
                // A download that broke: the bytes it kept on disk to resume from (a replay delivers them, then the error).
                let contentRange = response.statusCode == 206 ? ContentRange(response.value(forHTTPHeaderField: "Content-Range")) : nil
                responseBody = CapturedBody(file: kept, limit: limit, skipping: contentRange.map { Int(clamping: $0.first) } ?? 0)
            } else {
                // The body broke off (or a limit stopped it): the transfer kept none of it for the exchange.
                let received = metrics.map { Int(clamping: $0.bytesReceived) } ?? -1
                responseBody = .omitted(size: received, reason: "the body was not kept: the transfer failed (\(HARResponse.errorText(error)))")
            }
        }
        var hopMetrics = metrics
        if offset > 0, var shifted = metrics {
            // The transport's figures span every hop of its task: the first byte is counted from this hop's start, and
            // which hop opened a connection is not known.
            shifted.timeToFirstByte = shifted.timeToFirstByte.map { max($0 - offset, 0) }
            (shifted.domainLookupDuration, shifted.connectDuration, shifted.secureConnectionDuration) = (nil, nil, nil)
            hopMetrics = shifted
        }
        emitRecorded(
            attempt, sending: hop?.request ?? attempt.urlRequest, upload: hop?.carriesBody == false ? nil : upload, limit: limit, response: response,
            error: error, body: responseBody, duration: max(duration - offset, 0), metrics: hopMetrics)
    }

    /// The transport follows `response` to `request`, as the ``RedirectPolicy`` allowed: the monitors are told, and
    /// the recording monitors get the exchange of the hop that ends here (its request, the 3xx, no body) while the
    /// next hop is noted for the exchange that follows.
    func redirected(_ response: HTTPURLResponse, to request: URLRequest) {
        let ended = ifNotCompleted { () -> (RequestAttempt, hop: RedirectHop, duration: TimeInterval, upload: UploadBody?)? in
            guard let sent = run.sentRequest else { return nil }
            let hop = run.redirectHop ?? RedirectHop(sent, after: sent, start: nil)
            let duration = secondsSince(hop.start ?? run.sendTime)
            run.redirectHop = RedirectHop(request, after: sent, start: .now())
            return (currentAttempt(sending: sent), hop, duration, hop.carriesBody ? run.upload?.body : nil)
        }
        guard let (attempt, hop, duration, upload) = ended ?? nil else { return }
        emit(.willRedirect(attempt, response, to: request))
        guard let limit = exchangeBodyLimit() else { return }
        emitRecorded(
            attempt, sending: hop.request, upload: upload, limit: limit, response: response, error: nil,
            body: CapturedBody(bytes: Data(), size: 0, omission: nil), duration: duration, metrics: nil)
    }

    private func emitRecorded(
        _ attempt: RequestAttempt, sending request: URLRequest, upload: UploadBody?, limit: Int, response: HTTPURLResponse?, error: Error?,
        body: CapturedBody, duration: TimeInterval, metrics: TransferMetrics?
    ) {
        emit(
            .didExchange(
                RecordedExchange(
                    attempt: RequestAttempt(identifier: attempt.identifier, number: attempt.number, urlRequest: request),
                    startedDate: Date(timeIntervalSinceNow: -duration), duration: duration, metrics: metrics,
                    requestBody: CapturedBody.sent(request, upload: upload, limit: limit), response: response, transportError: error,
                    responseBody: body)))
    }
}
