#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One attempt on libcurl: the ``CurlTransfer``s of its request and of the redirects it follows, reported to the
/// attempt's `TransferSink` as `TransferSession` reports a `URLSessionTask`'s callbacks, in the same order and through
/// the same sink methods, so that every rule (limits, redirect policy, lost connections) is the sink's on both.
///
/// A redirect is ruled on once its 3xx has arrived whole (its body is held meanwhile, up to 1 MiB), off the loop's
/// thread: followed on a new transfer, or a 307/308 that keeps a body handed back to the operation (`RedirectResend`),
/// or refused, and then the 3xx is the response.
final class CurlTask: TransportTask, CurlTransferClient, @unchecked Sendable {
    /// The most of a redirect's own body held while it is ruled on; more ends the transfer.
    static let heldRedirectBody = 1 << 20

    private let loop: CurlLoop
    private let sink: TransferSink
    private let configuration: URLSessionConfiguration
    private let lock = NSLock()
    /// Under `lock`.
    private var current: CurlTransfer
    private var resumed = false
    private var stopped = false
    private var lastResponse: URLResponse?
    /// The 3xx of a redirect to rule on once it ends, and its body so far (loop thread).
    private var redirect: (response: HTTPURLResponse, location: URL)?
    private var redirectBody = Data()
    /// The bytes of the piece the sink held back, offered again once the transfer resumes (loop thread).
    private var heldBack = 0

    /// Whether the first transfer sends a body of the operation's (an upload's, see `SentBody`).
    private let sendsUploadBody: Bool

    /// An attempt that sends `request`, with `body` when it is an upload's (else the request's own `httpBody`).
    init(sending request: URLRequest, body: SentBody? = nil, on loop: CurlLoop, configuration: URLSessionConfiguration, sink: TransferSink) {
        self.loop = loop
        self.sink = sink
        self.configuration = configuration
        sendsUploadBody = body != nil
        current = CurlTransfer(request: request, body: body.map(Self.body), freshConnection: CurlTask.needsFreshConnection(request))
        current.client = self
    }

    /// `body` as a transfer sends it: bytes from memory, or a stream opened again for each sending.
    private static func body(_ body: SentBody) -> CurlTransfer.Body {
        if case let .data(data) = body { return .data(data) }
        return .stream(length: body.length, open: { body.freshStream() })
    }

    var response: URLResponse? { lock.withLock { lastResponse } }
    var sessionTask: URLSessionTask? { nil }

    func resume() {
        let transfer: CurlTransfer? = lock.withLock {
            guard !resumed, !stopped else { return nil }
            resumed = true
            return current
        }
        if let transfer { start(transfer) }
    }

    /// Adds `transfer` to the loop; a stop that came meanwhile may have posted its cancel first, which the loop then
    /// ignored, so it is posted again after the add.
    private func start(_ transfer: CurlTransfer) {
        loop.add(prepared(transfer))
        if lock.withLock({ stopped }) { loop.cancel(transfer) }
    }

    func resumeReceiving() {
        let transfer: CurlTransfer? = lock.withLock { resumed && !stopped ? current : nil }
        if let transfer { loop.resume(transfer) }
    }

    func stop(after delay: TimeInterval?) {
        let (transfer, wasResumed): (CurlTransfer, Bool) = lock.withLock {
            stopped = true
            return (current, resumed)
        }
        // Never resumed: the sink has its outcome from whoever stopped it; nothing was sent, and the transfer lets
        // go of this task.
        if wasResumed { loop.cancel(transfer) } else { transfer.client = nil }
    }

    /// A request that must not be sent twice goes on a connection of its own (see `SentBody`): libcurl sends a
    /// request again by itself when a reused connection dies before any answer.
    private static func needsFreshConnection(_ request: URLRequest) -> Bool {
        !SentBody.mayBeSentTwice(request)
    }

    /// `transfer` with what the session's configuration adds: its extra headers and cookies, its timeout.
    private func prepared(_ transfer: CurlTransfer) -> CurlTransfer {
        transfer.apply(configuration)
        return transfer
    }

    // MARK: - CurlTransferClient, on the loop's thread

    func curlTransfer(_ transfer: CurlTransfer, didReceive response: HTTPURLResponse) {
        if transfer.setsCookie { CurlCookies.store(from: response, for: transfer.request, in: configuration) }
        if let location = RedirectProposal.location(of: response) {
            redirect = (response, location)
            redirectBody = Data()
            return
        }
        lock.withLock { lastResponse = response }
        sink.measure(arrived: response)
        _ = sink.shouldAccept(response)
    }

    func curlTransfer(_ transfer: CurlTransfer, didSend total: Int64, expected: Int64) {
        sink.measure(sentTotal: total)
        sink.didSend(total: total, expected: expected)
    }

    func curlTransfer(_ transfer: CurlTransfer, didReceive data: Data) -> Bool {
        if redirect != nil {
            redirectBody.append(data)
            if redirectBody.count > Self.heldRedirectBody { loop.cancel(transfer, code: .cannotLoadFromNetwork) }
            return true
        }
        // Counted before it is handed over, as `TransferSession` does (a limit it breaks ends the metrics with it); a
        // piece offered again after a pause starts with the one held back, counted already.
        sink.measure(received: max(data.count - heldBack, 0))
        // A stream whose consumer is behind holds the piece back: the transfer pauses until `resumeReceiving`.
        heldBack = sink.offer(data) ? 0 : max(data.count, heldBack)
        return heldBack == 0
    }

    func curlTransfer(_ transfer: CurlTransfer, didCompleteWith error: URLError?) {
        if error == nil, let (response, location) = redirect {
            redirect = nil
            let body = redirectBody
            redirectBody = Data()
            // The ruling may run user code (a policy, the monitors): never on the loop's thread.
            DispatchQueue.global().async { self.rule(response, to: location, from: transfer.request, body: body) }
            return
        }
        sink.measure(sentTotal: transfer.bytesSent, reusedConnection: transfer.reusedConnection, connection: transfer.connectionPhases)
        let reported = sink.reported(error)
        if !sink.resendsAfterLostConnection(reported) {
            sink.didComplete(response: transfer.response, error: reported)
        }
    }

    // MARK: - Redirects

    private func rule(_ response: HTTPURLResponse, to location: URL, from sent: URLRequest, body: Data) {
        let proposed = RedirectProposal.proposal(after: response, to: location, from: sent)
        guard let allowed = sink.willRedirect(response, to: proposed, from: sent.url) else {
            return deliver(response, body: body, from: sent)
        }
        // A redirect that keeps a body is sent again by the operation itself (`RedirectResend`), as on URLSession.
        if RedirectProposal.keepsBody(response, allowed: allowed, sent: sent, sendsUploadBody: sendsUploadBody) {
            sink.resendAfterCompletion(allowed)
            return deliver(response, body: Data(), from: sent)
        }
        let next = RedirectProposal.next(allowed, after: sent)
        let transfer = CurlTransfer(request: next, freshConnection: Self.needsFreshConnection(next))
        transfer.client = self
        let goesOn: Bool = lock.withLock {
            guard !stopped else { return false }
            current = transfer
            return true
        }
        if goesOn { start(transfer) } else { transfer.client = nil }
    }

    /// Hands a 3xx that is not followed to the sink as the response.
    private func deliver(_ response: HTTPURLResponse, body: Data, from sent: URLRequest) {
        lock.withLock { lastResponse = response }
        sink.measure(arrived: response)
        if sink.shouldAccept(response), !body.isEmpty {
            sink.measure(received: body.count)
            sink.didReceive(body)
        }
        sink.didComplete(response: response, error: nil)
    }
}
#endif
