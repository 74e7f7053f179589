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
/// A consumer slower than the server cannot hold the transfer back: on Linux, `URLSessionTask.suspend()` on a data
/// task either closes the connection and sends the request again from byte 0 on `resume()` (the new body appended
/// to the old one, with no error), or does not stop it at all, and it can crash Foundation when it meets the end of
/// the transfer (measured; see docs/reliability.md). So the bytes that wait for the consumer are bounded instead:
/// past ``StreamRequest/bufferSize`` the stream fails with ``StreamError/consumerTooSlow(bufferSize:)``.
///
/// It finishes when the stream ends, fails or is cancelled, so operations that depend on it run after it.
public final class StreamRequestOperation<R: StreamRequest>: NetworkRequestOperation<R>, @unchecked Sendable {
    /// Where elements go, until the operation finishes. Guarded by the operation's lock.
    private var sink: ElementSink<R.Element>?
    /// `self`, through an existential: the closures that run the pump must not capture `R`'s metatype.
    private var receiver: any StreamReceiver { self }
    /// Guarded by the operation's lock.
    private let stream = StreamState<R.Decoder>()

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
        sink = ElementSink(deliver: receive, isFull: { false })
        super.init(request: request, session: session, completionQueue: completionQueue, completion: completion)
    }

    /// Creates an operation that puts its elements in `buffer`, and ends it with the outcome.
    init(request: R, session: URLSession, completionQueue: DispatchQueue?, buffer: ElementBuffer<R.Element>) where R.Element: Sendable {
        sink = ElementSink(deliver: buffer.push, isFull: { buffer.isFull })
        super.init(request: request, session: session, completionQueue: completionQueue) { result in
            buffer.finish(result.map { _ in () }.mapError { $0 })
        }
        let receiver = self.receiver
        buffer.onRoom = { [weak receiver] in receiver?.consumerCaughtUp() }
    }

    /// Where the pump and the handlers run.
    private var pumpQueue: DispatchQueue {
        completionQueue ?? .global()
    }

    // MARK: - Each connection

    override func send(_ urlRequest: URLRequest, credential: TokenAuthenticator.Credential?) {
        guard let request = currentRequest else { return }
        // The request's own code, read outside the lock.
        var decoder = request.makeDecoder()
        let policy = request.reconnectPolicy
        let bufferSize = max(request.bufferSize, 1)
        let validStatusCodes = request.validHTTPStatusCodes
        let previous: R.Decoder? = withLock { stream.decoder }
        if let previous { decoder.resume(after: previous) }
        var urlRequest = urlRequest
        for (name, value) in decoder.requestHeaders {
            // The request's own headers win, except the decoder's place in the stream.
            if urlRequest.value(forHTTPHeaderField: name) == nil || name.caseInsensitiveCompare("Last-Event-ID") == .orderedSame {
                urlRequest.setValue(value, forHTTPHeaderField: name)
            }
        }
        do {
            try HeaderSafety.check(urlRequest)
        } catch {
            complete(with: .failure(error))
            return
        }
        let ready: Bool? = ifNotCompleted {
            stream.decoder = decoder
            stream.reconnectPolicy = policy
            stream.bufferSize = bufferSize
            // A reconnection must get a 200 (or a 204, which ends the stream).
            stream.validStatusCodes = stream.reconnections > 0 ? [200, 204] : validStatusCodes
            stream.startConnection()
            return true
        }
        guard ready != nil else { return }
        super.send(urlRequest, credential: credential)
    }

    override func makeTask(for urlRequest: URLRequest, rules: TransferRules, receiver: any AttemptReceiver) throws -> URLSessionTask {
        let validStatusCodes = withLock { stream.validStatusCodes }
        let transfer = StreamTransfer(receiver: receiver, streamReceiver: self, rules: rules, validStatusCodes: validStatusCodes)
        return TransferSession.task(on: session, handler: transfer) { $0.dataTask(with: urlRequest) }
    }

    /// The response has an accepted status: from now on its body is the stream's (called on the session's queue).
    func streamDidStart(_ response: HTTPURLResponse, transfer: StreamTransfer) {
        enqueue(.response(response, transfer), started: true)
    }

    /// The next bytes of the body (called on the session's queue); returns whether they are still wanted.
    func streamDidReceive(_ data: Data) -> Bool {
        enqueue(.bytes(data), bytes: data.count)
    }

    /// The connection ended: after its elements (if it streamed), or as any request's attempt ends.
    override func receive(body: ResponseBody, response: URLResponse?, error: Error?) {
        let state = ifNotCompleted { (stream.hasStarted, stream.reconnections > 0, stream.reconnectPolicy) }
        guard let (hasStarted, isReconnection, policy) = state else {
            body.discard()
            return
        }
        if hasStarted {
            enqueue(.end(error))
        } else if isReconnection, policy != nil, let error, Self.isDrop(error) {
            // The server could not be reached again: try again later, as for a connection that dropped.
            reconnect(after: error, response: nil)
        } else {
            super.receive(body: body, response: response, error: error)
        }
    }

    override func mayAttemptAgain() -> Bool {
        withLock { stream.elements == 0 && stream.reconnections == 0 }
    }

    /// Reached only by a reconnection answered with a 2xx other than 200 or 204, which ends the stream.
    override func process(_ body: ResponseBody, response: HTTPURLResponse, sent: URLRequest, of request: R) throws -> Processed<StreamSummary> {
        throw RequestQueueError.invalidStatusCode(statusCode: response.statusCode, response: response, body: body.errorPayload)
    }

    /// Whether `error` is a connection that dropped (or could not be made), after which a stream may reconnect;
    /// a limit, a decoding error or a cancellation ends it.
    private static func isDrop(_ error: Error) -> Bool {
        guard let error = error as? URLError else { return false }
        return error.code != .cancelled
    }

    // MARK: - The pump

    /// What became of an input handed to the stream.
    private enum Admission {
        case queued(startPump: Bool)
        /// The stream has its outcome, or is failing: it takes nothing more.
        case refused
        /// It would have made more than the buffer size wait: the stream fails.
        case overflowed(bufferSize: Int)
    }

    /// Queues `input` for the pump, and starts the pump unless it runs; fails the stream when too much waits.
    /// Returns whether the stream still takes input.
    @discardableResult
    private func enqueue(_ input: StreamInput, bytes: Int = 0, started: Bool = false) -> Bool {
        let admission: Admission = withLock {
            guard !isCompletedUnderLock, !stream.hasOverflowed else { return .refused }
            if started { stream.hasStarted = true }
            // A chunk costs its bytes and its bookkeeping, so that a server sending tiny pieces is bounded too.
            if case .bytes = input { stream.waitingBytes += bytes + StreamState<R.Decoder>.inputOverhead }
            stream.bytes += Int64(bytes)
            stream.connectionBytes += bytes
            guard stream.waitingBytes <= stream.bufferSize else {
                stream.hasOverflowed = true
                return .overflowed(bufferSize: stream.bufferSize)
            }
            stream.inbox.append(input)
            return .queued(startPump: stream.claimPump())
        }
        let receiver = self.receiver
        switch admission {
        case .refused:
            return false
        case let .overflowed(bufferSize):
            // Off the session's queue: the completion runs the monitors.
            DispatchQueue.global().async { receiver.fail(with: StreamError.consumerTooSlow(bufferSize: bufferSize)) }
            return false
        case let .queued(startPump):
            if startPump {
                pumpQueue.async { receiver.pump() }
            }
            return true
        }
    }

    /// Fails the stream at once, stopping its task.
    func fail(with error: Error) {
        interrupt(with: error)
    }

    /// The consumer of a buffer took an element: a parked pump goes on.
    func consumerCaughtUp() {
        let startPump: Bool = withLock {
            guard stream.isParked, !isCompletedUnderLock else { return false }
            stream.isParked = false
            return stream.claimPump()
        }
        let receiver = self.receiver
        if startPump {
            pumpQueue.async { receiver.pump() }
        }
    }

    private enum PumpStep {
        case process(StreamInput)
        case stop(then: (@Sendable () -> Void)?)
    }

    /// Processes the inbox in order, one input at a time, until it is empty, the operation has completed, or the
    /// consumer's buffer is full. Only one pump runs at a time.
    func pump() {
        while true {
            let step: PumpStep = withLock {
                if isCompletedUnderLock {
                    stream.isPumping = false
                    stream.inbox.removeAll()
                    defer { stream.deferredCompletion = nil }
                    return .stop(then: stream.deferredCompletion)
                }
                if let sink, sink.isFull() {
                    stream.isPumping = false
                    stream.isParked = true
                    return .stop(then: nil)
                }
                guard let input = stream.inbox.popFirst() else {
                    stream.isPumping = false
                    return .stop(then: nil)
                }
                return .process(input)
            }
            switch step {
            case let .process(input):
                process(input)
            case let .stop(then):
                then?()
                return
            }
        }
    }

    private func process(_ input: StreamInput) {
        switch input {
        case let .response(response, transfer):
            check(response, transfer: transfer)
        case let .bytes(data):
            decode(data)
        case let .end(error):
            end(with: error)
        }
    }

    /// Runs the validations and the decoder's check on an accepted response; a failure stops the connection.
    private func check(_ response: HTTPURLResponse, transfer: StreamTransfer) {
        guard let (validations, sent, decoder) = ifNotCompleted({ (policies.validations, run.sentRequest, stream.decoder) }) else { return }
        withLock {
            run.response = response
            stream.lastResponse = response
        }
        guard response.statusCode != 204 else {
            withLock { stream.phase = .closedByServer }
            return
        }
        do {
            if let sent {
                for validation in validations {
                    try validation.validate(sent, response: response, body: Data())
                }
            }
            try decoder?.validate(response)
            withLock {
                stream.phase = .streaming
                stream.connections += 1
            }
        } catch {
            withLock { stream.phase = .rejected(error) }
            // The task may have completed already; then the error above is the outcome all the same.
            transfer.stop(with: error)
        }
    }

    private func decode(_ data: Data) {
        let taken: R.Decoder? = withLock {
            guard case .streaming = stream.phase, let decoder = stream.decoder else { return nil }
            stream.decoder = nil  // while it decodes
            return decoder
        }
        if var decoder = taken {
            var failure: Error?
            do {
                try decoder.decode(data) { element in
                    guard deliver(element) else { throw StopDecoding() }
                }
            } catch is StopDecoding {
            } catch {
                failure = error
            }
            withLock { stream.decoder = decoder }
            if let failure {
                interrupt(with: failure)
            }
        }
        withLock { stream.waitingBytes -= data.count + StreamState<R.Decoder>.inputOverhead }
    }

    /// The operation completed while a chunk was being decoded.
    private struct StopDecoding: Error {}

    /// Hands `element` to the consumer unless the operation has completed; returns whether it did.
    private func deliver(_ element: R.Element) -> Bool {
        let sink: ElementSink<R.Element>?? = ifNotCompleted {
            stream.elements += 1
            stream.connectionElements += 1
            return self.sink
        }
        guard let sink = sink ?? nil else { return false }
        sink.deliver(element)
        return true
    }

    /// The connection's body ended (normally when `error` is `nil`), after every chunk of it was processed.
    private func end(with error: Error?) {
        let state = ifNotCompleted { () -> (StreamState<R.Decoder>.Phase, ReconnectPolicy?, Int, RequestAttempt?, TimeInterval, HTTPURLResponse?, Int) in
            run.bodyBytes = Int(clamping: stream.bytes)
            return (
                stream.phase, stream.reconnectPolicy, stream.elements, run.sentRequest.map(currentAttempt(sending:)),
                secondsSince(run.sendTime), run.response, stream.connectionBytes
            )
        }
        guard let (phase, policy, elements, attempt, duration, response, connectionBytes) = state, let attempt else { return }
        if let response {
            emit(.didReceive(attempt, response, bodyBytes: connectionBytes, duration: duration))
        }
        switch phase {
        case let .rejected(rejection):
            attemptFailed(attempt, with: rejection, response: response, duration: duration)
        case .connecting:
            attemptFailed(attempt, with: error ?? URLError(.cannotParseResponse), response: response, duration: duration)
        case .closedByServer:
            complete(with: .success(summary()))
        case .streaming:
            if let error {
                if policy != nil, Self.isDrop(error) {
                    reconnect(after: error, response: response)
                } else if elements == 0 {
                    attemptFailed(attempt, with: error, response: response, duration: duration)
                } else {
                    complete(with: .failure(error))
                }
                return
            }
            let taken: R.Decoder? = withLock {
                defer { stream.decoder = nil }
                return stream.decoder
            }
            if var decoder = taken {
                do {
                    try decoder.finish().forEach { _ = deliver($0) }
                } catch {
                    withLock { stream.decoder = decoder }
                    interrupt(with: error)
                    return
                }
                withLock { stream.decoder = decoder }
            }
            if policy?.reconnectsWhenServerCloses == true {
                reconnect(after: nil, response: response)
            } else {
                complete(with: .success(summary()))
            }
        }
    }

    /// Sends the request again after the policy's wait, or ends the stream once the policy gives up.
    private func reconnect(after error: Error?, response: HTTPURLResponse?) {
        let state = ifNotCompleted { () -> (ReconnectPolicy?, Int, R.Decoder?, RequestAttempt?, TimeInterval) in
            stream.emptyConnectionsInARow = stream.connectionElements > 0 ? 0 : stream.emptyConnectionsInARow + 1
            return (
                stream.reconnectPolicy, stream.emptyConnectionsInARow, stream.decoder,
                run.sentRequest.map(currentAttempt(sending:)), secondsSince(run.sendTime)
            )
        }
        guard let (policy, emptyInARow, decoder, attempt, duration) = state, let policy, let attempt else { return }
        guard emptyInARow < policy.maxAttempts else {
            complete(with: error.map { .failure($0) } ?? .success(summary()))
            return
        }
        // The first reconnection after a connection that delivered something waits the plain delay.
        let delay = policy.delay(afterEmptyConnections: emptyInARow, requested: decoder?.reconnectionDelay)
        withLock { stream.reconnections += 1 }
        if let error {
            emit(.didFail(attempt, error, duration: duration))
        }
        scheduleNextAttempt(after: delay, failed: attempt, isResendAfterRefresh: false)
    }

    private func summary() -> StreamSummary {
        withLock {
            StreamSummary(response: run.response ?? stream.lastResponse, elements: stream.elements, bytes: stream.bytes, connections: stream.connections)
        }
    }

    // MARK: - The end

    /// The monitors' `requestDidFinish` and the completion wait for a pump at work, so that no element is delivered
    /// beside them or after them.
    override func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        let receiver = self.receiver
        runAfterPump { receiver.finishDelivery(error, then: runCompletion) }
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

    /// Drops the sink, the decoder and any bytes still waiting for the consumer, then releases what the base holds.
    public override func releaseResources() {
        withLock {
            sink = nil
            stream.decoder = nil
            stream.inbox.removeAll()
        }
        super.releaseResources()
    }
}

