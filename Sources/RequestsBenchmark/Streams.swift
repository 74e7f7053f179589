// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// Section 9: streams. A large body read by an empty consumer in each form (the chunk handler, a `for try await` loop
// over the chunks, a line handler, a `for try await` loop over NDJSON records) against a raw URLSession delegate data
// task, each in a child process of its own (`--transfer-child stream|stream-async|stream-lines|stream-ndjson|raw-stream
// BYTES BASE_URL`), in rounds whose order rotates; server-sent events parsed through the whole pipeline; and the time
// from a cancel to the completion.

private struct BenchStream: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

private struct BenchLines: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeDecoder() -> LineDecoder { LineDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// One NDJSON record of the benchmark's body.
private struct BenchRecord: Decodable, Sendable {
    let n: Int
    let text: String
}

private struct BenchRecords: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeDecoder() -> JSONLinesDecoder<BenchRecord> { JSONLinesDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// The bodies of the decoded forms: 64 KiB pieces of 128-byte lines, or of 512-byte NDJSON records, each line ending
/// in a line feed; the same piece again and again, so that the server holds one piece, not the body.
enum BenchLineBody {
    static let lineBytes = 128
    static let recordBytes = 512
    static let pieceBytes = 64 * 1024

    static func piece(lineBytes: Int, make: (Int) -> String) -> Data {
        var piece = Data()
        for index in 0..<(pieceBytes / lineBytes) {
            var line = make(index)
            line += String(repeating: " ", count: max(lineBytes - 1 - line.utf8.count, 0))
            piece.append(Data((line + "\n").utf8))
        }
        return piece
    }

    static let lines = piece(lineBytes: lineBytes) { "line \($0) " + String(repeating: "x", count: 64) }
    static let records = piece(lineBytes: recordBytes) { "{\"n\":\($0),\"text\":\"" + String(repeating: "y", count: 400) + "\"}" }

    /// Registers `/bench/lines` and `/bench/ndjson`, each `bytes` long (a multiple of 64 KiB).
    static func serve(bytes: Int, on server: LoopbackServer) {
        for (path, piece, type) in [("/bench/lines", lines, "text/plain"), ("/bench/ndjson", records, "application/x-ndjson")] {
            let pieces = [Data](repeating: piece, count: max(bytes / pieceBytes, 1))
            server.stream(path) { _ in LoopbackStream(headers: ["Content-Type": type], pieces: pieces) }
        }
    }
}

private struct BenchEvents: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Counts bytes, from whichever thread calls it.
private final class ByteCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add(_ bytes: Int) { lock.withLock { count += bytes } }
    var value: Int { lock.withLock { count } }
}

/// A raw URLSession delegate that counts the body's bytes, as an app without Requests would stream.
private final class RawStreamDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    let counter = ByteCounter()
    let done = DispatchSemaphore(value: 0)
    private(set) var failed = false

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        counter.add(data.count)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        failed = error != nil || (task.response as? HTTPURLResponse)?.statusCode != 200
        done.signal()
    }
}

