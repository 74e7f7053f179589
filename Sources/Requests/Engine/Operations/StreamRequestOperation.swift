#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``StreamRequest``: every policy of other requests (adapters, the authenticator, preconditions, monitors,
/// the redirect policy and the limits), then the body handed over as it arrives, decoded by the request's decoder,
/// one element at a time; and, when the request has a ``ReconnectPolicy``, reconnections.
///
/// The order of one connection: the response's status is checked (a status the request does not accept fails
/// with ``RequestQueueError/invalidStatusCode(statusCode:response:body:)`` carrying the first 64 KiB of the body,
/// which is never decoded), then the queue's and the request's validations (with an empty body) and the decoder's
/// ``StreamDecoder/validate(_:)``, and only then is the body decoded. The ``RetryPolicy`` and a token refresh apply
/// while no element has been delivered, never after.
///
/// Elements go to the `receive` handler on the completion queue, one call at a time, in order; decoding runs there
/// too, between calls. The completion comes last, once, after the last element, and no element follows it.
///
/// A consumer slower than the server cannot hold the transfer back (on Linux, suspending a data task may send the
/// request again from byte 0, not stop it, or crash Foundation), so the consumer's lag is bounded instead: past
/// ``StreamRequest/bufferSize`` the stream fails with ``StreamError/consumerTooSlow(bufferSize:)``. Only the
/// consumer's own lag counts: bytes that wait while the library decodes never fail the stream; they wait in memory
/// (up to a quarter of the buffer size) and beyond that in a private temporary file, read back in order.
///
/// It finishes when the stream ends, fails or is cancelled, so operations that depend on it run after it.
public final class StreamRequestOperation<R: StreamRequest>: NetworkRequestOperation<R>, @unchecked Sendable {
    /// Where elements go, until the operation finishes. Guarded by the operation's lock.
    var sink: ElementSink<R.Element>?
    /// `self`, through an existential: the closures that run the pump must not capture `R`'s metatype.
    var streamCallbacks: any StreamCallbacks { self }
    /// Guarded by the operation's lock. (Not generic, so that the pump's work per element needs no type metadata.)
    let stream = StreamState()
    /// The current connection's decoder; `nil` while the pump decodes. Guarded by the operation's lock.
    var currentDecoder: R.Decoder?

