#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The pump of a ``StreamRequestOperation``: the session's callbacks queue what arrives (the response, the bytes, the
/// end), and one pump at a time, on the completion queue, checks the response, decodes the bytes and hands each element
/// to the consumer, in order. The consumer's lag is bounded by ``StreamRequest/bufferSize``; the library's own lag is
/// kept in memory up to a quarter of that, and beyond it in a private temporary file (``StreamState``).
extension StreamRequestOperation {

    /// What became of an input handed to the stream.
    private enum Admission {
        case queued(startPump: Bool)
        /// Held back: the transport pauses until the pump has caught up.
        case heldBack
        /// The stream has its outcome, or is failing: it takes nothing more.
        case refused
        /// The consumer's lag passed the buffer size: the stream fails.
        case overflowed(bufferSize: Int)
        /// The spill file could not be made or written: the stream fails with that error.
        case failed(Error)
    }

    /// Queues `input` for the pump, and starts the pump unless it runs; fails the stream when the consumer lags by
    /// more than the buffer size. Returns whether the stream still takes input.
    ///
    /// Bytes from a transport that can pause (`holdingBackFor`, libcurl's) are held back instead, before the consumer's
    /// lag would pass the buffer size or the inbox its memory limit: the transport pauses, and the pump resumes it once
    /// it has emptied the inbox. So on such a transport a slow consumer slows the server down (TCP's own flow control)
    /// and the stream neither fails as too slow nor spills to disk.
    @discardableResult
    func enqueue(_ input: StreamInput, bytes: Int = 0, started: Bool = false, holdingBackFor transfer: StreamSink? = nil) -> StreamIntake {
        let admission: Admission = withLock {
            guard !isCompletedUnderLock, !stream.hasOverflowed else { return .refused }
            if let transfer, stream.shouldHoldBack(bytes, offered: { sink?.offeredBytes() ?? 0 }) {
                stream.pausedTransfer = transfer
                return .heldBack
            }
            if started {
                stream.hasStarted = true
                stream.recording?.headArrived()
            }
            stream.bytes += Int64(bytes)
            stream.connectionBytes += bytes
            if stream.recording != nil, case let .bytes(data) = input {
                // The one place every piece of the body passes, as it arrives and in order.
                stream.recording?.received(data)
            }
            if case .bytes = input, !stream.admitsArrival(of: bytes, offered: { sink?.offeredBytes() ?? 0 }) {
                stream.hasOverflowed = true
                return .overflowed(bufferSize: stream.bufferSize)
            }
            do {
                try stream.inbox.append(input, memoryLimit: stream.memoryLimit)
            } catch {
                stream.hasOverflowed = true
                return .failed(error)
            }
            return .queued(startPump: stream.claimPump())
        }
        let streamCallbacks = self.streamCallbacks
        switch admission {
        case .refused:
            return .refused
        case .heldBack:
            return .heldBack
        case let .overflowed(bufferSize):
            // Off the session's queue: the completion runs the monitors.
            DispatchQueue.global().async { streamCallbacks.fail(with: StreamError.consumerTooSlow(bufferSize: bufferSize)) }
            return .refused
        case let .failed(error):
            DispatchQueue.global().async { streamCallbacks.fail(with: error) }
            return .refused
        case let .queued(startPump):
            if startPump {
                pumpQueue.async { streamCallbacks.pump() }
            }
            return .taken
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
        /// Read back `count` bytes of the spill file and decode them.
        case readSpill(StreamSpill?, count: Int)
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
                    stream.beginHold(inConsumer: false)
                    return .stop(then: nil)
                }
                switch stream.inbox.popFirst() {
                case nil:
                    stream.isPumping = false
                    // Caught up: a transport held back (see `enqueue`) goes on.
                    guard let paused = stream.pausedTransfer.take() else { return .stop(then: nil) }
                    return .stop(then: { paused.resumeTransport() })
                case let .input(input)?:
                    return .process(input)
                case let .spilled(count)?:
                    return .readSpill(stream.inbox.spill, count: count)
                }
            }
            switch step {
            case let .process(input):
                process(input)
            case let .readSpill(spill, count):
                readBack(count, from: spill)
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

    /// Reads back the next `count` bytes the inbox spilled, and decodes them; a failed read fails the stream.
    func readBack(_ count: Int, from spill: StreamSpill?) {
        do {
            // The file exists while spilled bytes wait.
            guard let spill else { throw POSIXError(.EBADF) }
            let data = try spill.read(count)
            withLock { stream.inbox.spillWasRead() }
            decode(data)
        } catch {
            interrupt(with: error)
        }
    }

    /// Runs the validations and the decoder's check on an accepted response; a failure stops the connection.
    func check(_ response: HTTPURLResponse, transfer: StreamSink) {
        guard let (validations, sent, decoder) = ifNotCompleted({ (policies.validations, run.sentRequest, currentDecoder) }) else { return }
        withLock { (run.response, stream.lastResponse) = (response, response) }
        // A response without a body (a 204, which also says not to reconnect) ends the stream, with no element.
        guard ResponseBodyRule.hasBody(status: response.statusCode, method: sent?.httpMethod) else {
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
        // Taken while it decodes; the sink, once per chunk.
        let taken: (R.Decoder, ElementSink<R.Element>)? = withLock {
            guard case .streaming = stream.phase, let sink, let decoder = currentDecoder.take() else { return nil }
            // Counted with the next element delivered (see `deliver`).
            stream.unofferedBytes += data.count
            return (decoder, sink)
        }
        if let (taken, sink) = taken {
            var decoder = taken
            let decoded = Result { try decoder.decode(data) { guard deliver($0, to: sink) else { throw StopDecoding() } } }
            withLock { currentDecoder = decoder }
            sink.flush()
            if case let .failure(error) = decoded, !(error is StopDecoding) {
                interrupt(with: error)
            }
        }
        withLock { stream.decoded(data.count) }
    }

    /// The operation completed while a chunk was being decoded.
    private struct StopDecoding: Error {}

    /// Hands `element` to `sink` unless the operation has completed; returns whether it did. Only the lock is taken
    /// per element, and a handler's call is a hold of the pump (see ``StreamState/consumerLag``).
    func deliver(_ element: R.Element, to sink: ElementSink<R.Element>) -> Bool {
        let runsConsumer = sink.runsConsumer
        let offered: Int? = withLock { isCompletedUnderLock ? nil : stream.offer(holding: runsConsumer) }
        guard let bytes = offered else { return false }
        sink.deliver(element, bytes)
        if runsConsumer {
            withLock { stream.isInConsumer = false }
        }
        return true
    }

}

/// Where a stream's elements go: a handler, or the buffer of an `AsyncThrowingStream`.
struct ElementSink<Element> {
    /// Hands over an element, with the bytes of the body it stands for.
    let deliver: (Element, Int) -> Void
    /// Whether the pump is to wait for the consumer.
    let isFull: () -> Bool
    /// The bytes of the elements offered to the consumer and not taken yet (those of a buffer).
    let offeredBytes: () -> Int
    /// Hands what was delivered to a consumer that waits (after each chunk).
    let flush: () -> Void
    /// Whether ``deliver`` runs the consumer's code (a handler), so that the consumer holds the pump meanwhile.
    let runsConsumer: Bool

    /// A handler: it takes each element as it is offered.
    init(handler: @escaping (Element) -> Void) {
        deliver = { element, _ in handler(element) }
        isFull = { false }
        offeredBytes = { 0 }
        flush = {}
        runsConsumer = true
    }

    /// The buffer of an `AsyncThrowingStream`: the consumer holds the pump only while the buffer is full.
    init(buffer: ElementBuffer<Element>) where Element: Sendable {
        deliver = { buffer.push($0, bytes: $1) }
        isFull = { buffer.isFull }
        offeredBytes = { buffer.offeredBytes }
        flush = { buffer.flush() }
        runsConsumer = false
    }
}

/// What became of a piece of a stream's body handed to its operation.
enum StreamIntake {
    case taken
    /// The stream wants no more: it has its outcome, or is failing.
    case refused
    /// Not taken, to be offered again: the consumer is behind, and the transport pauses meanwhile.
    case heldBack
}

/// What the session hands a stream, in order.
enum StreamInput {
    case response(HTTPURLResponse, StreamSink)
    case bytes(Data)
    case end(Error?)
}
