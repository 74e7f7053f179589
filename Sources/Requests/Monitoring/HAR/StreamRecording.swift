import Foundation

/// The pieces of one connection of a stream, as a recording monitor keeps them (see `ExchangeRecording`): each piece
/// with its time since the response's headers arrived, up to the monitors' body limit in total (the piece that
/// crosses it is cut there; later ones are counted, not kept).
///
/// It lives in `StreamState`, guarded by the operation's lock, and is made for a connection only when a recording
/// monitor is attached (`exchangeBodyLimit()`, asked once per connection): a stream without one pays a `nil` check per
/// piece. Pieces are taken as they arrive from the transport, before the pump decodes them, so their times are the
/// network's, not the consumer's; except for a piece the transport held back while the consumer caught up (libcurl, a
/// replay), which counts from when it was taken.
struct StreamRecording {
    /// The most bytes kept, over all pieces.
    let limit: Int
    private var headArrival: DispatchTime?
    private var chunks: [CapturedChunk] = []
    private var kept = 0
    /// Every byte of the connection's body, kept or not.
    private var total = 0

    init(limit: Int) {
        self.limit = max(limit, 0)
    }

    /// The response's headers arrived: the pieces' times count from now.
    mutating func headArrived() {
        headArrival = .now()
    }

    /// The next piece of the body arrived.
    mutating func received(_ data: Data) {
        total += data.count
        guard kept < limit, !data.isEmpty else { return }
        // Copied when cut: a slice would keep the whole piece alive.
        let piece = data.count > limit - kept ? Data(data.prefix(limit - kept)) : data
        kept += piece.count
        chunks.append(CapturedChunk(time: headArrival.map(secondsSince) ?? 0, bytes: piece))
    }

    /// The body as recorded: the kept pieces, one after the other, and each on its own.
    var body: CapturedBody {
        var bytes = Data(capacity: kept)
        chunks.forEach { bytes.append($0.bytes) }
        var body = CapturedBody(bytes: bytes, size: total, omission: nil)
        body.chunks = chunks
        return body
    }
}

/// One piece of a streamed body and when it came.
struct CapturedChunk: Sendable {
    /// Seconds from the arrival of the response's headers to this piece's.
    let time: TimeInterval
    let bytes: Data
}
