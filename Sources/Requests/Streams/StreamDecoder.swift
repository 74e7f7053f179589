#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Turns a response body, as its bytes arrive, into the elements of a stream: chunks, lines, JSON values or
/// server-sent events.
///
/// A ``StreamRequestOperation`` makes one decoder per connection with ``StreamRequest/makeDecoder()`` and calls it
/// from one thread at a time, never from the session's threads. A decoder that throws ends the stream with its
/// error. A decoder must bound what it holds (a line limit, an event limit): the server decides how long a line is.
public protocol StreamDecoder {
    /// What the stream yields.
    associatedtype Element

    /// Headers each connection sends, unless the request already sets them (an event stream's `Accept`), except
    /// `Last-Event-ID`, which the decoder always sets when it has one. Default: none.
    var requestHeaders: [String: String] { get }

    /// Seconds the server asked the client to wait before it reconnects (an event stream's `retry` field), which
    /// replaces the ``ReconnectPolicy``'s delay. Default: `nil`.
    var reconnectionDelay: TimeInterval? { get }

    /// Checks the response's headers before any of its body is decoded; a throw fails the connection before any
    /// element is delivered, so the request's ``RetryPolicy`` still applies. Default: accepts every response.
    func validate(_ response: HTTPURLResponse) throws

    /// Decodes the next bytes of the body; returns the elements they complete, in order.
    mutating func decode(_ bytes: Data) throws -> [Element]

    /// Decodes the next bytes of the body, handing each element to `deliver` as soon as it is complete, so that the
    /// elements before a bad one are delivered before the error. A throw from `deliver` stops the decoding. The
    /// operation calls this one. Default: ``decode(_:)``, then its elements.
    mutating func decode(_ bytes: Data, into deliver: (Element) throws -> Void) throws

    /// The body has ended normally: returns what the last bytes complete (a last line without a newline), or
    /// throws for a truncated element. Not called when the connection fails.
    mutating func finish() throws -> [Element]

    /// Called on the decoder of a new connection after `previous` ended (a reconnection), to carry over what must
    /// survive it: an event stream's last event ID and retry time. Nothing of a half-decoded element is carried.
    /// Default: nothing.
    mutating func resume(after previous: Self)
}

extension StreamDecoder {
    /// None.
    public var requestHeaders: [String: String] { [:] }
    /// `nil`: the ``ReconnectPolicy`` decides.
    public var reconnectionDelay: TimeInterval? { nil }
    /// Accepts every response.
    public func validate(_ response: HTTPURLResponse) throws {}
    /// Nothing to carry over.
    public mutating func resume(after previous: Self) {}

    /// ``decode(_:)``, then each of its elements.
    public mutating func decode(_ bytes: Data, into deliver: (Element) throws -> Void) throws {
        try decode(bytes).forEach(deliver)
    }
}

/// Why a stream's body could not be decoded, or why its response is not a stream of the expected kind.
public enum StreamError: Error, Equatable, CustomStringConvertible {
    /// A line grew past `limit` bytes without a line break; `line` counts from 1.
    case lineTooLong(line: Int, limit: Int)
    /// A line is not valid UTF-8.
    case invalidUTF8(line: Int)
    /// A JSON line did not decode; carries the `DecodingError`'s description.
    case invalidJSON(line: Int, reason: String)
    /// A server-sent event (its data and its current line) grew past `limit` bytes.
    case eventTooLarge(limit: Int)
    /// An event stream's response is not `text/event-stream`; carries its `Content-Type`.
    case notAnEventStream(contentType: String?)
    /// More than `bufferSize` bytes of the body waited for a consumer that did not keep up (see
    /// ``StreamRequest/bufferSize``).
    case consumerTooSlow(bufferSize: Int)
    /// The stream would have reconnected more than `limit` times within `window` seconds, the most its
    /// ``ReconnectPolicy`` allows (``ReconnectPolicy/maxReconnections`` per ``ReconnectPolicy/reconnectionWindow``):
    /// the server drops the connection too often. The elements before it were delivered.
    case tooManyReconnections(limit: Int, window: TimeInterval)

