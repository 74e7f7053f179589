#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One server-sent event, as an `EventSource` dispatches it.
public struct ServerSentEvent: Sendable, Equatable {
    /// The `event` field; `"message"` when the event had none.
    public var type: String
    /// The `data` fields, joined with line feeds.
    public var data: String
    /// The stream's last event ID when the event was dispatched (an `id` field of this event or of an earlier
    /// one); `nil` while there is none.
    public var id: String?

    /// An event of `type` with `data` and `id`.
    public init(type: String = "message", data: String, id: String? = nil) {
        self.type = type
        self.data = data
        self.id = id
    }
}

/// Server-sent events, parsed as the WHATWG HTML standard's event stream interpretation says ("9.2.6 Interpreting an
/// event stream"):
/// - lines end with CRLF, LF or CR; a byte-order mark at the start of each connection's body is dropped;
/// - a line that starts with a colon is a comment; a line without a colon is a field with an empty value; one
///   space after the colon is dropped;
/// - `event` sets the type, `data` lines are joined with line feeds, `id` sets the last event ID (unless it holds
///   a NUL), `retry` sets the reconnection time (only digits count), other fields are ignored;
/// - a blank line dispatches the event; one without data is not dispatched, though its `id` counts;
/// - an event the body ends in the middle of is dropped.
///
/// As the standard says, bytes that are not UTF-8 become U+FFFD, unless ``rejectsInvalidUTF8`` is set. Each event
/// (its data and the line being read) is held to ``maximumEventSize``. The response must be `text/event-stream`
/// (a 204 has no type, and ends the stream).
///
/// The decoder's ``lastEventID`` and ``reconnectionTime`` survive a reconnection: each connection sends
/// `Last-Event-ID`, and waits the `retry` time before it starts (at least the ``ReconnectPolicy``'s
/// ``ReconnectPolicy/minimumServerDelay``).
///
/// The server's `id` is sent back only if it is safe as a header: no control character (U+0000 to U+001F, U+007F)
/// and at most ``maximumLastEventIDLength`` bytes of UTF-8 (see ``isSendableLastEventID(_:)``). Another `id` still
/// becomes the last event ID, as the standard says (it replaces the one before and is the `id` of the events that
/// follow), but connections are made without `Last-Event-ID` while it is the last one, and monitors get
/// ``RequestNotice/lastEventIDDropped(length:)``: an earlier id is not sent in its place, since the server would
/// replay events the consumer has already had.
public struct ServerSentEventDecoder: StreamDecoder {
    /// 1 MiB.
    public static let defaultMaximumEventSize = 1024 * 1024
    /// 1 KiB: the longest last event ID, in bytes of UTF-8, that is sent back as `Last-Event-ID`.
    public static let maximumLastEventIDLength = 1024

    /// Whether `id` may be sent as `Last-Event-ID`: at most ``maximumLastEventIDLength`` bytes of UTF-8, and no
    /// control character (C0, which holds NUL, CR and LF, or DEL). The one rule for every stream's `Last-Event-ID`.
    public static func isSendableLastEventID(_ id: String) -> Bool {
        id.utf8.count <= maximumLastEventIDLength && !id.utf8.contains { $0 < 0x20 || $0 == 0x7F }
    }

    /// The most bytes an event may hold, its data and the line being read together.
    public let maximumEventSize: Int
    /// Whether a line that is not UTF-8 fails the stream with ``StreamError/invalidUTF8(line:)`` rather than
    /// having its bad bytes replaced with U+FFFD.
    public let rejectsInvalidUTF8: Bool
    /// The last event ID of the stream: the `id` of the last dispatched event (the standard's "last event ID
    /// string"). Sent as `Last-Event-ID` by every connection when not empty and ``isSendableLastEventID(_:)``.
    public private(set) var lastEventID: String
    /// Seconds to wait before a reconnection, once the stream has sent a `retry` field.
    public private(set) var reconnectionTime: TimeInterval?

