#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The state of a running stream, guarded by its operation's lock.
///
/// Two kinds of waiting are told apart (see ``StreamRequestOperation`` and the Streams article). The consumer's lag
/// (``consumerLag``) is what ``StreamRequest/bufferSize`` bounds; the library's own lag (bytes the pump has not
/// reached yet) never fails the stream, and is kept in memory up to ``memoryLimit``, beyond which it waits in a
/// private temporary file (``StreamSpill``).
final class StreamState {
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

    var reconnectPolicy: ReconnectPolicy?
    var bufferSize = 1
    var phase = Phase.connecting
    /// Whether the current connection's response was accepted by status, so its end goes through the pump.
    var hasStarted = false
    var inbox = Inbox()
    /// The consumer's lag, besides the bytes its buffer holds: the bytes that arrived while the consumer held the pump
    /// (``isParked`` or ``isInConsumer``), at most ``holdShare`` for one hold, less those that arrived while the library
    /// worked on the stream and those the pump has decoded since, never below 0. It grows only while the consumer holds
    /// the pump for longer than the library works, again and again, and takes fewer bytes than arrive meanwhile: while
    /// the consumer, not the library, falls behind. One hold that a busy machine stretches (the pump's thread
    /// descheduled inside an empty handler) cannot fail the stream by itself.
    var consumerLag = 0
    /// The bytes that arrived during the current hold.
    private var holdBytes = 0
    /// More than the buffer size of the consumer's lag: the stream is failing, and takes nothing more.
    var hasOverflowed = false
    var isPumping = false
    /// The pump stopped because the consumer's buffer is full.
    var isParked = false
    /// The pump is inside the consumer's handler (or hands an element to the buffer).
    var isInConsumer = false
    /// Bytes decoded since the last element delivered: the next element stands for them.
    var unofferedBytes = 0
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
    /// The current connection's body as a recording monitor keeps it; `nil` without one.
    var recording: StreamRecording?

    /// What an input costs besides its bytes, against the buffer size and the memory limit.
    static var inputOverhead: Int { 64 }

    /// The most bytes the inbox keeps in memory: a quarter of the buffer size, at least 1 MiB. (What waits beyond it
    /// waits on disk: the same work for the session's thread whatever the limit, once the library lags for good.)
    var memoryLimit: Int {
        max(bufferSize / 4, 1 << 20)
    }

    /// The most one hold adds to the consumer's lag: a quarter of the buffer size.
    var holdShare: Int {
        max(bufferSize / 4, 1)
    }

    /// The consumer takes the pump: its handler runs (`inConsumer`), or the pump parks.
    func beginHold(inConsumer: Bool) {
        if inConsumer { isInConsumer = true } else { isParked = true }
        holdBytes = 0
    }

    /// An element is offered (the consumer holds the pump while it takes it when `holding`); returns the bytes it
    /// stands for.
    func offer(holding: Bool) -> Int {
        elements += 1
        connectionElements += 1
        if holding { beginHold(inConsumer: true) }
        defer { unofferedBytes = 0 }
        return unofferedBytes
    }

    /// `bytes` bytes of the body arrived: returns whether the consumer's lag, with the bytes `offered` to it and not
    /// taken, stays within the buffer size. Bytes that arrive while the consumer holds the pump are its lag (a quarter
    /// of the buffer size at most for one hold); those that arrive while the library works on the stream are the
    /// library's, and offset it. A chunk costs its bytes and its bookkeeping, so that tiny pieces are bounded too.
    func admitsArrival(of bytes: Int, offered: () -> Int) -> Bool {
        let cost = bytes + Self.inputOverhead
        if consumerHoldsPump {
            consumerLag += max(min(cost, holdShare - holdBytes), 0)
            holdBytes += cost
            return consumerLag + offered() <= bufferSize
        }
        if isPumping {
            consumerLag = max(consumerLag - cost, 0)
        }
        return true
    }

    /// The stream's transfer, while a transport that can pause holds its body back (see `StreamPump`).
    var pausedTransfer: StreamSink?

    /// Whether a transport that can pause is to hold back `bytes`: when taking them would make the consumer's lag
    /// (with the bytes `offered` and not taken) pass the buffer size, as ``admitsArrival(of:offered:)`` counts it, or
    /// the inbox hold more than its memory limit. A piece is always taken while the inbox is empty and the consumer
    /// does not hold the pump, so that any piece size gets through.
    func shouldHoldBack(_ bytes: Int, offered: () -> Int) -> Bool {
        let cost = bytes + Self.inputOverhead
        if consumerHoldsPump, consumerLag + max(min(cost, holdShare - holdBytes), 0) + offered() > bufferSize { return true }
        return inbox.memoryBytes > 0 && inbox.memoryBytes + cost > memoryLimit
    }

    /// Whether the consumer holds the pump: bytes that arrive now are the consumer's lag.
    var consumerHoldsPump: Bool {
        isParked || isInConsumer
    }

    func startConnection() {
        (phase, hasStarted, connectionElements, connectionBytes, unofferedBytes) = (.connecting, false, 0, 0, 0)
    }

    /// Whether the caller is to start the pump: it is not running, nor waiting for the consumer.
    func claimPump() -> Bool {
        guard !isPumping, !isParked else { return false }
        isPumping = true
        return true
    }

    /// The pump decoded `bytes` bytes of the body.
    func decoded(_ bytes: Int) {
        consumerLag = max(consumerLag - bytes - Self.inputOverhead, 0)
    }

    /// What the pump takes next.
    enum Entry {
        case input(StreamInput)
        /// The next `count` bytes of the spill file.
        case spilled(Int)
    }