/// Where a stream's elements go: a handler, or the buffer of an `AsyncThrowingStream`.
struct ElementSink<Element> {
    let deliver: (Element) -> Void
    /// Whether the pump is to wait for the consumer.
    let isFull: () -> Bool
}

/// What the session hands a stream, in order.
enum StreamInput {
    case response(HTTPURLResponse, StreamTransfer)
    case bytes(Data)
    case end(Error?)
}

/// The state of a running stream, guarded by its operation's lock.
final class StreamState<Decoder: StreamDecoder> {
    enum Phase {
        /// Waiting for the connection's response to be checked.
        case connecting
        /// The response was refused by a validation or the decoder, with this error; the connection is being stopped.
        case rejected(Error)
        /// The body is being decoded.
        case streaming
        /// A 204: the server has no (more) stream.
        case closedByServer
    }

    /// The current connection's decoder; `nil` while the pump decodes.
    var decoder: Decoder?
    var reconnectPolicy: ReconnectPolicy?
    var bufferSize = 1
    var validStatusCodes: [Int] = []
    var phase = Phase.connecting
    /// Whether the current connection's response was accepted by status, so its end goes through the pump.
    var hasStarted = false
    var inbox = Inbox()
    /// Bytes received and not decoded yet.
    var waitingBytes = 0
    /// More than the buffer size waited: the stream is failing, and takes nothing more.
    var hasOverflowed = false
    var isPumping = false
    /// The pump stopped because the consumer's buffer is full.
    var isParked = false
    var deferredCompletion: (@Sendable () -> Void)?
    var elements = 0
    var bytes: Int64 = 0
    /// Connections whose response was accepted.
    var connections = 0
    var reconnections = 0
    var connectionElements = 0
    var connectionBytes = 0
    var emptyConnectionsInARow = 0
    /// The last response accepted, kept for the summary while a reconnection waits or fails.
    var lastResponse: HTTPURLResponse?

