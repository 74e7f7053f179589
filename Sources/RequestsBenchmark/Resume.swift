// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// Section 10: resumable downloads. A download cut at 50 % by the server, whose ResumeState a first child process
// stores and a second one resumes from (a restart, as an app would), with the bytes the server sent after the cut;
// then downloads cut at many random offsets, each resumed by the retry policy, checked with their SHA-256.

private struct ResumableBenchDownload: DownloadRequest {
    let url: URL
    let destination: URL?
    var integrity: DownloadIntegrity?
    var ownRetryPolicy: RetryPolicy?
    var identifier: String { url.absoluteString }
    var retryPolicy: RetryPolicy? { ownRetryPolicy }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Where the two children of the cut-and-restart measurement pass the state.
private let stateVariable = "REQUESTS_BENCH_RESUME_STATE"

/// The child side: `resume-cut` downloads until the server cuts it at half and stores the ``ResumeState``, and
/// returns the bytes it kept; `resume-rest` resumes from that state into `file`, and returns the file's size.
func runResumeChild(_ kind: String, bytes: Int, base: URL, session: URLSession, file: URL) -> Int? {
    guard let statePath = ProcessInfo.processInfo.environment[stateVariable] else { return nil }
    let url = base.appendingPathComponent("ranged/\(bytes)").appendingQuery("cut=\(bytes / 2)")
    let queue = OperationQueue()
    let outcome = Outcome()
    switch kind {
    case "resume-cut":
        queue.addRequest(ResumableBenchDownload(url: url, destination: file), resumingFrom: nil, session: session) { outcome.set($0.map { _ in 0 }, $1) }
        queue.waitUntilAllOperationsAreFinished()
        guard let state = outcome.state, let data = try? JSONEncoder().encode(state), (try? data.write(to: URL(fileURLWithPath: statePath))) != nil else {
            return nil
        }
        return Int(state.bytesReceived)
    default:
        guard let data = FileManager.default.contents(atPath: statePath), let state = try? JSONDecoder().decode(ResumeState.self, from: data) else {
            return nil
        }
        queue.addRequest(ResumableBenchDownload(url: url, destination: file), resumingFrom: state, session: session) { outcome.set($0.map { _ in 0 }, $1) }
        queue.waitUntilAllOperationsAreFinished()
        state.discard()
        guard case .success? = outcome.result else { return nil }
        return ((try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber)?.intValue
    }
}

private final class Outcome: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: (Result<Int, Error>, ResumeState?)?
    func set(_ result: Result<Int, Error>, _ state: ResumeState?) { lock.withLock { stored = (result, state) } }
    var result: Result<Int, Error>? { lock.withLock { stored?.0 } }
    var state: ResumeState? { lock.withLock { stored?.1 } }
}

struct ResumeFigures {
    var cut = TransferFigures()
    var rest = TransferFigures()
    var sentAfterCut = 0
    var bytes = 0
    /// The random-cut runs: how many ended with a matching SHA-256, of how many; the cuts met; bytes sent twice.
    var cutRuns = 0
    var matchingRuns = 0
    var cutsMet = 0
    var resentBytes = 0
    /// Cuts by kind, and the bytes the client asked for again after each kind.
    var closes = 0
    var resets = 0
    var refetchedAfterClose = 0
    var refetchedAfterReset = 0
    var cutBytes = 0
    var cutSeconds = Double.nan
}

/// Measures both parts against the embedded server.
func measureResume(bytes: Int, cutBytes: Int, runs: Int, cutsPerRun: Int, server: LoopbackServer) -> ResumeFigures {
    var figures = ResumeFigures(bytes: bytes, cutRuns: runs, cutBytes: cutBytes)
    let statePath = FileManager.default.temporaryDirectory.appendingPathComponent("requests-bench-resume-\(UUID().uuidString).json").path
    setenv(stateVariable, statePath, 1)
    defer { try? FileManager.default.removeItem(atPath: statePath) }
    let path = "/ranged/\(bytes)"
    figures.cut = measureTransfer("resume-cut", bytes: bytes, base: server.baseURL)
    let sentBefore = server.bodyBytesSent(path: path)
    figures.rest = measureTransfer("resume-rest", bytes: bytes, base: server.baseURL)
    figures.sentAfterCut = server.bodyBytesSent(path: path) - sentBefore

    guard let digest = sha256(of: LoopbackResource.content(length: cutBytes)) else { return figures }
    let cutter = Cutter(cuts: cutsPerRun)
    let cutsPath = "/bench-random-cuts"
    server.resource(cutsPath) { request in
        let start = request.headers["range"].flatMap { Int($0.dropFirst(6).dropLast()) } ?? 0
        let (cut, reset) = cutter.next(after: start, length: cutBytes)
        return LoopbackResource(length: cutBytes, cutAfter: cut, resetOnCut: reset)
    }
    let session = URLSession(configuration: .ephemeral)
    let retry = RetryPolicy(maxAttempts: cutsPerRun * 2 + 2, baseDelay: 0.001, maxDelay: 0.001, jitter: 0)
    let start = ResourceUsage.now()
    for run in 0..<runs {
        cutter.reset()
        let requestsBefore = server.requestCount(path: cutsPath)
        let sentBefore = server.bodyBytesSent(path: cutsPath)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("requests-bench-cuts-\(run).bin")
        let queue = OperationQueue()
        let outcome = Outcome()
        let request = ResumableBenchDownload(url: server.url(cutsPath), destination: file, integrity: .sha256(digest), ownRetryPolicy: retry)
        queue.addRequest(request, resumingFrom: nil, session: session) { outcome.set($0.map { _ in 0 }, $1) }
        queue.waitUntilAllOperationsAreFinished()
        if case .success? = outcome.result { figures.matchingRuns += 1 }
        outcome.state?.discard()
        try? FileManager.default.removeItem(at: file)
        figures.cutsMet += server.requestCount(path: cutsPath) - requestsBefore - 1
        figures.resentBytes += server.bodyBytesSent(path: cutsPath) - sentBefore - cutBytes
    }
    figures.cutSeconds = ResourceUsage.now() - start
    (figures.closes, figures.resets, figures.refetchedAfterClose, figures.refetchedAfterReset) = cutter.counts
    return figures
}

/// Picks each response's random cut until a run's cuts are used up, and counts the bytes each resume asked for
/// again: those between where the next request starts and where the server cut, by the kind of cut.
private final class Cutter: @unchecked Sendable {
    private let lock = NSLock()
    private let cuts: Int
    private var left: Int
    private var lastCut: (offset: Int, reset: Bool)?
    private(set) var refetchedAfterClose = 0
    private(set) var refetchedAfterReset = 0
    private(set) var closes = 0
    private(set) var resets = 0

