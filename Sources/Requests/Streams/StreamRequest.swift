#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request whose response body is handed over as it arrives, decoded into elements by its ``Decoder``: raw
/// chunks (``DataChunkDecoder``, the default), lines (``LineDecoder``), JSON lines (``JSONLinesDecoder``) or
/// server-sent events (``ServerSentEventDecoder``).
///
/// It runs as a ``StreamRequestOperation``, which finishes when the stream ends, fails or is cancelled, and succeeds
/// with a ``StreamSummary``. Add it with `addRequest(_:receive:completion:)`, or read it with
/// `for try await element in queue.stream(for: request)`.
///
/// ```swift
/// struct Ticker: StreamRequest {
///     let identifier = "ticker"
///     func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
///     func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
///         completion(.success(URLRequest(url: URL(string: "https://example.com/ticker")!)))
///     }
/// }
/// ```
public protocol StreamRequest: NetworkRequest where Success == StreamSummary {
    /// Turns the body's bytes into elements. Default: ``DataChunkDecoder``, the bytes as they arrive.
    associatedtype Decoder: StreamDecoder = DataChunkDecoder
    /// What the stream yields.
    typealias Element = Decoder.Element

    /// A decoder for one connection. Called again for each reconnection, and the new decoder is given the last one
    /// (``StreamDecoder/resume(after:)``).
    func makeDecoder() -> Decoder

    /// Whether, and when, the stream reconnects once a connection that had been accepted ends. Default: `nil` (a
    /// dropped connection fails the stream), except for server-sent events (``ReconnectPolicy/default``).
    var reconnectPolicy: ReconnectPolicy? { get }

    /// The most the consumer may lag behind the server, in bytes; past it, the stream fails with
    /// ``StreamError/consumerTooSlow(bufferSize:)`` (URLSession cannot hold a transfer back on Linux; see
    /// ``StreamRequestOperation``). On Linux's opt-in libcurl transport the transfer is paused instead, before the lag
    /// passes this size, and the stream does not fail. Default: ``defaultBufferSize``.
    ///
    /// Only the consumer's own lag counts: the bytes that arrive while the consumer holds the stream (its handler
    /// runs, or a `for try await` loop has not taken the elements offered to it, half this size of them), at most a
    /// quarter of this size for one such hold, less the bytes that arrive while the library decodes and the bytes
    /// decoded; plus, for a loop, the bytes of the elements it has been offered and not taken. So a consumer fails only
    /// when it holds the stream longer than the library works on it, again and again: an empty consumer never fails,
    /// however fast the server, and one that sleeps 50 ms an element on a fast stream fails within a few elements.
    /// The library's own lag (a decoder slower than the network) never fails the stream: up to a quarter of this size
    /// waits in memory, and the rest in a private temporary file, unlinked as soon as it is open, read back in order.
    var bufferSize: Int { get }
}

extension StreamRequest {
    /// 8 MiB: seconds of a fast stream, and small in memory.
    public static var defaultBufferSize: Int { 8 * 1024 * 1024 }

    /// ``TransferLimits/stream``, and not the queue's: a queue's limits are written for whole responses (a body
    /// limit and a minimum speed would end a long or quiet stream). Return your own to bound a stream.
    public var limits: TransferLimits? { .stream }
    /// `nil`: a dropped connection ends the stream with its error.
    public var reconnectPolicy: ReconnectPolicy? { nil }
    /// ``defaultBufferSize``.
    public var bufferSize: Int { Self.defaultBufferSize }
}

extension StreamRequest where Decoder == DataChunkDecoder {
    /// A ``DataChunkDecoder``.
    public func makeDecoder() -> DataChunkDecoder { DataChunkDecoder() }
}

extension StreamRequest where Decoder == ServerSentEventDecoder {
    /// ``ReconnectPolicy/default``: an event stream reconnects, as a browser's `EventSource` does.
    public var reconnectPolicy: ReconnectPolicy? { .default }
}

extension TransferLimits {
    /// What a stream is held to unless its request says otherwise: no total size (each decoder bounds what it
    /// holds, and the buffer bounds the rest), no deadline and no minimum speed, since a quiet stream is still a
    /// stream. URLSession's idle timeout (the request's `timeoutInterval`) still ends a connection that stalls.
    public static let stream = TransferLimits(maximumBodySize: nil, maximumDownloadSize: nil, deadline: nil, minimumSpeed: nil)
}

/// How a stream ended.
public struct StreamSummary: Sendable {
    /// The response of the last connection.
    public let response: HTTPURLResponse?
    /// The elements delivered.
    public let elements: Int
    /// The body bytes received, over every connection.
    public let bytes: Int64
    /// The connections whose response was accepted and streamed (a 204 that ends the stream is not counted).
    public let connections: Int
}