    /// What an input costs besides its bytes, against the buffer size.
    static var inputOverhead: Int { 64 }

    func startConnection() {
        phase = .connecting
        hasStarted = false
        connectionElements = 0
        connectionBytes = 0
    }

    /// Whether the caller is to start the pump: it is not running, nor waiting for the consumer.
    func claimPump() -> Bool {
        guard !isPumping, !isParked else { return false }
        isPumping = true
        return true
    }

    /// A queue of inputs: append at the end, take from the front, both O(1) amortised.
    struct Inbox {
        private var items: [StreamInput] = []
        private var head = 0

        mutating func append(_ input: StreamInput) {
            items.append(input)
        }

        mutating func popFirst() -> StreamInput? {
            guard head < items.count else { return nil }
            let input = items[head]
            head += 1
            if head == items.count {
                items.removeAll(keepingCapacity: items.count <= 1024)
                head = 0
            } else if head >= 1024, head * 2 >= items.count {
                items.removeFirst(head)
                head = 0
            }
            return input
        }

        mutating func removeAll() {
            items.removeAll()
            head = 0
        }
    }
}

/// The callbacks of a stream's task. A response whose status the request accepts becomes a stream: its bytes go to
/// the operation as they arrive, under the limits. Any other response is an error, whose first 64 KiB are kept for
/// ``RequestQueueError/invalidStatusCode(statusCode:response:body:)``.
final class StreamTransfer: AttemptTransfer, @unchecked Sendable {
    /// The most of an error body kept: where a server's error payload is.
    static let errorBodyLimit = 64 * 1024