    init(cuts: Int) {
        self.cuts = cuts
        left = cuts
    }

    func reset() {
        lock.withLock {
            left = cuts
            lastCut = nil
        }
    }

    func next(after start: Int, length: Int) -> (Int?, Bool) {
        lock.withLock {
            if let lastCut {
                let refetched = max(0, lastCut.offset - start)
                if lastCut.reset { refetchedAfterReset += refetched } else { refetchedAfterClose += refetched }
                self.lastCut = nil
            }
            // About evenly spread: on average a cut every length / cuts bytes.
            let cut = start + Int.random(in: 1...max(1, 2 * length / cuts))
            guard left > 0, cut < length else { return (nil, false) }
            left -= 1
            let reset = Bool.random()
            if reset { resets += 1 } else { closes += 1 }
            lastCut = (cut, reset)
            return (cut, reset)
        }
    }

    var counts: (closes: Int, resets: Int, afterClose: Int, afterReset: Int) {
        lock.withLock { (closes, resets, refetchedAfterClose, refetchedAfterReset) }
    }
}

/// The SHA-256 of `data` from the system's tool, independent of the library's own.
private func sha256(of data: Data) -> String? {
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("requests-bench-digest-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: file) }
    guard (try? data.write(to: file)) != nil else { return nil }
    #if os(macOS)
    let output = ResourceUsage.run("/usr/bin/shasum", ["-a", "256", file.path])
    #else
    let output = ResourceUsage.run("/usr/bin/env", ["sha256sum", file.path])
    #endif
    return output?.split(separator: " ").first.map(String.init)
}

func resumeSection(_ figures: ResumeFigures) -> Section {
    var section = Section(
        name: "Resume",
        title: "10. Resumable downloads (embedded server; the cut-and-restart halves each in a child process)",
        rows: [])
    let missing = figures.bytes - figures.cut.bytes
    let excess = figures.sentAfterCut - missing
    let restOK = figures.rest.bytes == figures.bytes && figures.cut.bytes > 0
    section.rows.append(Row(
        measure: "\(figures.bytes >> 20) MiB cut at 50 %, state stored, resumed by a new process: bytes sent after the cut",
        library: restOK ? "\(grouped(Double(figures.sentAfterCut))) B (missing \(grouped(Double(missing))), excess \(grouped(Double(excess))))" : "no number",
        baseline: "",
        comparison: figures.rest.seconds.isNaN ? "" : "\(fixed(Double(figures.bytes - figures.cut.bytes) / 1_048_576 / figures.rest.seconds, 0)) MiB/s",
        goal: "excess ≤ 64 KiB",
        verdict: !restOK ? .failed : (excess <= 64 * 1024 ? .pass : .miss)))
    let peak = max(figures.cut.peakBytes, figures.rest.peakBytes)
    section.rows.append(Row(
        measure: "Peak RSS of the two processes (cut / resumed)",
        library: peak.isNaN ? "no number" : "\(fixed(figures.cut.peakBytes / 1_048_576, 1)) / \(fixed(figures.rest.peakBytes / 1_048_576, 1)) MiB",
        baseline: "",
        comparison: "",
        goal: "< 64 MiB",
        verdict: peak.isNaN ? .failed : (peak < 64 * 1_048_576 ? .pass : .miss)))
    section.rows.append(Row(
        measure: "\(figures.cutBytes >> 20) MiB cut at random offsets and resumed by the retry policy: SHA-256 matches",
        library: "\(figures.matchingRuns) of \(figures.cutRuns) runs; \(figures.cutsMet) cuts",
        baseline: "",
        comparison: figures.cutSeconds.isNaN ? "" : "\(fixed(figures.cutSeconds, 1)) s; \(grouped(Double(figures.resentBytes))) B sent twice",
        goal: "every run",
        verdict: figures.cutRuns == 0 ? .failed : (figures.matchingRuns == figures.cutRuns ? .pass : .miss)))
    section.rows.append(Row(
        measure: "Bytes asked for again after a cut: after a close (FIN) / after a reset (RST)",
        library: "\(grouped(Double(figures.refetchedAfterClose))) B over \(figures.closes) / \(grouped(Double(figures.refetchedAfterReset))) B over \(figures.resets)",
        baseline: "",
        comparison: figures.resets == 0 ? "" : "\(grouped(Double(figures.refetchedAfterReset / figures.resets))) B per reset",
        goal: "0 after a close",
        verdict: figures.closes == 0 ? .failed : (figures.refetchedAfterClose == 0 ? .pass : .miss)))
    section.notes.append("Half of the cuts close the connection (FIN), half reset it (RST), about every \(grouped(Double(figures.cutBytes / max(1, figures.cutsMet / max(1, figures.cutRuns))))) bytes. "
        + "The SHA-256 is checked by the library (`DownloadIntegrity.sha256`) against the one `sha256sum` computed. "
        + "\"Sent twice\" is what the server wrote beyond one copy, including what a reset discarded in the kernel's socket buffers, "
        + "which the client never received; \"asked for again\" is, per cut, the offset of the cut minus where the next request's range starts: "
        + "a reset loses what was in flight, a close loses nothing.")
    return section
}

extension URL {
    fileprivate func appendingQuery(_ query: String) -> URL {
        URL(string: absoluteString + "?" + query) ?? self
    }
}
#endif
