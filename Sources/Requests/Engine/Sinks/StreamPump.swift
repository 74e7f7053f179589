#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The pump of a ``StreamRequestOperation``: the session's callbacks queue what arrives (the response, the bytes, the
/// end), and one pump at a time, on the completion queue, checks the response, decodes the bytes and hands each element
/// to the consumer, in order. The bytes waiting for it are bounded by ``StreamRequest/bufferSize``.
extension StreamRequestOperation {

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
    func enqueue(_ input: StreamInput, bytes: Int = 0, started: Bool = false) -> Bool {
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
        let streamCallbacks = self.streamCallbacks
        switch admission {
        case .refused:
            return false
        case let .overflowed(bufferSize):
            // Off the session's queue: the completion runs the monitors.
            DispatchQueue.global().async { streamCallbacks.fail(with: StreamError.consumerTooSlow(bufferSize: bufferSize)) }
            return false
        case let .queued(startPump):
            if startPump {
                pumpQueue.async { streamCallbacks.pump() }
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
        let streamCallbacks = self.streamCallbacks
        if startPump {
            pumpQueue.async { streamCallbacks.pump() }
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
                    return .stop(then: stream.deferredCompletion.take())
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

    func process(_ input: StreamInput) {
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
    func check(_ response: HTTPURLResponse, transfer: StreamSink) {
        guard let (validations, sent, decoder) = ifNotCompleted({ (policies.validations, run.sentRequest, stream.decoder) }) else { return }
        withLock { (run.response, stream.lastResponse) = (response, response) }
        guard response.statusCode != 204 else {
            withLock { stream.phase = .closedByServer }
            return
        }
        do {
            if let sent {
                try Self.validate(response, sent: sent, body: Data(), with: validations)
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

    func decode(_ data: Data) {
        // Taken while it decodes.
        let taken: R.Decoder? = withLock {
            guard case .streaming = stream.phase else { return nil }
            return stream.decoder.take()
        }
        if var decoder = taken {
            let decoded = Result { try decoder.decode(data) { guard deliver($0) else { throw StopDecoding() } } }
            withLock { stream.decoder = decoder }
            if case let .failure(error) = decoded, !(error is StopDecoding) {
                interrupt(with: error)
            }
        }
        withLock { stream.waitingBytes -= data.count + StreamState<R.Decoder>.inputOverhead }
    }

    /// The operation completed while a chunk was being decoded.
    private struct StopDecoding: Error {}

    /// Hands `element` to the consumer unless the operation has completed; returns whether it did.
    func deliver(_ element: R.Element) -> Bool {
        let sink: ElementSink<R.Element>?? = ifNotCompleted {
            stream.elements += 1
            stream.connectionElements += 1
            return self.sink
        }
        guard let sink = sink ?? nil else { return false }
        sink.deliver(element)
        return true
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
    case response(HTTPURLResponse, StreamSink)
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
    var connectionElements = 0
    var connectionBytes = 0
    var emptyConnectionsInARow = 0
    /// When the reconnections within the policy's window were made (monotonic nanoseconds), at most its cap.
    var reconnectionTimes: [UInt64] = []
    /// The server's reconnection delay at the last reconnection, so that a raised one is told once per value.
    var lastServerDelay: TimeInterval?
    /// The last response accepted, kept for the summary while a reconnection waits or fails.
    var lastResponse: HTTPURLResponse?

    /// What an input costs besides its bytes, against the buffer size.
    static var inputOverhead: Int { 64 }

    func startConnection() {
        (phase, hasStarted, connectionElements, connectionBytes) = (.connecting, false, 0, 0)
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
