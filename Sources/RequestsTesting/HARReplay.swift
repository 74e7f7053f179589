#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// Whether a ``HARReplay`` replays its file or records a new one, as in VCR.
public enum HARRecordMode: Sendable {
    /// Replays the file, which must exist; a request no entry matches fails with ``HARReplayError/noMatch(method:url:closest:)``.
    case replayOnly
    /// Records when the file is missing, and replays it when it exists: record once, then commit the file.
    case once
    /// Records every time, replacing the file.
    case all
    /// Replays the file (which may be missing) and sends each request no entry matches to the server, adding its
    /// exchange to the file. A request the library runs goes with its body, an upload's included; a task made on
    /// ``HARReplay/session`` directly goes without an upload task's body on Linux (as for stubs). The server's answer
    /// is delivered in one piece.
    case newEpisodes
}

/// Answers requests from a HAR file (HTTP Archive 1.2), or records one from real traffic: record once against a
/// real server, commit the file, and replay it in CI.
///
/// ```swift
/// let replay = try HARReplay(file: fixtureURL, mode: .once)
/// let queue = OperationQueue()
/// queue.requestPolicies.monitors = replay.monitors
/// let user = try await queue.response(for: UserRequest(id: 7), session: replay.session)
/// try replay.finish()   // writes the file when recording
/// ```
///
/// When replaying, the requests the library runs on ``session`` (every kind: data, upload, download, resumable
/// download, stream and server-sent events) never reach the network: the engine hands them to the replay, with the body
/// they send, and delivers the recorded answer as the transport would. A request gets the response of the first entry
/// that matches it (``HARMatching``), and a request repeated gets the next matching entry's, in the order they were
/// recorded; the last one then repeats (unless its transfer broke after its headers). A recorded redirect is followed
/// hop by hop, as the session's redirect rules say. A recorded stream's body arrives in its recorded pieces
/// (`_chunks`), all at once or, with `pacing`, each after its recorded delay. Files exported by browsers and proxies
/// are read too: missing optional fields, `content.encoding` `base64`, a missing `content.text` (an empty body), HTTP/2
/// pseudo-headers. Tasks made on ``session`` directly, outside the library, are answered by its stubs (see ``Stubs``),
/// with the `URLProtocol` limits on Linux (no downloads, no upload bodies). The session's configuration (extra headers,
/// cookies, the request timeout) does not apply to a replayed request. When recording, ``session`` is a real ephemeral
/// session and ``monitors`` holds the `HARRecorder`. Thread-safe.
public final class HARReplay: @unchecked Sendable {
    /// Whether this replay records (the file is written by ``finish()``) rather than replays.
    public let isRecording: Bool
    /// The file replayed or to be written.
    public let file: URL
    /// The session to run requests on: stubbed when replaying, real when recording.
    public let session: URLSession
    /// The monitors to add to the queue's policies: the ``recorder`` when recording, none when replaying.
    public var monitors: [any RequestEventMonitor] { recorder.map { [$0] } ?? [] }
    /// The recorder, when recording.
    public let recorder: HARRecorder?
    /// In ``HARRecordMode/newEpisodes`` mode, what sends unmatched requests to the server, and the file's entries.
    private let forwarder: LiveForwarder?
    /// The file's entries as they answer, when replaying.
    private let answers: ReplayAnswers?
    private let recordedEntries: [HAREntry]
    /// The stubs that answer ``session`` when replaying: their ``Stubs/requests`` and ``Stubs/unmatchedRequests``
    /// list what was asked.
    public let stubs: Stubs?

    /// A replay of `file` in `mode`: matching requests as `matching` says, or recording them with `redaction` and at
    /// most `maximumBodyBytes` of each body; with `pacing`, a recorded stream's pieces keep their recorded delays.
    /// Throws ``HARReplayError`` for a file that is missing in ``HARRecordMode/replayOnly`` mode, or that cannot be
    /// read as HAR.
    public init(
        file: URL, mode: HARRecordMode = .once, matching: HARMatching = HARMatching(), redaction: Redaction = Redaction(),
        maximumBodyBytes: Int = HARRecorder.defaultMaximumBodyBytes, pacing: Bool = false
    ) throws {
        self.file = file
        let exists = FileManager.default.fileExists(atPath: file.path)
        switch mode {
        case .replayOnly where !exists: throw HARReplayError.missingFile(file)
        case .once where exists, .replayOnly, .newEpisodes:
            let recorded = exists ? try Self.entries(of: file, pacing: pacing) : []
            let forwarder = mode == .newEpisodes ? LiveForwarder(redaction: redaction, maximumBodyBytes: maximumBodyBytes) : nil
            let answers = ReplayAnswers(entries: recorded.map(\.answer), matching: matching, forwarder: forwarder)
            let stubs = Stubs(fallback: { answers.response(for: $0) })
            self.answers = answers
            (isRecording, recorder, self.stubs, session) = (forwarder != nil, nil, stubs, stubs.makeSession())
            ReplaySessions.register(stubs, for: session)
            (self.forwarder, recordedEntries) = (forwarder, recorded.map(\.entry))
        case .once, .all:
            let configuration = URLSessionConfiguration.ephemeral
            configuration.urlCache = nil
            isRecording = true
            recorder = HARRecorder(redaction: redaction, maximumBodyBytes: maximumBodyBytes)
            (stubs, session) = (nil, URLSession(configuration: configuration))
            (forwarder, recordedEntries, answers) = (nil, [], nil)
        }
    }