    /// Creates an operation that hands each element to `receive` and then the outcome to `completion`, both on
    /// `completionQueue` (a global queue when `nil`). It does nothing until started, usually by an `OperationQueue`;
    /// `addRequest(_:session:completionQueue:receive:completion:)` also gives it the queue's policies.
    public init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        receive: @escaping (R.Element) -> Void,
        completion: R.CompletionType? = nil
    ) {
        sink = ElementSink(handler: receive)
        super.init(request: request, session: session, completionQueue: completionQueue, completion: completion, interpreter: .unsupported)
    }

    /// Creates an operation whose elements go nowhere: only its ``StreamSummary`` reaches `completion`.
    public convenience init(
        request: R,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: R.CompletionType? = nil
    ) {
        self.init(request: request, session: session, completionQueue: completionQueue, receive: { _ in }, completion: completion)
    }

    /// Creates an operation that puts its elements in `buffer`, and ends it with the outcome.
    init(request: R, session: URLSession, completionQueue: DispatchQueue?, buffer: ElementBuffer<R.Element>) where R.Element: Sendable {
        sink = ElementSink(buffer: buffer)
        super.init(
            request: request, session: session, completionQueue: completionQueue,
            completion: { result in
                buffer.finish(result.map { _ in () }.mapError { $0 })
            }, interpreter: .unsupported)
        let streamCallbacks = self.streamCallbacks
        buffer.onRoom = { [weak streamCallbacks] in streamCallbacks?.consumerCaughtUp() }
    }

    /// Where the pump and the handlers run.
    var pumpQueue: DispatchQueue {
        completionQueue ?? .global()
    }

    // MARK: - Each connection (the transfer's part of the engine)

    /// Adds the decoder's headers (its place in the stream: `Last-Event-ID`) and starts a connection; a reconnection
    /// accepts only a `200` (or a `204`, which ends the stream). A `Last-Event-ID` that
    /// ``ServerSentEventDecoder/isSendableLastEventID(_:)`` refuses is not sent (nor the request's own), and the
    /// monitors are told.
    override func prepareTransfer(_ urlRequest: inout URLRequest) -> StatusRule? {
        guard let request = currentRequest else { return nil }
        let validCodes = request.validHTTPStatusCodes
        // The request's own code, read outside the lock.
        var decoder = request.makeDecoder()
        let policy = request.reconnectPolicy
        let bufferSize = max(request.bufferSize, 1)
        if let previous = withLock({ currentDecoder }) { decoder.resume(after: previous) }
        var droppedIDLength: Int?
        for (name, value) in decoder.requestHeaders {
            // The request's own headers win, except the decoder's place in the stream.
            let isPlace = name.caseInsensitiveCompare("Last-Event-ID") == .orderedSame
            if isPlace, !ServerSentEventDecoder.isSendableLastEventID(value) {
                urlRequest.setValue(nil, forHTTPHeaderField: name)
                droppedIDLength = value.utf8.count
            } else if isPlace || urlRequest.value(forHTTPHeaderField: name) == nil {
                urlRequest.setValue(value, forHTTPHeaderField: name)
            }
        }
        let sending = urlRequest
        // Asked once per connection, not per piece: without a recording monitor the stream keeps nothing.
        let recordingLimit = exchangeBodyLimit()
        let prepared = ifNotCompleted { () -> (StatusRule, RequestAttempt) in
            currentDecoder = decoder
            stream.reconnectPolicy = policy
            stream.bufferSize = bufferSize
            stream.startConnection()
            stream.recording = recordingLimit.map(StreamRecording.init(limit:))
            return (StatusRule(validCodes: isReconnectingUnderLock ? [200, 204] : validCodes), currentAttempt(sending: sending))
        }
        guard let (rule, attempt) = prepared else { return nil }
        if let droppedIDLength {
            emit(.notice(attempt, .lastEventIDDropped(length: droppedIDLength)))
        }
        return rule
    }

    override func makeTask(for urlRequest: URLRequest, rules: TransferRules, callbacks: any AttemptCallbacks) throws -> any TransportTask {
        let statusRule = withLock { run.statusRule }
        let transfer = StreamSink(callbacks: callbacks, streamCallbacks: self, rules: rules, statusRule: statusRule)
        return Transport.dataTask(for: urlRequest, on: session, sink: transfer)
    }

    /// The response has an accepted status: from now on its body is the stream's (called on the session's queue).
    func streamDidStart(_ response: HTTPURLResponse, transfer: StreamSink) {
        enqueue(.response(response, transfer), started: true)
    }

    /// The next bytes of the body (called on the session's queue): taken, refused (the stream wants no more), or, from
    /// a transport that can pause (`mayHold`), held back while the consumer is behind (see `StreamPump`).
    func streamDidReceive(_ data: Data, from transfer: StreamSink, mayHold: Bool) -> StreamIntake {
        enqueue(.bytes(data), bytes: data.count, holdingBackFor: mayHold ? transfer : nil)
    }

    /// The connection ended: after its elements (if it streamed), or as any request's attempt ends.
    override func transferEnded(body: ResponseBody, response: URLResponse?, error: Error?) -> Bool {
        guard let hasStarted = ifNotCompleted({ stream.hasStarted }) else {
            body.discard()
            return false
        }
        if hasStarted {
            enqueue(.end(error))
            return false
        }
        // Not a stream: its status, or a transport error, is interpreted like any request's.
        return true
    }

    /// A connection that dropped (or could not be made again) reconnects while the ``ReconnectPolicy`` allows, as
    /// does one the server closed when the policy says so. Once an element has arrived or a reconnection was made, the
    /// stream's outcome is its own: no retry or token refresh sends the request again.
    override func transferVerdict(after failure: Error?) -> TransferVerdict<StreamSummary> {
        let (phase, policy, elements, isReconnection) = withLock { (stream.phase, stream.reconnectPolicy, stream.elements, isReconnectingUnderLock) }
        guard let failure else {
            return policy?.reconnectsWhenServerCloses == true ? reconnection(or: .success(summary())) : .finish(.success(summary()))
        }
        let streamed = if case .streaming = phase { true } else { false }
        let rejected = if case .rejected = phase { true } else { false }
        if policy != nil, !rejected, Self.isDrop(failure), streamed || isReconnection {
            return reconnection(or: .failure(failure))
        }
        return elements > 0 || isReconnection ? .finish(.failure(failure)) : .policies
    }

    /// Whether a reconnection has been made. Must be called under the lock.
    var isReconnectingUnderLock: Bool {
        run.reattempts[.reconnect, default: 0] > 0
    }

    /// Whether `error` is a connection that dropped (or could not be made), after which a stream may reconnect;
    /// a limit, a decoding error or a cancellation ends it.
    static func isDrop(_ error: Error) -> Bool {
        guard let error = error as? URLError else { return false }
        return error.code != .cancelled
    }

    // MARK: - The end of a connection

    /// The connection's body ended (normally when `error` is `nil`), after every chunk of it was processed.
    func end(with error: Error?) {
        let state = ifNotCompleted { () -> (StreamState.Phase, RequestAttempt?, TimeInterval, HTTPURLResponse?, Int, StreamRecording?) in
            run.bodyBytes = Int(clamping: stream.bytes)
            let attempt = run.sentRequest.map(currentAttempt(sending:))
            return (stream.phase, attempt, secondsSince(run.sendTime), run.response, stream.connectionBytes, stream.recording.take())
        }
        guard let (phase, attempt, duration, response, connectionBytes, recording) = state, let attempt else { return }
        if let response {
            emit(.didReceive(attempt, response, bodyBytes: connectionBytes, duration: duration))
            emitExchange(attempt, response: response, body: nil, streamed: recording?.body, duration: duration)
        }
        switch phase {
        case let .rejected(rejection):
            decide(after: rejection, attempt: attempt, response: response, duration: duration)
        case .connecting:
            decide(after: error ?? URLError(.cannotParseResponse), attempt: attempt, response: response, duration: duration)
        case .closedByServer:
            complete(with: .success(summary()))
        case .streaming:
            if error == nil, let (taken, sink) = withLock({ sink.flatMap { sink in currentDecoder.take().map { ($0, sink) } } }) {
                var decoder = taken
                let finished = Result { try decoder.finish().forEach { _ = deliver($0, to: sink) } }
                withLock { currentDecoder = decoder }
                sink.flush()
                if case let .failure(failure) = finished {
                    interrupt(with: failure)
                    return
                }
            }
            decide(after: error, attempt: attempt, response: response, duration: duration)
        }
    }

    /// Reconnects after the policy's wait (the first one after a connection that delivered something waits the plain
    /// delay; a server's wait is raised to the policy's floor), or ends the stream: with `outcome` once the policy
    /// gives up after empty connections, with ``StreamError/tooManyReconnections(limit:window:)`` once the
    /// reconnections within the policy's window reach its cap.
    func reconnection(or outcome: Result<StreamSummary, Error>) -> TransferVerdict<StreamSummary> {
        let now = DispatchTime.now().uptimeNanoseconds
        let verdict = withLock { () -> (TransferVerdict<StreamSummary>, notice: (RequestAttempt, RequestNotice)?) in
            stream.emptyConnectionsInARow = stream.connectionElements > 0 ? 0 : stream.emptyConnectionsInARow + 1
            guard let policy = stream.reconnectPolicy, stream.emptyConnectionsInARow < policy.maxAttempts else { return (.finish(outcome), nil) }
            guard policy.admitsReconnection(at: now, recent: &stream.reconnectionTimes) else {
                let error = StreamError.tooManyReconnections(limit: max(policy.maxReconnections, 0), window: policy.windowSpan)
                return (.finish(.failure(error)), nil)
            }
            let requested = currentDecoder?.reconnectionDelay
            var notice: (RequestAttempt, RequestNotice)?
            // Told once each time the server's value changes, not at every reconnection.
            if let requested, requested < policy.serverDelayFloor, requested != stream.lastServerDelay, let sent = run.sentRequest {
                notice = (currentAttempt(sending: sent), .reconnectionDelayRaised(requested: requested, applied: policy.serverDelay(requested)))
            }
            stream.lastServerDelay = requested
            let delay = policy.delay(afterEmptyConnections: stream.emptyConnectionsInARow, requested: requested)
            return (.again(.reconnect, delay: delay), notice)
        }
        if let (attempt, notice) = verdict.notice {
            emit(.notice(attempt, notice))
        }
        return verdict.0
    }

    func summary() -> StreamSummary {
        withLock {
            StreamSummary(response: run.response ?? stream.lastResponse, elements: stream.elements, bytes: stream.bytes, connections: stream.connections)
        }
    }

    // MARK: - The end

    /// The monitors' `requestDidFinish` and the completion wait for a pump at work, so that no element is delivered
    /// beside them or after them.
    override func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        let streamCallbacks = self.streamCallbacks
        runAfterPump { streamCallbacks.finishDelivery(error, then: runCompletion) }
    }

    /// The base class's delivery: the monitors, then the completion.
    func finishDelivery(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        super.willDeliver(error, then: runCompletion)
    }

    /// Runs `completion` now, or when the pump at work stops.
    func runAfterPump(_ completion: @escaping @Sendable () -> Void) {
        let runsNow: Bool = withLock {
            guard stream.isPumping else { return true }
            stream.deferredCompletion = completion
            return false
        }
        if runsNow { completion() }
    }

    /// Drops the sink, the decoder, any bytes still waiting for the consumer and the pieces kept for a recording
    /// monitor, then releases what the base holds.
    public override func releaseResources() {
        withLock {
            sink = nil
            currentDecoder = nil
            stream.inbox.removeAll()
            stream.recording = nil
        }
        super.releaseResources()
    }
}

/// A stream operation as the transfer and the pump's closures see it: an existential, so that they do not capture
/// the operation's generic type.
protocol StreamCallbacks: AnyObject, Sendable {
    func streamDidStart(_ response: HTTPURLResponse, transfer: StreamSink)
    func streamDidReceive(_ data: Data, from transfer: StreamSink, mayHold: Bool) -> StreamIntake
    func pump()
    func consumerCaughtUp()
    func fail(with error: Error)
    func runAfterPump(_ completion: @escaping @Sendable () -> Void)
    func finishDelivery(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void)
}

extension StreamRequestOperation: StreamCallbacks {}
