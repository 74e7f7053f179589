// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

// Section 7: peak memory of a large download and upload. Each runs in a child process of its own
// (`requests-bench --transfer-child download|upload BYTES BASE_URL`), because the peak resident size
// (VmHWM on Linux, ru_maxrss on Darwin) counts from the start of a process; the server stays in the parent
// and is not counted.

private struct BenchDownload: DownloadRequest {
    let url: URL
    let destination: URL?
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

private struct BenchUpload: UploadRequest {
    typealias Success = Data
    let url: URL
    let uploadBody: UploadBody
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// The child: runs one transfer, prints `bytes seconds peak`, and exits (1 when the transfer failed).
func runTransferChild(_ arguments: [String]) -> Never {
    guard arguments.count == 3, let bytes = Int(arguments[1]), let base = URL(string: arguments[2]) else {
        FileHandle.standardError.write(Data("usage: --transfer-child download|upload|stream|raw-stream|… BYTES BASE_URL\n".utf8))
        exit(2)
    }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    let session = URLSession(configuration: configuration)
    let queue = OperationQueue()
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("requests-bench-\(UUID().uuidString).bin")
    defer { try? FileManager.default.removeItem(at: file) }
    let start: Double
    let transferred: Int
    let residentAtStart = ResourceUsage.residentBytes() ?? -1
    switch arguments[0] {
    case "download":
        start = ResourceUsage.now()
        let operation = queue.addRequest(BenchDownload(url: base.appendingPathComponent("bytes/\(bytes)"), destination: file), session: session)
        queue.waitUntilAllOperationsAreFinished()
        guard case .success? = operation.result else { exit(1) }
        transferred = ((try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber)?.intValue ?? 0
    case "upload":
        // Written a MiB at a time, so that making the file does not raise the peak.
        guard FileManager.default.createFile(atPath: file.path, contents: nil) else { exit(1) }
        guard let handle = try? FileHandle(forWritingTo: file) else { exit(1) }
        let chunk = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        for _ in 0..<(bytes >> 20) { handle.write(chunk) }
        try? handle.close()
        start = ResourceUsage.now()
        let operation = queue.addRequest(BenchUpload(url: base.appendingPathComponent("sink/bench"), uploadBody: .file(file)), session: session)
        queue.waitUntilAllOperationsAreFinished()
        struct Report: Decodable { let bytes: Int }
        guard case let .success(data)? = operation.result, let report = try? JSONDecoder().decode(Report.self, from: data) else { exit(1) }
        transferred = report.bytes
    case "gzip-bomb", "huge":
        // Refused by the default 64 MiB limit: the figure is the peak while it happens.
        let path = arguments[0] == "huge" ? "bytes/\(bytes)" : "hostile/gzip-bomb/\(bytes)"
        start = ResourceUsage.now()
        let operation = queue.addRequest(BenchBytes(url: base.appendingPathComponent(path)), session: session)
        queue.waitUntilAllOperationsAreFinished()
        guard case .failure(TransferLimitError.responseTooLarge)? = operation.result else { exit(1) }
        transferred = 0
    case "deadline":
        // `bytes` is the deadline in milliseconds; the figure is how late the completion came after it.
        let deadline = Double(bytes) / 1000
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(deadline: deadline, minimumSpeed: nil))
        let started = ResourceUsage.now()
        let operation = queue.addRequest(BenchBytes(url: base.appendingPathComponent("hostile/endless").appendingQueryItem("chunk=1&interval=200")), session: session)
        queue.waitUntilAllOperationsAreFinished()
        guard case .failure(TransferLimitError.deadlineExceeded)? = operation.result else { exit(1) }
        start = started + deadline
        transferred = 0
    case "resume-cut", "resume-rest":
        start = ResourceUsage.now()
        guard let kept = runResumeChild(arguments[0], bytes: bytes, base: base, session: session, file: file) else { exit(1) }
        transferred = kept
    case "stream", "raw-stream", "stream-async", "stream-lines", "stream-ndjson":
        start = ResourceUsage.now()
        guard let received = runStreamChild(arguments[0], bytes: bytes, base: base) else { exit(1) }
        transferred = received
    default:
        exit(2)
    }
    print("\(transferred) \(ResourceUsage.now() - start) \(ResourceUsage.peakResidentBytes() ?? -1) \(residentAtStart)")
    exit(0)
}

private struct BenchBytes: DataRequest {
    typealias Success = Int
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
    func processData(_ data: Data) throws -> Int { data.count }
}

extension URL {
    fileprivate func appendingQueryItem(_ query: String) -> URL {
        URL(string: absoluteString + "?" + query) ?? self
    }
}

/// Section 8: what refusing hostile responses costs: the peak while a gzip bomb and a huge body are refused
/// by the default limit, and how late a deadline's completion comes.
func limitsSection(bomb: TransferFigures, huge: TransferFigures, late: TransferFigures, bombBytes: Int, hugeBytes: Int) -> Section {
    var section = Section(
        name: "Limits",
        title: "8. Hostile responses refused by the default limits (embedded server, child process)",
        rows: [])
    let ceiling = Double(TransferLimits.defaultMaximumBodySize) + 32 * 1_048_576
    for (measure, figures) in [("gzip bomb inflating to \(bombBytes >> 20) MiB", bomb), ("\(hugeBytes >> 20) MiB body with its Content-Length", huge)] {
        let growth = figures.peakBytes - figures.residentAtStart
        section.rows.append(Row(
            measure: measure,
            library: growth.isNaN ? "no number" : "+\(fixed(growth / 1_048_576, 1)) MiB peak over the start",
            baseline: figures.residentAtStart.isNaN ? "" : "\(fixed(figures.residentAtStart / 1_048_576, 1)) MiB at the start",
            comparison: figures.seconds.isNaN ? "" : "peak \(fixed(figures.peakBytes / 1_048_576, 1)) MiB; refused after \(fixed(figures.seconds * 1000, 0)) ms",
            goal: "growth < 64 MiB limit + 32 MiB",
            verdict: growth.isNaN ? .failed : (growth < ceiling ? .pass : .miss)))
    }
    section.rows.append(Row(
        measure: "A 1 s deadline on an endless trickle",
        library: late.seconds.isNaN ? "no number" : "completion \(fixed(late.seconds * 1000, 0)) ms after the deadline",
        baseline: "",
        comparison: "",
        goal: "< 1 s",
        verdict: late.seconds.isNaN ? .failed : (late.seconds < 1 ? .pass : .miss)))
    section.notes.append("Each runs in a child process of its own; the peak is \(ResourceUsage.peakSource), which includes the "
        + "process's own baseline (Foundation, libcurl, the Swift runtime).")
    return section
}

/// One child's figures.
struct TransferFigures {
    var bytes = 0
    var seconds = Double.nan
    var peakBytes = Double.nan
    /// The child's resident size just before the transfer started.
    var residentAtStart = Double.nan
    /// Why the child gave no figures: what it wrote on standard error, or its exit status.
    var failure: String?
}

/// Runs `kind` in a child process against `base`.
func measureTransfer(_ kind: String, bytes: Int, base: URL) -> TransferFigures {
    let executable = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL.path
    let output: String
    switch ResourceUsage.runReportingFailure(executable, ["--transfer-child", kind, String(bytes), base.absoluteString]) {
    case let .success(printed): output = printed
    case let .failure(failure): return TransferFigures(failure: failure.reason)
    }
    let parts = output.split(separator: " ")
    guard parts.count == 4, let count = Int(parts[0]), let seconds = Double(parts[1]), let peak = Double(parts[2]),
          let atStart = Double(parts[3]) else {
        return TransferFigures()
    }
    // -1: the child could not read its peak; no number (a failed row), rather than a peak of 0 that passes.
    return TransferFigures(bytes: count, seconds: seconds, peakBytes: peak < 0 ? .nan : peak, residentAtStart: atStart < 0 ? .nan : atStart)
}

func transferSection(download: TransferFigures, upload: TransferFigures, bytes: Int) -> Section {
    var section = Section(
        name: "Transfers",
        title: "7. Peak memory of a \(bytes >> 20) MiB download to a file and upload from a file (embedded server, child process)",
        rows: [])
    for (measure, figures) in [("Download to a file (DownloadRequest)", download), ("Upload from a file (UploadRequest, streamed)", upload)] {
        let complete = figures.bytes == bytes
        section.rows.append(Row(
            measure: measure,
            library: figures.peakBytes.isNaN ? "no number" : "\(fixed(figures.peakBytes / 1_048_576, 1)) MiB peak RSS",
            baseline: "",
            comparison: figures.seconds.isNaN ? "" : "\(fixed(Double(figures.bytes) / 1_048_576 / figures.seconds, 0)) MiB/s",
            goal: "< 64 MiB",
            verdict: figures.peakBytes.isNaN || !complete ? .failed : (figures.peakBytes < 64 * 1_048_576 ? .pass : .miss)))
    }
    section.notes.append("Peak RSS is \(ResourceUsage.peakSource) of a child process that runs only the transfer (the server is in the parent). "
        + "Bytes moved: download \(grouped(Double(download.bytes))), upload \(grouped(Double(upload.bytes))) of \(grouped(Double(bytes))).")
    return section
}
#endif