/// In the child: streams `bytes` from `base` with the library (`stream`) or raw URLSession (`raw-stream`); returns the
/// bytes received, or `nil` on a failure.
func runStreamChild(_ kind: String, bytes: Int, base: URL) -> Int? {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    let url = base.appendingPathComponent("bytes/\(bytes)")
    if kind == "raw-stream" {
        let delegate = RawStreamDelegate()
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        session.dataTask(with: url).resume()
        delegate.done.wait()
        return delegate.failed ? nil : delegate.counter.value
    }
    let counter = ByteCounter()
    let session = URLSession(configuration: configuration)
    let queue = OperationQueue()
    let outcome: Result<Void, Error>
    switch kind {
    case "stream-async", "stream-ndjson":
        // An empty `for try await` loop, in a task of its own; this thread waits for it.
        let done = DispatchSemaphore(value: 0)
        let result = ResultBox()
        let records = kind == "stream-ndjson"
        let recordURL = base.appendingPathComponent("bench/ndjson")
        Task.detached {
            do {
                if records {
                    for try await _ in queue.stream(for: BenchRecords(url: recordURL), session: session) { counter.add(BenchLineBody.recordBytes) }
                } else {
                    for try await chunk in queue.stream(for: BenchStream(url: url), session: session) { counter.add(chunk.count) }
                }
                result.set(.success(()))
            } catch {
                result.set(.failure(error))
            }
            done.signal()
        }
        done.wait()
        outcome = result.value ?? .failure(CancellationError())
    case "stream-lines":
        let operation = queue.addRequest(BenchLines(url: base.appendingPathComponent("bench/lines")), session: session) { line in
            counter.add(line.utf8.count + 1)
        }
        queue.waitUntilAllOperationsAreFinished()
        outcome = operation.result.map { $0.map { _ in () }.mapError { $0 } } ?? .failure(CancellationError())
    default:
        let operation = queue.addRequest(BenchStream(url: url), session: session) { chunk in counter.add(chunk.count) }
        queue.waitUntilAllOperationsAreFinished()
        outcome = operation.result.map { $0.map { _ in () }.mapError { $0 } } ?? .failure(CancellationError())
    }
    if case let .failure(error) = outcome {
        // Read by the parent (measureTransfer), so that a round without a number says why.
        FileHandle.standardError.write(Data("the library's stream (\(kind)) failed after \(counter.value >> 20) MiB: \(error) (\(type(of: error)))\n".utf8))
        return nil
    }
    return counter.value
}

/// An outcome, set once from another thread.
private final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Result<Void, Error>?
    func set(_ value: Result<Void, Error>) { lock.withLock { stored = value } }
    var value: Result<Void, Error>? { lock.withLock { stored } }
}

/// What section 9 measured.
struct StreamFigures {
    /// The chunk handler.
    var library: [TransferFigures] = []
    var raw: [TransferFigures] = []
    /// The other forms of an empty consumer, by child kind (`stream-async`, `stream-lines`, `stream-ndjson`).
    var forms: [String: [TransferFigures]] = [:]
    /// Bytes per second of the decoder alone, by child kind (`stream-lines`, `stream-ndjson`).
    var decoderAlone: [String: Double] = [:]
    var events = 0
    var eventsPerSecond = Double.nan
    var decoderEventsPerSecond = Double.nan
    var cancelMilliseconds: [Double] = []
    /// From the cancel to the server seeing the connection close, and the body bytes it sent meanwhile.
    var closeMilliseconds: [Double] = []
    var bytesAfterCancel: [Double] = []
}

