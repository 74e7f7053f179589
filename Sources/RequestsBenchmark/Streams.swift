// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// Section 9: streams. A large body through a StreamRequest's chunk handler against a raw URLSession delegate data
// task, each in a child process of its own (`--transfer-child stream|raw-stream BYTES BASE_URL`), in alternating
// rounds; server-sent events parsed through the whole pipeline; and the time from a cancel to the completion.

private struct BenchStream: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
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
    let operation = queue.addRequest(BenchStream(url: url), session: session) { chunk in counter.add(chunk.count) }
    queue.waitUntilAllOperationsAreFinished()
    guard case .success? = operation.result else {
        // Read by the parent (measureTransfer), so that a round without a number says why.
        let reason: String
        switch operation.result {
        case let .failure(error)?: reason = "\(error) (\(type(of: error)))"
        default: reason = "no result"
        }
        FileHandle.standardError.write(Data("the library's stream failed after \(counter.value >> 20) MiB: \(reason)\n".utf8))
        return nil
    }
    return counter.value
}

/// What section 9 measured.
struct StreamFigures {
    var library: [TransferFigures] = []
    var raw: [TransferFigures] = []
    var events = 0
    var eventsPerSecond = Double.nan
    var decoderEventsPerSecond = Double.nan
    var cancelMilliseconds: [Double] = []
}

/// Runs the stream measurements against the embedded server.
func measureStreams(bytes: Int, rounds: Int, events: Int, cancels: Int, server: LoopbackServer) -> StreamFigures {
    var figures = StreamFigures()
    for round in 0..<rounds {
        // Alternating which side goes first, so that neither always meets a cold or a warm machine.
        let sides = round % 2 == 0 ? ["stream", "raw-stream"] : ["raw-stream", "stream"]
        for side in sides {
            let measured = measureTransfer(side, bytes: bytes, base: server.baseURL)
            if side == "stream" { figures.library.append(measured) } else { figures.raw.append(measured) }
        }
    }

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

    // Cancel to completion: an endless stream, cancelled from another thread once chunks flow.
    for _ in 0..<cancels {
        let chunks = ByteCounter()
        let completed = DispatchSemaphore(value: 0)
        let completionTime = Box()
        let operation = queue.addRequest(BenchStream(url: server.url("/hostile/endless?chunk=1024&interval=1")), session: session) { _ in
            chunks.add(1)
        } completion: { _ in
            completionTime.set(ResourceUsage.now())
            completed.signal()
        }
        while chunks.value < 3, !operation.isFinished { usleep(500) }
        let cancelTime = ResourceUsage.now()
        operation.cancel()
        guard completed.wait(timeout: .now() + 10) == .success, let finished = completionTime.value else { continue }
        figures.cancelMilliseconds.append((finished - cancelTime) * 1000)
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
        title: "9. Streams: a \(bytes >> 20) MiB body through the chunk handler (embedded server, child processes), events, cancellation",
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
    let library = throughput(figures.library)
    let raw = throughput(figures.raw)
    let ratio = library / raw
    section.rows.append(Row(
        measure: "Throughput, StreamRequest chunk handler",
        library: library.isNaN ? "no number" : "\(fixed(library / 1_048_576, 0)) MiB/s",
        baseline: raw.isNaN ? "no number" : "\(fixed(raw / 1_048_576, 0)) MiB/s (raw URLSession delegate data task)",
        comparison: ratio.isNaN ? "" : "ratio \(fixed(ratio, 3)), medians of \(completed(figures.library).count) and \(completed(figures.raw).count) rounds",
        goal: "ratio ≥ 0.95",
        verdict: ratio.isNaN ? .failed : (ratio >= 0.95 ? .pass : .miss)))
    let failed = figures.library.filter { completed([$0]).isEmpty }
    let rawFailed = figures.raw.filter { completed([$0]).isEmpty }
    let reasons = Set((failed + rawFailed).map { $0.failure ?? "moved \($0.bytes) of \(bytes) bytes" }).sorted()
    section.rows.append(Row(
        measure: "Rounds that failed",
        library: "\(failed.count) of \(figures.library.count)",
        baseline: "\(rawFailed.count) of \(figures.raw.count), raw",
        comparison: "",
        goal: "none",
        verdict: failed.isEmpty && rawFailed.isEmpty ? .pass : .miss))
    if !reasons.isEmpty {
        section.notes.append("Why rounds failed: " + reasons.joined(separator: "; "))
    }
    // The growth over the process's resident size when the stream starts: a process that has only made one
    // URLSession request already holds about 33 MiB on Linux (Foundation, libcurl, ICU), so that is the floor.
    func growth(_ runs: [TransferFigures]) -> (peak: Double, growth: Double) {
        let valid = completed(runs).filter { !$0.peakBytes.isNaN && !$0.residentAtStart.isNaN }
        guard !valid.isEmpty else { return (.nan, .nan) }
        return (valid.map(\.peakBytes).max() ?? .nan, valid.map { $0.peakBytes - $0.residentAtStart }.max() ?? .nan)
    }
    let (peak, grown) = growth(figures.library)
    let (rawPeak, rawGrown) = growth(figures.raw)
    section.rows.append(Row(
        measure: "Peak resident memory, streaming \(bytes >> 20) MiB",
        library: grown.isNaN ? "no number" : "+\(fixed(grown / 1_048_576, 1)) MiB over the start (peak \(fixed(peak / 1_048_576, 1)) MiB)",
        baseline: rawGrown.isNaN ? "" : "+\(fixed(rawGrown / 1_048_576, 1)) MiB (peak \(fixed(rawPeak / 1_048_576, 1)) MiB), raw",
        comparison: "highest of \(completed(figures.library).count) completed runs",
        goal: "growth < 32 MiB",
        verdict: grown.isNaN ? .failed : (grown < 32 * 1_048_576 ? .pass : .miss)))
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
    let rounds = zip(figures.library, figures.raw).map { pair -> String in
        let (library, raw) = pair
        return "\(fixed(Double(library.bytes) / library.seconds / 1_048_576, 0))/\(fixed(Double(raw.bytes) / raw.seconds / 1_048_576, 0))"
    }
    section.notes.append("MiB/s per round, library/raw: \(rounds.joined(separator: ", ")). Each side runs in a child process of its own, "
        + "which holds only the client; its peak is \(ResourceUsage.peakSource). The memory goal is on the growth over the child's resident size when the stream starts (about 31 MiB: a Linux process that has made one URLSession request holds about 33 MiB, so an absolute 32 MiB cannot be met by any client). The raw side's delegate queue is the session's own serial `OperationQueue`. The events are 38–44 bytes each, sent in 64 KiB pieces; "
        + "the rate counts from the request to the completion. Cancel to completion is the time from `cancel()` on another thread "
        + "to the completion handler, on a global queue.")
    return section
}