    /// Says what was wrong, and where.
    public var description: String {
        switch self {
        case let .lineTooLong(line, limit):
            return "Line \(line) of the stream is longer than the limit of \(limit) bytes."
        case let .invalidUTF8(line):
            return "Line \(line) of the stream is not valid UTF-8."
        case let .invalidJSON(line, reason):
            return "Line \(line) of the stream is not the expected JSON: \(reason)"
        case let .eventTooLarge(limit):
            return "A server-sent event is larger than the limit of \(limit) bytes."
        case let .notAnEventStream(contentType):
            return "The response is not an event stream: its Content-Type is \(contentType.map { "'\($0)'" } ?? "missing")."
        case let .consumerTooSlow(bufferSize):
            return "The stream's consumer did not keep up: more than \(bufferSize) bytes waited for it."
        case let .tooManyReconnections(limit, window):
            return "The stream reconnected \(limit) times within \(window) seconds, the most its reconnection policy allows."
        }
    }
}

/// The body's bytes as they arrive, one `Data` per piece the transport delivers (their sizes are the transport's
/// business: on Linux up to 16 KiB, from loopback usually exactly that).
public struct DataChunkDecoder: StreamDecoder {
    /// A decoder of raw chunks.
    public init() {}

    /// `bytes`, unless empty.
    public mutating func decode(_ bytes: Data) throws -> [Data] {
        bytes.isEmpty ? [] : [bytes]
    }

    /// Nothing is held back.
    public mutating func finish() throws -> [Data] {
        []
    }
}

/// UTF-8 lines, without their line breaks: a line ends with LF or CRLF, and a last line without a line break is
/// delivered when the body ends normally. A UTF-8 byte-order mark before the first line is dropped. A line that is
/// not UTF-8 fails with ``StreamError/invalidUTF8(line:)``, and one longer than ``maximumLineLength`` with
/// ``StreamError/lineTooLong(line:limit:)`` as soon as it passes the limit, so a server cannot make it grow.
public struct LineDecoder: StreamDecoder {
    /// 1 MiB: far more than a log line or an NDJSON record needs, and still small in memory.
    public static let defaultMaximumLineLength = 1024 * 1024

    /// The longest line, in bytes, without its line break.
    public let maximumLineLength: Int
    /// The line being received.
    private var partial: [UInt8] = []
    /// The number of the next line, from 1.
    private(set) var nextLineNumber = 1
    private var isAtStart = true

    /// A decoder of lines up to `maximumLineLength` bytes (default ``defaultMaximumLineLength``).
    public init(maximumLineLength: Int = LineDecoder.defaultMaximumLineLength) {
        // Below `Int.max`, which the CR of a CRLF may pass by one.
        self.maximumLineLength = min(max(0, maximumLineLength), Int.max - 1)
    }

    /// The lines `bytes` completes.
    public mutating func decode(_ bytes: Data) throws -> [String] {
        var lines: [String] = []
        try decode(bytes) { lines.append($0) }
        return lines
    }

    /// Each line `bytes` completes.
    public mutating func decode(_ bytes: Data, into deliver: (String) throws -> Void) throws {
        try split(bytes) { line, number in try deliver(Self.text(line, number: number)) }
    }

    /// The last line, if the body did not end with a line break.
    public mutating func finish() throws -> [String] {
        var lines: [String] = []
        try finish { bytes, number in lines.append(try Self.text(bytes, number: number)) }
        return lines
    }

    /// Calls `body` with the bytes of a last line without a line break, if there is one, and its number.
    mutating func finish(_ body: (UnsafeRawBufferPointer, Int) throws -> Void) throws {
        guard !partial.isEmpty else { return }
        try takePartial(body)
    }

