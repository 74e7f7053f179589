#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A monitor that keeps every exchange of its queue as an entry of an HTTP Archive (HAR 1.2), the format browsers'
/// developer tools, Proxyman and Charles import, and that `RequestsTesting` replays.
///
/// ```swift
/// let recorder = HARRecorder(redaction: Redaction(queryItems: ["api_key"], jsonFields: ["password"]))
/// queue.requestPolicies.monitors.append(recorder)
/// // … run requests …
/// try recorder.write(to: harFile)
/// ```
///
/// Each attempt is one entry, in the order the attempts ended: the request as sent (its method, URL, headers and body)
/// and the response (status, headers, body), with its timings; an attempt that got no response (a transport error) has
/// status `0` and the error in `_error`, as browsers write it; one whose transfer broke after its headers has its status
/// and the error in `_error`. Bodies are kept as UTF-8 text when their type is textual, in Base64 otherwise, and at
/// most ``maximumBodyBytes`` of each. What ``redaction`` names is replaced by ``Redaction/placeholder``: by default the
/// credential headers (``Redaction/credentialHeaders``). A followed redirect is one entry per hop, as browsers write
/// them: the 3xx with its `redirectURL` (no body), then the request it led to. A stream's body is kept as it arrived:
/// `content.text` holds the whole and `content._chunks` each piece with its time since the response's headers. Not
/// recorded: the body of a multipart form streamed from a file (one built in memory is kept) and a request's own body
/// stream (the entry says so in its `comment`).
///
/// With ``maximumEntries`` set, only the newest entries are kept: an app can keep one attached and write its last
/// exchanges for a bug report. Thread-safe.
///
/// Recording is cheap on the request path: the recorder keeps what the engine hands it (the request, the response and
/// the first bytes of both bodies, which share the buffers the request already has) and builds the entries, with
/// their redaction, text and Base64, only in ``harData()`` and ``write(to:)``. An exchange with a body not kept whole
/// (longer than ``maximumBodyBytes``, a multipart form, a stream) is the exception: it becomes an entry at once, so
/// that the recorder does not keep the whole body alive for its first bytes.
public final class HARRecorder: RequestEventMonitor, @unchecked Sendable {
    /// The default of ``maximumBodyBytes``: 1 MiB.
    public static let defaultMaximumBodyBytes = 1 << 20

    /// What is hidden in the entries.
    public let redaction: Redaction
    /// The most bytes of each request and response body kept in an entry; a longer body is cut there, and its entry
    /// says so in its `comment`. A JSON body cut short is not kept at all when ``Redaction/jsonFields`` names fields.
    public let maximumBodyBytes: Int
    /// When set, how many of the newest entries are kept; older ones are dropped.
    public let maximumEntries: Int?

    private let lock = NSLock()
    /// What is kept, oldest first from ``oldest``: with ``maximumEntries``, a ring of at most that many.
    private var kept: [Kept] = []
    /// With ``maximumEntries``, where the oldest of ``kept`` is once the ring is full (the next one to replace).
    private var oldest = 0

    /// An exchange as it was handed over, or its entry when that was built at once.
    private enum Kept {
        case exchange(RecordedExchange)
        case entry(HAREntry)
    }

    /// A recorder hiding what `redaction` names, keeping at most `maximumBodyBytes` of each body, and the newest
    /// `maximumEntries` entries when given.
    public init(redaction: Redaction = Redaction(), maximumBodyBytes: Int = HARRecorder.defaultMaximumBodyBytes, maximumEntries: Int? = nil) {
        self.redaction = redaction
        self.maximumBodyBytes = max(maximumBodyBytes, 0)
        self.maximumEntries = maximumEntries.map { max($0, 0) }
    }

    /// How many entries are kept now.
    public var entryCount: Int {
        lock.withLock { kept.count }
    }

    /// Forgets every entry.
    public func removeAll() {
        lock.withLock {
            kept.removeAll()
            oldest = 0
        }
    }

    /// The HAR file of the entries kept now, as JSON.
    public func harData() throws -> Data {
        try HARFile(log: HARLog(entries: entries())).data()
    }

    /// Writes ``harData()`` to `url` atomically, readable by this user only (mode `0600`): into a new file beside it,
    /// then renamed over it.
    public func write(to url: URL) throws {
        try HARFile(log: HARLog(entries: entries())).write(to: url)
    }

    /// The entries kept now, oldest first, built outside the lock.
    private func entries() -> [HAREntry] {
        let kept = lock.withLock { Array(self.kept[oldest...] + self.kept[..<oldest]) }
        return kept.map { kept in
            switch kept {
            case let .exchange(exchange): HAREntry(exchange, redaction: redaction)
            case let .entry(entry): entry
            }
        }
    }

    /// Keeps `item` as the newest, dropping the oldest beyond ``maximumEntries``.
    private func keep(_ item: Kept) {
        lock.withLock {
            guard let maximumEntries else { return kept.append(item) }
            if kept.count < maximumEntries {
                kept.append(item)
            } else if maximumEntries > 0 {
                kept[oldest] = item
                oldest = (oldest + 1) % maximumEntries
            }
        }
    }
}

extension HARFile {
    /// The file as JSON, pretty-printed with sorted keys so that a committed fixture diffs well.
    package func data() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// Writes the file to `url` atomically and with mode `0600` (see ``HARRecorder/write(to:)``).
    package func write(to url: URL) throws {
        let data = try data()
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString).tmp")
        try PrivateFolder.write(data, to: temporary)
        guard rename(temporary.path, url.path) == 0 else {
            let code = errno
            PrivateFolder.removeFile(at: temporary)
            throw PrivateFolder.Refusal.failed(call: "rename", path: url.path, errno: code)
        }
    }
}

extension HARRecorder: ExchangeRecording {
    /// Keeps `exchange` as it is, to become an entry when the file is written. One with a body not kept whole becomes
    /// an entry now: its first bytes are a slice of the whole body, and its request may carry the whole body
    /// (`httpBody`); the entry keeps neither.
    func requestDidExchange(_ exchange: RecordedExchange) {
        if exchange.responseBody.isTruncated || exchange.requestBody?.isTruncated == true {
            keep(.entry(HAREntry(exchange, redaction: redaction)))
        } else {
            keep(.exchange(exchange))
        }
    }
}