/// Runs the stream measurements against the embedded server.
func measureStreams(bytes: Int, rounds: Int, events: Int, cancels: Int, server: LoopbackServer) -> StreamFigures {
    var figures = StreamFigures()
    BenchLineBody.serve(bytes: bytes, on: server)
    let kinds = ["stream", "raw-stream", "stream-async", "stream-lines", "stream-ndjson"]
    for round in 0..<rounds {
        // The order rotates, so that no side always meets a cold or a warm machine.
        let sides = kinds.indices.map { kinds[($0 + round) % kinds.count] }
        for side in sides {
            let measured = measureTransfer(side, bytes: bytes, base: server.baseURL)
            switch side {
            case "stream": figures.library.append(measured)
            case "raw-stream": figures.raw.append(measured)
            default: figures.forms[side, default: []].append(measured)
            }
        }
    }

    // The line and NDJSON decoders alone, on the same pieces (64 MiB of each): what the decoded forms can reach.
    func decoderAlone<D: StreamDecoder>(_ make: () -> D, piece: Data) -> Double {
        var decoder = make()
        let count = (64 << 20) / BenchLineBody.pieceBytes
        let start = ResourceUsage.now()
        var elements = 0
        for _ in 0..<count {
            try? decoder.decode(Data(piece)) { _ in elements += 1 }
        }
        let seconds = ResourceUsage.now() - start
        return elements == count * (BenchLineBody.pieceBytes / (piece == BenchLineBody.lines ? BenchLineBody.lineBytes : BenchLineBody.recordBytes))
            ? Double(count * BenchLineBody.pieceBytes) / seconds : .nan
    }
    figures.decoderAlone["stream-lines"] = decoderAlone({ LineDecoder() }, piece: BenchLineBody.lines)
    figures.decoderAlone["stream-ndjson"] = decoderAlone({ JSONLinesDecoder<BenchRecord>() }, piece: BenchLineBody.records)

    // Server-sent events: small JSON events in 64 KiB pieces, through the session, the pump and the decoder.
    let payload = (0..<events).map { "id: \($0)\nevent: tick\ndata: {\"n\":\($0)}\n\n" }.joined()
    let body = Data(payload.utf8)
    let pieces = stride(from: 0, to: body.count, by: 65536).map { body[$0..<min($0 + 65536, body.count)] }
    server.stream("/bench/events") { _ in
        LoopbackStream(headers: ["Content-Type": "text/event-stream"], pieces: pieces.map { Data($0) })
    }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    let session = URLSession(configuration: configuration)
    let queue = OperationQueue()
    let received = ByteCounter()
    let start = ResourceUsage.now()
    let operation = queue.addRequest(BenchEvents(url: server.url("/bench/events")), session: session) { _ in received.add(1) }
    queue.waitUntilAllOperationsAreFinished()
    if case .success? = operation.result {
        figures.events = received.value
        figures.eventsPerSecond = Double(received.value) / (ResourceUsage.now() - start)
    }
    // The decoder alone, on the same bytes in the same pieces.
    var decoder = ServerSentEventDecoder()
    let decodeStart = ResourceUsage.now()
    var decoded = 0
    for piece in pieces {
        decoded += (try? decoder.decode(Data(piece)).count) ?? 0
    }
    if decoded == events {
        figures.decoderEventsPerSecond = Double(decoded) / (ResourceUsage.now() - decodeStart)
    }

    // A cancel of an endless body that the server sends as fast as the client reads, from another thread once 64 MiB
    // have arrived: the time to the completion, and what the server sees (its bytes sent after the cancel, and when
    // it sees the connection close).
    let endless = "/hostile/endless"
    for _ in 0..<cancels {
        let index = server.endlessBodies(path: endless).count
        let received = ByteCounter()
        let completed = DispatchSemaphore(value: 0)
        let completionTime = Box()
        let operation = queue.addRequest(BenchStream(url: server.url(endless)), session: session) { chunk in
            received.add(chunk.count)
        } completion: { _ in
            completionTime.set(ResourceUsage.now())
            completed.signal()
        }
        while received.value < 64 << 20, !operation.isFinished { usleep(200) }
        let bodies = server.endlessBodies(path: endless)
        let sentAtCancel = index < bodies.count ? bodies[index].bytesSent : 0
        let cancelTime = ResourceUsage.now()
        let cancelClock = LoopbackServer.now
        operation.cancel()
        guard completed.wait(timeout: .now() + 10) == .success, let finished = completionTime.value else { continue }
        figures.cancelMilliseconds.append((finished - cancelTime) * 1000)
        // The server's view, once it has seen the close (at most 120 s).
        var end: LoopbackServer.EndlessBody?
        for _ in 0..<120_000 {
            let all = server.endlessBodies(path: endless)
            if index < all.count, all[index].endedAt != nil {
                end = all[index]
                break
            }
            usleep(1000)
        }
        if let end, let endedAt = end.endedAt {
            figures.closeMilliseconds.append(Double(endedAt - min(endedAt, cancelClock)))
            figures.bytesAfterCancel.append(Double(end.bytesSent - sentAtCancel))
        }
    }
    queue.waitUntilAllOperationsAreFinished()
    return figures
}

/// A time, set once from another thread.
private final class Box: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Double?
    func set(_ value: Double) { lock.withLock { stored = value } }
    var value: Double? { lock.withLock { stored } }
}