    /// Calls `body` with the bytes of each line `bytes` completes (without its line break, nor a first line's
    /// byte-order mark), and its number (from 1). Lines whole in `bytes` are not copied.
    mutating func split(_ bytes: Data, _ body: (UnsafeRawBufferPointer, Int) throws -> Void) throws {
        try bytes.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
            var start = 0
            while start < buffer.count {
                guard let newline = LineBytes.index(of: 0x0A, in: buffer, from: start) else {
                    try append(UnsafeRawBufferPointer(rebasing: buffer[start...]))
                    return
                }
                let piece = UnsafeRawBufferPointer(rebasing: buffer[start..<newline])
                if partial.isEmpty {
                    try checkLength(piece.count)
                    try emit(piece, body)
                } else {
                    try append(piece)
                    try takePartial(body)
                }
                start = newline + 1
            }
        }
    }

    /// A line being received may hold its limit and one byte more, for the CR of a CRLF, which is not part of it.
    private func checkLength(_ count: Int) throws {
        guard count <= maximumLineLength + 1 else {
            throw StreamError.lineTooLong(line: nextLineNumber, limit: maximumLineLength)
        }
    }

    private mutating func append(_ bytes: UnsafeRawBufferPointer) throws {
        try checkLength(partial.count + bytes.count)
        partial.append(contentsOf: bytes)
    }

    /// Hands over the line held in ``partial``, and empties it.
    private mutating func takePartial(_ body: (UnsafeRawBufferPointer, Int) throws -> Void) throws {
        var held: [UInt8] = []
        swap(&held, &partial)
        defer {
            held.removeAll(keepingCapacity: held.count <= 64 * 1024)
            swap(&held, &partial)
        }
        try held.withUnsafeBytes { try emit($0, body) }
    }

    /// Hands over a line's bytes without its CR (and a first line's byte-order mark), and counts it.
    private mutating func emit(_ received: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer, Int) throws -> Void) throws {
        defer {
            nextLineNumber += 1
            isAtStart = false
        }
        var bytes = received
        if let last = bytes.last, last == 0x0D { bytes = UnsafeRawBufferPointer(rebasing: bytes.dropLast()) }
        if isAtStart, bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF {
            bytes = UnsafeRawBufferPointer(rebasing: bytes.dropFirst(3))
        }
        guard bytes.count <= maximumLineLength else {
            throw StreamError.lineTooLong(line: nextLineNumber, limit: maximumLineLength)
        }
        try body(bytes, nextLineNumber)
    }

    /// A line's text, or ``StreamError/invalidUTF8(line:)``.
    static func text(_ bytes: UnsafeRawBufferPointer, number: Int) throws -> String {
        guard let line = LineBytes.text(bytes, validating: true) else { throw StreamError.invalidUTF8(line: number) }
        return line
    }
}

/// JSON lines (NDJSON): one JSON value per line, each decoded to `Element`. Blank lines (empty, or only spaces, tabs
/// and CRs: JSON's whitespace) are skipped; a line of other whitespace (U+000C, U+00A0, ...) is not JSON. A line that
/// does not decode fails with ``StreamError/invalidJSON(line:reason:)``, naming its line; the limits and rules of
/// ``LineDecoder`` apply to each line.
public struct JSONLinesDecoder<Element: Decodable>: StreamDecoder {
    private var lines: LineDecoder
    private let decoder: JSONDecoder

    /// A decoder of `Element`s with `decoder` (default: a plain `JSONDecoder`), lines up to `maximumLineLength` bytes.
    public init(decoder: JSONDecoder = JSONDecoder(), maximumLineLength: Int = LineDecoder.defaultMaximumLineLength) {
        self.lines = LineDecoder(maximumLineLength: maximumLineLength)
        self.decoder = decoder
    }

    /// The values of the lines `bytes` completes.
    public mutating func decode(_ bytes: Data) throws -> [Element] {
        var values: [Element] = []
        try decode(bytes) { values.append($0) }
        return values
    }

    /// The value of each line `bytes` completes.
    public mutating func decode(_ bytes: Data, into deliver: (Element) throws -> Void) throws {
        let decoder = self.decoder
        try lines.split(bytes) { line, number in
            if let value = try Self.decode(line, number: number, with: decoder) { try deliver(value) }
        }
    }

    /// The value of a last line without a line break.
    public mutating func finish() throws -> [Element] {
        var values: [Element] = []
        let decoder = self.decoder
        try lines.finish { line, number in
            if let value = try Self.decode(line, number: number, with: decoder) { values.append(value) }
        }
        return values
    }

    /// The value of a line; `nil` for a blank one (JSON's whitespace only).
    private static func decode(_ line: UnsafeRawBufferPointer, number: Int, with decoder: JSONDecoder) throws -> Element? {
        guard !LineBytes.isBlank(line) else { return nil }
        guard LineBytes.isUTF8(line) else { throw StreamError.invalidUTF8(line: number) }
        do {
            return try decoder.decode(Element.self, from: Data(line))
        } catch {
            throw StreamError.invalidJSON(line: number, reason: String(describing: error))
        }
    }
}