    private weak var streamReceiver: (any StreamReceiver)?
    private let validStatusCodes: [Int]
    // Guarded by `lock`.
    private var isStreaming = false
    private var streamed: Int64 = 0
    private var errorBody = Data()

    init(receiver: any AttemptReceiver, streamReceiver: any StreamReceiver, rules: TransferRules, validStatusCodes: [Int]) {
        self.streamReceiver = streamReceiver
        self.validStatusCodes = validStatusCodes
        super.init(receiver: receiver, rules: rules)
    }

    override func shouldAccept(_ response: URLResponse) -> Bool {
        guard super.shouldAccept(response) else { return false }
        lock.lock()
        // Bytes before these headers belong to a response the session answered itself (see `MemoryTransfer`).
        errorBody = Data()
        lock.unlock()
        guard let response = response as? HTTPURLResponse, validStatusCodes.contains(response.statusCode) else { return true }
        lock.lock()
        isStreaming = true
        lock.unlock()
        streamReceiver?.streamDidStart(response, transfer: self)
        return true
    }

    override func didReceive(_ data: Data) {
        moved(Int64(data.count))
        lock.lock()
        guard !isOverUnderLock else {
            lock.unlock()
            receivedAfterStop()
            return
        }
        guard isStreaming else {
            let room = Self.errorBodyLimit - errorBody.count
            errorBody.append(data.prefix(room))
            let isFull = data.count >= room
            let body = errorBody
            lock.unlock()
            // An error body that goes on and on is not waited for.
            if isFull { stop(keeping: .data(body)) }
            return
        }
        streamed += Int64(data.count)
        let tooLarge = rules.limits.maximumBodySize.map { streamed > $0 } ?? false
        // Handed over under the lock, so that no chunk can follow the end of an attempt that a rule stopped from
        // another thread (the minimum-speed watchdog).
        let wanted = !tooLarge && streamReceiver?.streamDidReceive(data) == true
        lock.unlock()
        if tooLarge, let limit = rules.limits.maximumBodySize {
            stop(with: TransferLimitError.responseTooLarge(limit: limit))
        } else if !wanted {
            // A stream that has its outcome wants no more. Its operation has cancelled the task; if Linux ignored that
            // cancel (one that comes too early), the bytes that keep coming cancel it again, so that it does not run
            // on for nobody.
            abandon()
        }
    }

    override func dropBody() {
        lock.lock()
        errorBody = Data()
        lock.unlock()
    }

    override func didComplete(response: URLResponse?, error: Error?) {
        lock.lock()
        let body = errorBody
        errorBody = Data()
        lock.unlock()
        finish(body: .data(body), response: response, error: error)
    }
}

/// A stream operation as the transfer and the pump's closures see it: an existential, so that they do not capture
/// the operation's generic type.
protocol StreamReceiver: AnyObject, Sendable {
    func streamDidStart(_ response: HTTPURLResponse, transfer: StreamTransfer)
    func streamDidReceive(_ data: Data) -> Bool
    func pump()
    func consumerCaughtUp()
    func fail(with error: Error)
    func runAfterPump(_ completion: @escaping @Sendable () -> Void)
    func finishDelivery(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void)
}

extension StreamRequestOperation: StreamReceiver {}