    private var line: [UInt8] = []
    private var lineNumber = 1
    private var skipsLineFeed = false
    private var isAtStart = true
    private var pendingStart: [UInt8] = []
    private var eventType = ""
    private var data: [UInt8] = []
    private var idBuffer: String

    /// A decoder that starts from `lastEventID` (empty: none), to pick up a stream where an earlier run of the
    /// app left it.
    public init(
        lastEventID: String = "",
        maximumEventSize: Int = ServerSentEventDecoder.defaultMaximumEventSize,
        rejectsInvalidUTF8: Bool = false
    ) {
        self.lastEventID = lastEventID
        self.idBuffer = lastEventID
        self.maximumEventSize = max(0, maximumEventSize)
        self.rejectsInvalidUTF8 = rejectsInvalidUTF8
    }

    /// `Accept: text/event-stream`, `Cache-Control: no-cache`, and `Last-Event-ID` when there is one. A
    /// ``StreamRequestOperation`` leaves out a `Last-Event-ID` that ``isSendableLastEventID(_:)`` refuses.
    public var requestHeaders: [String: String] {
        var headers = ["Accept": "text/event-stream", "Cache-Control": "no-cache"]
        if !lastEventID.isEmpty { headers["Last-Event-ID"] = lastEventID }
        return headers
    }

    /// ``reconnectionTime``.
    public var reconnectionDelay: TimeInterval? { reconnectionTime }

    /// Throws ``StreamError/notAnEventStream(contentType:)`` unless the response is `text/event-stream`, or has no
    /// body (a 204, which tells the client not to reconnect, a 205 or a 304).
    public func validate(_ response: HTTPURLResponse) throws {
        guard ResponseBodyRule.hasBody(status: response.statusCode, method: nil) else { return }
        let contentType = response.value(forHTTPHeaderField: "Content-Type")
        let mediaType = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard mediaType == "text/event-stream" else { throw StreamError.notAnEventStream(contentType: contentType) }
    }

    /// Keeps the last event ID and the reconnection time.
    public mutating func resume(after previous: ServerSentEventDecoder) {
        lastEventID = previous.lastEventID
        idBuffer = previous.lastEventID
        reconnectionTime = previous.reconnectionTime ?? reconnectionTime
    }