/// When a stream reconnects after a connection that had been accepted (a 2xx that passed the checks) ends: after a
/// transport error, and, with ``reconnectsWhenServerCloses``, after a normal end. A reconnection sends the request
/// again, built anew (so adapters and the authenticator run again), with the decoder's headers (an event stream's
/// `Last-Event-ID`). It ends the stream instead when its response is a 204 (a success) or any status but 200 (a
/// failure, with no token refresh: a 401 ends it), and after ``maxAttempts`` connections in a row that delivered no
/// element. A limit, a decoding error or a cancellation ends the stream; only a dropped connection reconnects.
///
/// A server cannot make a stream reconnect as fast as it likes: its `retry` field is raised to
/// ``minimumServerDelay``, and at most ``maxReconnections`` reconnections are made within any
/// ``reconnectionWindow``, even when every connection delivers events; the next one fails the stream with
/// ``StreamError/tooManyReconnections(limit:window:)``.
///
/// A stream whose first connection fails before it is accepted is handled by the request's ``RetryPolicy``, like
/// any request, and only while no element has been delivered.
public struct ReconnectPolicy: Sendable, Equatable {
    /// The wait before a reconnection, unless the server set one (an event stream's `retry` field). Default: 3 s,
    /// what browsers use.
    public var delay: TimeInterval
    /// Each reconnection in a row that delivers nothing waits this many times longer. Default: 2.
    public var backoffMultiplier: Double
    /// The longest wait. Default: 60 s.
    public var maxDelay: TimeInterval
    /// Connections in a row that deliver no element (the one that just ended included) after which the stream
    /// no longer reconnects: it fails with the last connection's error, or, after a normal end with
    /// ``reconnectsWhenServerCloses``, succeeds. An event stream that only sends comments counts as delivering
    /// nothing. Default: 10.
    public var maxAttempts: Int
    /// Whether a normal end of the body also reconnects, as `EventSource` does. Default: `false`: the stream
    /// succeeds, so that a finite stream (an answer streamed token by token, often sent with POST) is not sent again.
    public var reconnectsWhenServerCloses: Bool
    /// The shortest wait before a reconnection that the server can ask for (an event stream's `retry` field): a
    /// smaller value is raised to it, and monitors get ``RequestNotice/reconnectionDelayRaised(requested:applied:)``
    /// (once each time the server's value changes). Neither the backoff nor ``maxDelay`` brings a wait the server
    /// set below it. It does not apply to ``delay``, which is yours. Lower it (`0` honours any `retry`) only for a
    /// server you trust: a `retry: 0` and one event per connection otherwise reconnect hundreds of times a second.
    /// Default: 1 s. A negative value counts as 0, one that is not a number as the default.
    public var minimumServerDelay: TimeInterval
    /// The most reconnections within any ``reconnectionWindow``, whether or not each connection delivered events;
    /// the one past it fails the stream with ``StreamError/tooManyReconnections(limit:window:)``. It bounds what
    /// ``maxAttempts`` cannot: a server that drops the connection after each event. Default: 30. A negative value
    /// counts as 0 (no reconnection at all).
    public var maxReconnections: Int
    /// The span, in seconds on a monotonic clock, over which ``maxReconnections`` are counted: a reconnection older
    /// than this no longer counts. Default: 60 s. `.infinity` counts every reconnection of the stream; `0` or less
    /// turns the cap off; a value that is not a number counts as the default.
    public var reconnectionWindow: TimeInterval

    /// A policy with the defaults above, each of which can be changed here.
    public init(
        delay: TimeInterval = 3,
        backoffMultiplier: Double = 2,
        maxDelay: TimeInterval = 60,
        maxAttempts: Int = 10,
        reconnectsWhenServerCloses: Bool = false,
        minimumServerDelay: TimeInterval = ReconnectPolicy.defaultMinimumServerDelay,
        maxReconnections: Int = ReconnectPolicy.defaultMaxReconnections,
        reconnectionWindow: TimeInterval = ReconnectPolicy.defaultReconnectionWindow
    ) {
        self.delay = delay
        self.backoffMultiplier = backoffMultiplier
        self.maxDelay = maxDelay
        self.maxAttempts = maxAttempts
        self.reconnectsWhenServerCloses = reconnectsWhenServerCloses
        self.minimumServerDelay = minimumServerDelay
        self.maxReconnections = maxReconnections
        self.reconnectionWindow = reconnectionWindow
    }

    /// The policy with every default.
    public static let `default` = ReconnectPolicy()
    /// 1 s: about what a browser's `EventSource` waits at least, and a thousand times slower than `retry: 0`.
    public static let defaultMinimumServerDelay: TimeInterval = 1
    /// 30: a stream that drops every two seconds, for a minute, is not working.
    public static let defaultMaxReconnections = 30
    /// 60 s.
    public static let defaultReconnectionWindow: TimeInterval = 60

    /// ``minimumServerDelay`` as it applies: 0 to a day.
    var serverDelayFloor: TimeInterval {
        minimumServerDelay.isNaN ? Self.defaultMinimumServerDelay : min(max(minimumServerDelay, 0), 86_400)
    }

    /// The server's `requested` wait as the policy lets it apply: at least ``serverDelayFloor``.
    func serverDelay(_ requested: TimeInterval) -> TimeInterval {
        max(requested.isNaN ? 0 : requested, serverDelayFloor)
    }