    /// A queue of inputs, in order: append at the end, take from the front, both O(1) amortised. Bytes go to memory
    /// up to a limit; past it, and until the file is read back, they go to the spill file, and the queue holds only
    /// how many (consecutive spilled chunks make one entry), so that what follows them stays in order.
    struct Inbox {
        private var items: [Entry] = []
        private var head = 0
        /// Bytes (and overheads) of the chunks held in memory.
        private(set) var memoryBytes = 0
        /// Bytes in the spill file not yet taken by the pump.
        private(set) var spilledBytes = 0
        /// The file, once the inbox has spilled; it lives until the stream is released.
        private(set) var spill: StreamSpill?

        /// The most bytes read back from the file at a time.
        static var spillPiece: Int { 64 * 1024 }

        /// Queues `input`; bytes beyond `memoryLimit` (or behind bytes already in the file) go to the file.
        mutating func append(_ input: StreamInput, memoryLimit: Int) throws {
            guard case let .bytes(data) = input else {
                items.append(.input(input))
                return
            }
            let cost = data.count + StreamState.inputOverhead
            if spilledBytes == 0, memoryBytes + cost <= memoryLimit {
                memoryBytes += cost
                items.append(.input(input))
                return
            }
            let spill = try self.spill ?? StreamSpill()
            self.spill = spill
            try spill.append(data)
            spilledBytes += data.count
            if head < items.count, case let .spilled(count) = items[items.count - 1] {
                items[items.count - 1] = .spilled(count + data.count)
            } else {
                items.append(.spilled(data.count))
            }
        }

        /// The next entry; a spilled run is taken `spillPiece` bytes at a time.
        mutating func popFirst() -> Entry? {
            guard head < items.count else { return nil }
            let entry = items[head]
            switch entry {
            case let .spilled(count) where count > Self.spillPiece:
                items[head] = .spilled(count - Self.spillPiece)
                spilledBytes -= Self.spillPiece
                return .spilled(Self.spillPiece)
            case let .spilled(count):
                spilledBytes -= count
            case let .input(.bytes(data)):
                memoryBytes -= data.count + StreamState.inputOverhead
            case .input:
                break
            }
            head += 1
            if head == items.count {
                items.removeAll(keepingCapacity: items.count <= 1024)
                head = 0
            } else if head >= 1024, head * 2 >= items.count {
                items.removeFirst(head)
                head = 0
            }
            return entry
        }

        /// The pump has read back what it took from the file: once nothing more waits there, the file starts again
        /// from empty, so that it holds at most the longest lag, not the whole body.
        mutating func spillWasRead() {
            if spilledBytes == 0 { spill?.rewind() }
        }

        /// Drops every input, and closes the file (already unlinked).
        mutating func removeAll() {
            items.removeAll()
            head = 0
            (memoryBytes, spilledBytes) = (0, 0)
            spill?.close()
            spill = nil
        }
    }
}

/// The bytes a stream's pump has not reached yet beyond what its inbox keeps in memory: a file of this user only
/// (mode `0600`, in ``PrivateFolder/requestsFolder()``), unlinked as soon as it is open, so that nothing is left of
/// it however the stream ends, the process included. Written at the end (under the operation's lock) and read in
/// order (by the pump, one at a time).
final class StreamSpill: @unchecked Sendable {
    private let writer: FileHandle
    private let reader: Int32
    // Guarded by the operation's lock.
    private var writeOffset: off_t = 0
    // The pump's own, and reset under the lock when nothing waits in the file.
    private var readOffset: off_t = 0
    private var isClosed = false

    init() throws {
        let url = try PrivateFolder.requestsFolder().appendingPathComponent("stream-\(UUID().uuidString).spill")
        writer = try PrivateFolder.createFile(at: url)
        reader = open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        let openError = errno
        PrivateFolder.removeFile(at: url)
        guard reader >= 0 else { throw Self.error(openError) }
    }

    func append(_ data: Data) throws {
        let written = data.withUnsafeBytes { buffer -> Int in
            guard let base = buffer.baseAddress else { return 0 }
            var done = 0
            while done < buffer.count {
                let count = pwrite(writer.fileDescriptor, base + done, buffer.count - done, writeOffset + off_t(done))
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { return -1 }
                done += count
            }
            return done
        }
        guard written == data.count else { throw Self.error(errno) }
        writeOffset += off_t(written)
    }

    /// The next `count` bytes, which were written whole before they were queued.
    func read(_ count: Int) throws -> Data {
        var data = Data(count: count)
        let read = data.withUnsafeMutableBytes { buffer -> Int in
            guard let base = buffer.baseAddress else { return 0 }
            var done = 0
            while done < count {
                let got = pread(reader, base + done, count - done, readOffset + off_t(done))
                if got < 0, errno == EINTR { continue }
                guard got > 0 else { return -1 }
                done += got
            }
            return done
        }
        guard read == count else { throw Self.error(errno) }
        readOffset += off_t(count)
        return data
    }

    /// Nothing waits in the file: it starts again from empty.
    func rewind() {
        _ = ftruncate(writer.fileDescriptor, 0)
        (writeOffset, readOffset) = (0, 0)
    }

    /// The error of a failed call: its `errno`, or `EIO` (a read that met the end of the file).
    private static func error(_ code: Int32) -> POSIXError {
        POSIXError((code == 0 ? nil : POSIXErrorCode(rawValue: code)) ?? .EIO)
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        try? writer.close()
        _ = Foundation.close(reader)
    }

    deinit {
        close()
    }
}