    /// The events `bytes` completes.
    public mutating func decode(_ bytes: Data) throws -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        try decode(bytes) { events.append($0) }
        return events
    }

    /// Each event `bytes` completes.
    public mutating func decode(_ bytes: Data, into deliver: (ServerSentEvent) throws -> Void) throws {
        var input = bytes
        if isAtStart {
            // A byte-order mark may arrive split over chunks: up to three bytes wait until it is ruled in or out.
            let needed = 3 - pendingStart.count
            pendingStart += input.prefix(needed)
            input = Data(input.dropFirst(needed))
            if pendingStart.count < 3, Self.byteOrderMark.starts(with: pendingStart) { return }
            isAtStart = false
            if pendingStart != Self.byteOrderMark { input = Data(pendingStart) + input }
            pendingStart = []
        }
        try input.withUnsafeBytes { try scan($0, into: deliver) }
    }

    /// Nothing: an event the body ends in the middle of is dropped.
    public mutating func finish() throws -> [ServerSentEvent] {
        []
    }

    private static let byteOrderMark: [UInt8] = [0xEF, 0xBB, 0xBF]

    private mutating func scan(_ buffer: UnsafeRawBufferPointer, into deliver: (ServerSentEvent) throws -> Void) throws {
        var start = 0
        if skipsLineFeed, start < buffer.count {
            skipsLineFeed = false
            if buffer[start] == 0x0A { start += 1 }
        }
        // The next LF and CR, each looked for again only once passed: one scan of the buffer for each.
        var nextLF = -1
        var nextCR = -1
        while start < buffer.count {
            if nextLF < start { nextLF = LineBytes.index(of: 0x0A, in: buffer, from: start) ?? buffer.count }
            if nextCR < start { nextCR = LineBytes.index(of: 0x0D, in: buffer, from: start) ?? buffer.count }
            let end = min(nextLF, nextCR)
            guard end < buffer.count else {
                try append(UnsafeRawBufferPointer(rebasing: buffer[start...]))
                return
            }
            let piece = UnsafeRawBufferPointer(rebasing: buffer[start..<end])
            let event: ServerSentEvent?
            if line.isEmpty {
                try checkSize(adding: piece.count)
                event = try endLine(piece)
            } else {
                try append(piece)
                event = try endHeldLine()
            }
            if let event { try deliver(event) }
            start = end + 1
            if buffer[end] == 0x0D {
                if start < buffer.count {
                    if buffer[start] == 0x0A { start += 1 }
                } else {
                    skipsLineFeed = true
                }
            }
        }
    }

    /// The event's data, the line held and `count` more bytes must stay within the limit.
    private func checkSize(adding count: Int) throws {
        guard line.count + count + data.count <= maximumEventSize else {
            throw StreamError.eventTooLarge(limit: maximumEventSize)
        }
    }

    private mutating func append(_ bytes: UnsafeRawBufferPointer) throws {
        try checkSize(adding: bytes.count)
        line.append(contentsOf: bytes)
    }

    /// Processes the line held in ``line``, and empties it.
    private mutating func endHeldLine() throws -> ServerSentEvent? {
        var held: [UInt8] = []
        swap(&held, &line)
        defer {
            held.removeAll(keepingCapacity: held.count <= 64 * 1024)
            swap(&held, &line)
        }
        return try held.withUnsafeBytes { try endLine($0) }
    }

    /// Processes a line just completed; returns the event a blank line dispatches.
    private mutating func endLine(_ line: UnsafeRawBufferPointer) throws -> ServerSentEvent? {
        defer { lineNumber += 1 }
        guard let first = line.first else { return dispatch() }
        guard first != 0x3A else { return nil }  // a comment
        let colon = LineBytes.index(of: 0x3A, in: line, from: 0)
        let name = UnsafeRawBufferPointer(rebasing: line[..<(colon ?? line.count)])
        var value = colon.map { UnsafeRawBufferPointer(rebasing: line[($0 + 1)...]) } ?? UnsafeRawBufferPointer(start: nil, count: 0)
        if let space = value.first, space == 0x20 { value = UnsafeRawBufferPointer(rebasing: value.dropFirst()) }
        if LineBytes.equals(name, "data") {
            if rejectsInvalidUTF8, !LineBytes.isUTF8(value) { throw StreamError.invalidUTF8(line: lineNumber) }
            data.append(contentsOf: value)
            data.append(0x0A)
        } else if LineBytes.equals(name, "event") {
            eventType = try text(value)
        } else if LineBytes.equals(name, "id") {
            if LineBytes.index(of: 0, in: value, from: 0) == nil { idBuffer = try text(value) }
        } else if LineBytes.equals(name, "retry") {
            if !value.isEmpty, value.allSatisfy({ (0x30...0x39).contains($0) }), let milliseconds = Int(try text(value)) {
                reconnectionTime = TimeInterval(milliseconds) / 1000
            }
        }
        return nil
    }

    private mutating func dispatch() -> ServerSentEvent? {
        lastEventID = idBuffer
        defer {
            data.removeAll(keepingCapacity: data.count <= 64 * 1024)
            eventType = ""
        }
        guard !data.isEmpty else { return nil }
        data.removeLast()  // the line feed after the last data line
        // Validated when each line arrived, if it must be.
        let text = String(decoding: data, as: UTF8.self)
        return ServerSentEvent(type: eventType.isEmpty ? "message" : eventType, data: text, id: lastEventID.isEmpty ? nil : lastEventID)
    }

    /// `bytes` as text: bad bytes replaced, or rejected.
    private func text(_ bytes: UnsafeRawBufferPointer) throws -> String {
        guard let text = LineBytes.text(bytes, validating: rejectsInvalidUTF8) else { throw StreamError.invalidUTF8(line: lineNumber) }
        return text
    }
}