    /// The wait before a reconnection that follows `failures` connections in a row that delivered nothing, from
    /// ``delay`` or the server's `requested` wait (never below ``serverDelayFloor``).
    func delay(afterEmptyConnections failures: Int, requested: TimeInterval?) -> TimeInterval {
        let base = requested.map(serverDelay) ?? delay
        let wait = base * pow(max(backoffMultiplier, 1), Double(min(failures, 64)))
        let capped = min(max(wait.isNaN ? 0 : wait, 0), max(maxDelay, 0))
        return requested == nil ? capped : max(capped, serverDelayFloor)
    }

    /// ``reconnectionWindow`` as it applies: the default when it is not a number.
    var windowSpan: TimeInterval {
        reconnectionWindow.isNaN ? Self.defaultReconnectionWindow : reconnectionWindow
    }

    /// Whether one more reconnection, at `now` (monotonic nanoseconds), stays within ``maxReconnections`` per
    /// ``reconnectionWindow``. `recent` holds the times of the earlier ones: it is pruned to the window and, when the
    /// reconnection is admitted, gets `now`; it never holds more than ``maxReconnections`` times.
    func admitsReconnection(at now: UInt64, recent: inout [UInt64]) -> Bool {
        let window = windowSpan
        guard window > 0 else {
            recent.removeAll()
            return true
        }
        if window.isFinite, window * 1e9 < Double(UInt64.max) {
            let span = UInt64(window * 1e9)
            recent.removeAll { now &- $0 >= span }
        }
        guard recent.count < max(maxReconnections, 0) else { return false }
        recent.append(now)
        return true
    }
}

extension OperationQueue {
    /// Runs `request` as an operation of this queue: `receive` gets each element as it is decoded, in order, on
    /// `completionQueue`, and then `completion` gets the outcome, exactly once, after the last element. No element
    /// comes after the completion, not even after a cancellation.
    ///
    /// ```swift
    /// queue.addRequest(Ticker(), completionQueue: .main) { event in
    ///     label.text = event.data
    /// } completion: { result in
    ///     print(result)
    /// }
    /// ```
    ///
    /// When `completionQueue` is `nil`, both run on this queue's `underlyingQueue` if set, or else on a global queue,
    /// one call at a time. Decoding runs there too, between calls.
    @discardableResult
    public func addRequest<T: StreamRequest>(
        _ request: T,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        receive: @escaping (T.Element) -> Void,
        completion: T.CompletionType? = nil
    ) -> StreamRequestOperation<T> {
        let operation = StreamRequestOperation(
            request: request, session: session, completionQueue: completionQueue ?? underlyingQueue,
            receive: receive, completion: completion
        )
        register(operation, for: request)
        addOperation(operation)
        return operation
    }

    /// Runs `request` as an operation of this queue, after `dependencies`, and returns its elements as they
    /// arrive. The stream throws the request's failure (mapped with its `mapError`), and ends after the last element
    /// on success.
    ///
    /// ```swift
    /// for try await event in queue.stream(for: Ticker()) {
    ///     print(event.data)
    /// }
    /// ```
    ///
    /// Breaking out of the loop, or cancelling the `Task`, cancels the operation and closes its connection. A cancelled
    /// `Task`'s loop throws the cancellation if it was waiting for an element; if the cancel came while the loop's
    /// body ran, the loop ends without an error, as every `AsyncThrowingStream` does: check `Task.isCancelled` after
    /// it when that matters. While the consumer is busy, the
    /// elements decoded from half the request's ``StreamRequest/bufferSize`` (at most 65,536 of them) wait for it
    /// (those of one chunk are all handed over), and then the bytes that arrive count as its lag; past the buffer size
    /// the stream throws ``StreamError/consumerTooSlow(bufferSize:)``, after the elements already offered. One loop at
    /// a time may read the stream.
    public func stream<T: StreamRequest>(
        for request: T,
        session: URLSession = .shared,
        after dependencies: [Operation] = []
    ) -> AsyncThrowingStream<T.Element, Error> where T.Element: Sendable {
        // Half the buffer size of elements waits for the loop; the pump then stops, and the bytes that arrive meanwhile
        // are the loop's lag too.
        let buffer = ElementBuffer<T.Element>(byteLimit: max(request.bufferSize, 1) / 2)
        let operation = StreamRequestOperation(request: request, session: session, completionQueue: nil, buffer: buffer)
        register(operation, for: request)
        dependencies.forEach(operation.addDependency)
        addOperation(operation)
        // Dropped with the stream and its iterators: a loop that breaks, or a stream nobody reads, cancels the operation.
        let owner = CancelsOnRelease(operation)
        return AsyncThrowingStream(unfolding: {
            try await withTaskCancellationHandler {
                try await buffer.next()
            } onCancel: {
                owner.cancel()
            }
        })
    }
}

/// Cancels an operation when it is released. (`Operation.cancel()` is thread-safe; Apple's SDK does not mark
/// `Operation` `Sendable`.)
private final class CancelsOnRelease: @unchecked Sendable {
    private let operation: Operation

    init(_ operation: Operation) {
        self.operation = operation
    }

    func cancel() {
        operation.cancel()
    }

    deinit {
        operation.cancel()
    }
}
