#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One attempt answered by a ``ReplaySource`` instead of the network: the source's answer is reported to the attempt's
/// `TransferSink` as `CurlTask` reports a transfer, through the same sink methods and in the same order, so that every
/// rule (limits, the redirect policy, resumable downloads, a stream's consumer falling behind) is the sink's, as live.
///
/// A 3xx with a `Location` is ruled on by the sink (`RedirectProposal`, as on libcurl): followed by asking the source
/// for the next request, or handed back to the operation when it keeps a body, or refused, and then it is the response.
/// The body goes to the sink in the answer's pieces, each after its delay; a sink that holds a piece back
/// (``TransferSink/offer(_:)``) gets it again after ``resumeReceiving()``; a response without a body (a `HEAD`'s, a
/// `304`) gets none. Nothing here times out: a recorded answer always ends (a paced piece waits at most the request's
/// `timeoutInterval`, the longest pause a live transfer survives). The session's configuration is not applied: no extra
/// headers, cookies or request timeout. The sink's callbacks run on one serial queue per task.
final class ReplayTask: TransportTask, @unchecked Sendable {
    private let source: any ReplaySource
    private let sink: TransferSink
    private let sent: URLRequest
    private let body: SentBody?
    private let queue = DispatchQueue(label: "Requests.ReplayTask")
    private let lock = NSLock()
    /// Under `lock`.
    private var resumed = false
    private var stopped = false
    private var lastResponse: URLResponse?
    /// The wait before a paced piece, cancelled by a stop.
    private var pendingWait: DispatchWorkItem?
    /// On `queue`: the response whose body is being delivered, its pieces, the next one's index, and whether the sink
    /// held that one back.
    private var delivering: (response: HTTPURLResponse, pieces: [ReplayedPiece], error: (any Error)?)?
    private var next = 0
    private var paused = false
    /// Whether the delay before the next piece has passed, and whether its bytes were counted (on `queue`).
    private var waitedForNext = false
    private var countedNext = false
    private var bytesSent: Int64 = 0

    /// An attempt that sends `request`, with `body` when it is an upload's (else the request's own body).
    init(sending request: URLRequest, body: SentBody?, source: any ReplaySource, sink: TransferSink) {
        (self.sent, self.body, self.source, self.sink) = (request, body, source, sink)
    }

    var response: URLResponse? { lock.withLock { lastResponse } }
    var sessionTask: URLSessionTask? { nil }

    func resume() {
        guard
            lock.withLock({ () -> Bool in
                guard !resumed, !stopped else { return false }
                resumed = true
                return true
            })
        else { return }
        queue.async { self.ask(for: self.sent, body: Self.bytes(of: self.body)) }
    }

    /// Stops delivering. The operation has its outcome already (a cancel, a rule that ended the attempt): nothing more
    /// reaches the sink.
    func stop(after delay: TimeInterval?) {
        let wait = lock.withLock { () -> DispatchWorkItem? in
            stopped = true
            return pendingWait
        }
        // The wait for a paced piece lets go of this task at once.
        wait?.cancel()
    }

    func resumeReceiving() {
        queue.async {
            guard self.paused else { return }
            self.paused = false
            self.deliverNextPiece()
        }
    }

    private var isStopped: Bool { lock.withLock { stopped } }

    /// The whole body `body` sends, read from memory, its file or its stream.
    private static func bytes(of body: SentBody?) -> Data? {
        switch body {
        case nil: return nil
        case let .data(data)?: return data
        case let .file(url, _)?: return try? Data(contentsOf: url)
        case .stream?:
            guard let stream = body?.freshStream() else { return nil }
            stream.open()
            defer { stream.close() }
            var data = Data()
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let count = stream.read(&buffer, maxLength: buffer.count)
                guard count > 0 else { break }
                data.append(buffer, count: count)
            }
            return data
        }
    }

    // MARK: - On `queue`

    /// Asks the source for the answer to `request` (nothing once stopped: a cancelled request uses up no entry).
    private func ask(for request: URLRequest, body: Data?) {
        guard !isStopped else { return }
        bytesSent = Int64(body?.count ?? 0)
        source.answer(for: request, body: body) { answer in
            self.queue.async { self.handle(answer, to: request) }
        }
    }

    private func handle(_ answer: ReplayedAnswer, to request: URLRequest) {
        guard !isStopped else { return }
        if bytesSent > 0 {
            // The body went, as a transport reports it (upload progress).
            sink.measure(sentTotal: bytesSent)
            sink.didSend(total: bytesSent, expected: bytesSent)
        }
        switch answer {
        case let .failure(error):
            let reported = sink.reported(error)
            if !sink.resendsAfterLostConnection(reported) { sink.didComplete(response: nil, error: reported) }
        case let .response(answer):
            guard let url = request.url,
                let response = HTTPURLResponse(url: url, statusCode: answer.status, httpVersion: "HTTP/1.1", headerFields: answer.headers)
            else {
                return sink.didComplete(response: nil, error: URLError(.badServerResponse))
            }
            // A redirect is ruled on once its 3xx has come whole, as on libcurl.
            if answer.errorAfterBody == nil, let location = RedirectProposal.location(of: response) {
                if follow(response, to: location, from: request) { return }
            }
            lock.withLock { lastResponse = response }
            sink.measure(arrived: response)
            guard sink.shouldAccept(response) else { return }
            // A response without a body (a `HEAD`'s, a `304`) gets none, whatever the file holds for it.
            let pieces = ResponseBodyRule.hasBody(status: answer.status, method: request.httpMethod) ? answer.pieces : []
            delivering = (response, pieces, answer.errorAfterBody)
            (next, waitedForNext, countedNext) = (0, false, false)
            deliverNextPiece()
        }
    }

    /// Rules on a redirect as the sink says; returns whether the 3xx was dealt with (followed, or handed back to the
    /// operation), `false` when it is the response.
    private func follow(_ response: HTTPURLResponse, to location: URL, from request: URLRequest) -> Bool {
        let proposed = RedirectProposal.proposal(after: response, to: location, from: request)
        guard let allowed = sink.willRedirect(response, to: proposed, from: request.url) else { return false }
        if RedirectProposal.keepsBody(response, allowed: allowed, sent: request, sendsUploadBody: body != nil) {
            sink.resendAfterCompletion(allowed)
            lock.withLock { lastResponse = response }
            sink.measure(arrived: response)
            _ = sink.shouldAccept(response)
            sink.didComplete(response: response, error: nil)
            return true
        }
        let next = RedirectProposal.next(allowed, after: request)
        ask(for: next, body: next.httpBody)
        return true
    }

    /// Delivers the pieces from the next one, each after its delay, until the sink holds one back or the last one has
    /// gone; then completes the attempt.
    private func deliverNextPiece() {
        while !isStopped, let (response, pieces, error) = delivering {
            guard next < pieces.count else {
                delivering = nil
                return sink.didComplete(response: response, error: sink.reported(error))
            }
            let piece = pieces[next]
            if piece.delay > 0, !waitedForNext {
                waitedForNext = true
                let wait = DispatchWorkItem { self.deliverNextPiece() }
                lock.withLock { pendingWait = wait }
                queue.asyncAfter(deadline: .now() + min(piece.delay, sent.timeoutInterval), execute: wait)
                return
            }
            // Counted once, when first offered, as on libcurl.
            if !countedNext, !piece.data.isEmpty { sink.measure(received: piece.data.count) }
            countedNext = true
            guard piece.data.isEmpty || sink.offer(piece.data) else {
                paused = true
                return
            }
            (next, waitedForNext, countedNext) = (next + 1, false, false)
        }
    }
}