    deinit {
        ReplaySessions.unregister(session)
    }

    /// Writes the recorded file when recording (see `HARRecorder.write(to:)`), and lets the recording session go
    /// once its tasks end (`finishTasksAndInvalidate()`); in ``HARRecordMode/newEpisodes`` mode, writes the file's
    /// entries and the new ones, if any. When replaying, throws ``HARReplayError/unmatchedRequests(_:)`` if a request
    /// matched no entry (each such request also failed with ``HARReplayError/noMatch(method:url:closest:)``), so that
    /// a test that calls it fails, with XCTest as with Swift Testing, even when it did not look at that request's
    /// result. Call it once, after the last request.
    public func finish() throws {
        if let unmatched = answers?.unmatched, !unmatched.isEmpty {
            throw HARReplayError.unmatchedRequests(unmatched)
        }
        if let forwarder {
            forwarder.close()
            let added = forwarder.newEntries
            if !added.isEmpty { try HARFile(log: HARLog(entries: recordedEntries + added)).write(to: file) }
            return
        }
        guard let recorder else { return }
        session.finishTasksAndInvalidate()
        try recorder.write(to: file)
    }

    /// The entries of the HAR file `url`, as read and ready to answer.
    static func entries(of url: URL, pacing: Bool = false) throws -> [(entry: HAREntry, answer: ReplayEntry)] {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw HARReplayError.unreadableFile(reason: "\(url.path) cannot be read (\(error.localizedDescription))")
        }
        let file: HARFile
        do {
            file = try JSONDecoder().decode(HARFile.self, from: data)
        } catch {
            throw HARReplayError.unreadableFile(reason: "\(url.lastPathComponent) is not HAR JSON (\(error))")
        }
        return try file.log.entries.enumerated().map { ($0.element, try ReplayEntry(index: $0.offset, entry: $0.element, pacing: pacing)) }
    }
}

/// The entries of a replay and how many times each was used, behind one lock.
final class ReplayAnswers: @unchecked Sendable {
    private let entries: [ReplayEntry]
    private let matching: HARMatching
    private let lock = NSLock()
    /// The entries already given, by index.
    private var used: Set<Int> = []
    /// Why each request that matched no entry failed, in order.
    private var failures: [HARReplayError] = []

    /// Why each request that matched no entry failed, in order.
    var unmatched: [HARReplayError] { lock.withLock { failures } }

    private let forwarder: LiveForwarder?

    init(entries: [ReplayEntry], matching: HARMatching, forwarder: LiveForwarder?) {
        (self.entries, self.matching, self.forwarder) = (entries, matching, forwarder)
    }

    /// The response of the first matching entry not used yet (the last matching one when all were); without one, the
    /// server's answer in ``HARRecordMode/newEpisodes`` mode, else a ``HARReplayError/noMatch(method:url:closest:)``
    /// naming the closest entry.
    func response(for request: URLRequest) -> (response: StubResponse, matched: Bool) {
        let method = (request.httpMethod ?? "GET").uppercased()
        let url = request.url?.absoluteString ?? ""
        let (base, query) = ReplayEntry.key(url)
        let scored = entries.map { ($0, $0.score(method: method, base: base, query: query, request: request, matching: matching)) }
        let candidates = scored.filter { $0.1.matches }.map(\.0)
        if candidates.isEmpty, let forwarder {
            return (forwarder.forward(request), true)
        }
        return lock.withLock {
            // The last one repeats, unless its transfer broke: a stream that reconnects after it would get its events
            // again and again.
            let repeated = candidates.last.flatMap { $0.response.errorAfterBody == nil ? $0 : nil }
            if let entry = candidates.first(where: { !used.contains($0.index) }) ?? repeated {
                used.insert(entry.index)
                return (entry.response, true)
            }
            let closest = scored.max { $0.1.score < $1.1.score }?.0.description
            let error = HARReplayError.noMatch(method: method, url: url, closest: closest)
            failures.append(error)
            return (.failure(error), false)
        }
    }
}