/// Section 9 from its figures.
func streamSection(_ figures: StreamFigures, bytes: Int, events: Int) -> Section {
    var section = Section(
        name: "Streams",
        title: "9. Streams: a \(bytes >> 20) MiB body read by an empty consumer in each form (embedded server, child processes), events, cancellation",
        rows: [])
    // A round that failed gives no rate: the median is over the rounds that moved every byte, and the failures get
    // a row of their own, so that one failed round neither hides the figures nor goes unseen.
    func completed(_ runs: [TransferFigures]) -> [TransferFigures] {
        runs.filter { $0.failure == nil && $0.bytes == bytes && !$0.seconds.isNaN }
    }
    func throughput(_ runs: [TransferFigures]) -> Double {
        let rates = completed(runs).map { Double($0.bytes) / $0.seconds }
        return rates.isEmpty ? .nan : median(rates)
    }
    // The growth over the process's resident size when the stream starts: a process that has only made one
    // URLSession request already holds about 33 MiB on Linux (Foundation, libcurl, ICU), so that is the floor.
    func growth(_ runs: [TransferFigures]) -> (peak: Double, growth: Double) {
        let valid = completed(runs).filter { !$0.peakBytes.isNaN && !$0.residentAtStart.isNaN }
        guard !valid.isEmpty else { return (.nan, .nan) }
        return (valid.map(\.peakBytes).max() ?? .nan, valid.map { $0.peakBytes - $0.residentAtStart }.max() ?? .nan)
    }
    func mib(_ rate: Double) -> String {
        rate.isNaN ? "no number" : "\(fixed(rate / 1_048_576, 0)) MiB/s"
    }
    let raw = throughput(figures.raw)
    let (rawPeak, rawGrown) = growth(figures.raw)
    let forms: [(name: String, runs: [TransferFigures], goal: Double?, alone: Double?)] = [
        ("chunk handler", figures.library, 2, nil),
        ("for-await over chunks", figures.forms["stream-async"] ?? [], 2, nil),
        ("line handler, 128-byte lines", figures.forms["stream-lines"] ?? [], nil, figures.decoderAlone["stream-lines"]),
        ("for-await over NDJSON, 512-byte records", figures.forms["stream-ndjson"] ?? [], nil, figures.decoderAlone["stream-ndjson"]),
    ]
    var reasons = Set(figures.raw.filter { completed([$0]).isEmpty }.map { $0.failure ?? "moved \($0.bytes) of \(bytes) bytes" })
    for form in forms {
        let rate = throughput(form.runs)
        let ratio = rate / raw
        let failed = form.runs.filter { completed([$0]).isEmpty }
        reasons.formUnion(failed.map { $0.failure ?? "moved \($0.bytes) of \(bytes) bytes" })
        let (peak, grown) = growth(form.runs)
        var verdict: Verdict = .info
        if rate.isNaN {
            verdict = .failed
        } else if !failed.isEmpty || !(grown < 32 * 1_048_576) {
            verdict = .miss
        } else if let goal = form.goal {
            verdict = ratio >= goal ? .pass : .miss
        } else {
            verdict = .pass
        }
        section.rows.append(Row(
            measure: "Empty consumer, \(form.name)",
            library: "\(mib(rate)), \(failed.count) of \(form.runs.count) rounds failed",
            baseline: "\(mib(raw)) (raw URLSession delegate data task)",
            comparison: (ratio.isNaN ? "" : "ratio \(fixed(ratio, 2)); ")
                + (form.alone.map { "decoder alone \(mib($0)) (\(fixed(rate / $0, 2)) of it); " } ?? "")
                + (grown.isNaN ? "growth: no number" : "growth +\(fixed(grown / 1_048_576, 1)) MiB (peak \(fixed(peak / 1_048_576, 1)) MiB)"),
            goal: (form.goal.map { "ratio ≥ \(fixed($0, 0)), " } ?? "") + "no failed round, growth < 32 MiB",
            verdict: verdict))
    }
    let rawFailed = figures.raw.filter { completed([$0]).isEmpty }
    section.rows.append(Row(
        measure: "Raw URLSession rounds",
        library: "",
        baseline: "\(rawFailed.count) of \(figures.raw.count) failed; growth " + (rawGrown.isNaN ? "no number" : "+\(fixed(rawGrown / 1_048_576, 1)) MiB (peak \(fixed(rawPeak / 1_048_576, 1)) MiB)"),
        comparison: "",
        goal: "information",
        verdict: rawFailed.isEmpty ? .info : .miss))
    if !reasons.isEmpty {
        section.notes.append("Why rounds failed: " + reasons.sorted().joined(separator: "; "))
    }
    section.rows.append(Row(
        measure: "Server-sent events, \(grouped(Double(events))) small events",
        library: figures.eventsPerSecond.isNaN ? "no number" : "\(grouped(figures.eventsPerSecond)) events/s",
        baseline: figures.decoderEventsPerSecond.isNaN ? "" : "\(grouped(figures.decoderEventsPerSecond)) events/s (decoder alone)",
        comparison: "",
        goal: "information",
        verdict: figures.eventsPerSecond.isNaN || figures.events != events ? .failed : .info))
    let cancels = figures.cancelMilliseconds.sorted()
    section.rows.append(Row(
        measure: "Cancel to completion, endless stream",
        library: cancels.isEmpty ? "no number" : "\(fixed(median(cancels), 2)) ms median",
        baseline: "",
        comparison: cancels.isEmpty ? "" : "max \(fixed(cancels.last ?? 0, 2)) ms of \(cancels.count)",
        goal: "information",
        verdict: cancels.isEmpty ? .failed : .info))
    let closes = figures.closeMilliseconds.sorted()
    let after = figures.bytesAfterCancel.sorted()
    let closed = !closes.isEmpty && closes.count == cancels.count
    section.rows.append(Row(
        measure: "Cancel to the server seeing the close, and bytes it sent after the cancel",
        library: closed ? "\(fixed(median(closes), 0)) ms, \(fixed(median(after) / 1_048_576, 1)) MiB median" : "no number",
        baseline: "",
        comparison: closed ? "max \(fixed(closes.last ?? 0, 0)) ms, \(fixed((after.last ?? 0) / 1_048_576, 1)) MiB of \(closes.count)" : "",
        goal: "≤ 100 ms, ≤ 8 MiB",
        verdict: !closed ? .failed : (closes.last ?? 0) <= 100 && (after.last ?? 0) <= 8 * 1_048_576 ? .pass : .miss))
    func rates(_ runs: [TransferFigures]) -> String {
        runs.map { completed([$0]).isEmpty ? "failed" : fixed(Double($0.bytes) / $0.seconds / 1_048_576, 0) }.joined(separator: "/")
    }
    let rounds = forms.map { "\($0.name) \(rates($0.runs))" } + ["raw \(rates(figures.raw))"]
    section.notes.append("MiB/s per round: \(rounds.joined(separator: "; ")). Each side runs in a child process of its own, "
        + "which holds only the client; its peak is \(ResourceUsage.peakSource). The memory goal is on the growth over the child's resident size when the stream starts (about 31 MiB: a Linux process that has made one URLSession request holds about 33 MiB, so an absolute 32 MiB cannot be met by any client). The raw side's delegate queue is the session's own serial `OperationQueue`. An empty consumer adds up the bytes (a record counts as its 512 bytes) under a lock; the line and NDJSON bodies are one 64 KiB piece of lines sent again and again; a round fails when the stream fails (`consumerTooSlow` was the failure before #34) or moves fewer bytes. The events are 38–44 bytes each, sent in 64 KiB pieces; "
        + "the rate counts from the request to the completion. Cancel to completion is the time from `cancel()` on another thread "
        + "to the completion handler, on a global queue, once 64 MiB of an endless body have arrived; the server sends that body "
        + "as fast as the client reads, and reports the bytes it sent after the cancel and when it saw the connection close "
        + "(docs/reliability.md says why Linux's URLSession is slow to close it).")
    return section
}
#endif
