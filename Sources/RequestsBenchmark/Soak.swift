#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// `requests-bench --soak [N] [--server-process]`: N requests (default 100,000; a third with credentials, so on
// the delegate session) at concurrency 16 against the loopback server (in this process, or in a child process),
// 1 % of them to a server fault and 5 % cancelled at a random moment. Checks that every completion runs exactly
// once, that nothing else fails, and that the resident size stays flat after warm-up (≤ 10 % growth), and prints
// the figures.

private struct SoakJSON: Decodable {
    let name: String
}

private struct SoakDecodable: DecodableRequest {
    typealias Success = SoakJSON
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// The raw body, sent with credentials, so that it runs on the delegate session.
private struct SoakAuthorized: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.setValue("Bearer soak", forHTTPHeaderField: "Authorization")
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

private struct SoakNoContent: NoContentRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

private func failure<T>(of result: Result<T, Error>) -> Error? {
    if case let .failure(error) = result { return error }
    return nil
}

/// Completions per request, from any thread.
private final class SoakLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var calls: [UInt8]
    private(set) var cancelled = 0
    private(set) var failed = 0

    init(count: Int) { calls = Array(repeating: 0, count: count) }

    func record(_ index: Int, _ error: Error?) {
        lock.lock()
        defer { lock.unlock() }
        calls[index] &+= 1
        if let error {
            failed += 1
            if case .cancelled? = error as? RequestQueueError { cancelled += 1 }
        }
    }

    var summary: (twice: Int, never: Int, cancelled: Int, failed: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (calls.filter { $0 > 1 }.count, calls.filter { $0 == 0 }.count, cancelled, failed)
    }
}

/// The soak's loopback server: in this process, or in a child process (`requests-bench --serve`).
struct SoakServer {
    let baseURL: URL
    /// Kept alive for the soak when the server runs in this process.
    var embedded: LoopbackServer?
    /// The child serving the soak; it exits when its standard input closes, that is with this process.
    var child: Process?
    var childInput: Pipe?

    var description: String { child == nil ? "the server in this process" : "a server in another process" }

    /// Whether the server still serves: a child that died would turn every later request into a failure.
    var isRunning: Bool { child?.isRunning ?? true }

    func url(_ pathAndQuery: String) -> URL {
        LoopbackServer.url(pathAndQuery, on: baseURL)
    }

    static func inProcess() throws -> SoakServer {
        let server = try LoopbackServer()
        return SoakServer(baseURL: server.baseURL, embedded: server)
    }

    struct StartError: Error, CustomStringConvertible {
        let description: String
    }

    /// Starts this executable with `--serve` and waits up to 10 s for the base URL it prints.
    static func startProcess() throws -> SoakServer {
        let process = Process()
        process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["--serve"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        // The child need not inherit the leak fix: its memory is not measured.
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = nil
        process.environment = environment
        try process.run()
        let firstLine = FirstLine()
        let printed = DispatchSemaphore(value: 0)
        // Through a box: corelibs marks Pipe and FileHandle Sendable, Apple's SDKs may not.
        let reading = UncheckedSendable(output.fileHandleForReading)
        DispatchQueue.global().async {
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = reading.value.availableData
                if chunk.isEmpty { break }
                line += chunk
            }
            firstLine.text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            printed.signal()
        }
        guard printed.wait(timeout: .now() + 10) == .success, let text = firstLine.text, let baseURL = URL(string: text), baseURL.host != nil else {
            process.terminate()
            throw StartError(description: "the server process printed no base URL within 10 s")
        }
        return SoakServer(baseURL: baseURL, embedded: nil, child: process, childInput: input)
    }

    /// The child's first line, written by the reading thread before it signals.
    private final class FirstLine: @unchecked Sendable {
        var text: String?
    }
}

/// Whether scripts/curlu-leak-fix.c is loaded (LD_PRELOAD), which removes Foundation's own per-request leak.
private var foundationLeakFixLoaded: Bool {
    #if canImport(Glibc)
    guard let handle = dlopen(nil, RTLD_NOW) else { return false }
    return dlsym(handle, "requests_curlu_leak_fix_loaded") != nil
    #else
    return false
    #endif
}

/// Runs the soak and exits: 0 when every completion ran once, only faults and cancellations failed, and memory
/// stayed flat.
func runSoak(total: Int, server: SoakServer) -> Never {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.httpMaximumConnectionsPerHost = 16
    let session = URLSession(configuration: configuration)
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = 16
    let ledger = SoakLedger(count: total)
    let faults = ["/fault/reset-before-headers", "/fault/close-mid-body", "/status/500", "/fault/invalid-chunked", "/fault/reset-mid-body"]
    var generator = SystemRandomNumberGenerator()
    let window = 2_000
    // For finding where memory goes: SOAK_FAULTS=0 and SOAK_CANCEL=0 turn the faults and the cancellations off;
    // SOAK_RAW=1 sends plain URLSession data tasks instead (to SOAK_RAW_BASE, for example nginx, if given).
    let environment = ProcessInfo.processInfo.environment
    let faultsOn = environment["SOAK_FAULTS"] != "0"
    let cancelPercent = environment["SOAK_CANCEL"] == "0" ? 0 : 5
    let warmUp = max(window, total / 10)
    var residentAfterWarmUp: Int?
    var residentPeak = 0
    // Whether every resident-size reading worked: one that did not leaves the memory check unmeasured, and the
    // soak fails rather than comparing zeros.
    var residentMeasured = true
    func readResident() -> Int? {
        let bytes = ResourceUsage.residentBytes()
        if bytes == nil { residentMeasured = false }
        return bytes
    }
    let start = ResourceUsage.now()
    var faultCount = 0

    for windowStart in stride(from: 0, to: total, by: window) {
        if environment["SOAK_RAW"] == "1" {
            // Raw URLSession, same server and counts: the baseline for memory growth.
            let group = DispatchGroup()
            let slots = DispatchSemaphore(value: 16)
            for index in windowStart..<min(total, windowStart + window) {
                slots.wait()
                group.enter()
                let base = environment["SOAK_RAW_BASE"].flatMap(URL.init(string:)) ?? server.baseURL
                session.dataTask(with: URL(string: base.absoluteString + "/json?i=\(index)") ?? base) { _, _, error in
                    ledger.record(index, error)
                    slots.signal()
                    group.leave()
                }.resume()
            }
            group.wait()
            if windowStart + window >= warmUp, residentAfterWarmUp == nil {
                ResourceUsage.trimHeap()
                residentAfterWarmUp = readResident()
            }
            continue
        }
        var operations: [(Int, Operation)] = []
        for index in windowStart..<min(total, windowStart + window) {
            let isFault = faultsOn && index % 100 == 50
            if isFault { faultCount += 1 }
            let path = isFault ? faults[(index / 100) % faults.count] : nil
            let operation: Operation
            switch index % 3 {
            case 0:
                let url = server.url(path ?? "/json?i=\(index)")
                operation = queue.addRequest(SoakDecodable(url: url), session: session) { ledger.record(index, failure(of: $0)) }
            case 1:
                let url = server.url(path ?? "/bytes/512?i=\(index)")
                operation = queue.addRequest(SoakAuthorized(url: url), session: session) { ledger.record(index, failure(of: $0)) }
            default:
                let url = server.url(path ?? "/status/204?i=\(index)")
                operation = queue.addRequest(SoakNoContent(url: url), session: session) { ledger.record(index, failure(of: $0)) }
            }
            operations.append((index, operation))
        }
        for (_, operation) in operations where Int.random(in: 0..<100, using: &generator) < cancelPercent {
            let handle = UncheckedSendable(operation)
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int.random(in: 0...200, using: &generator))) {
                handle.value.cancel()
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        let reading = readResident()
        let resident = reading ?? 0
        if windowStart + window >= warmUp, residentAfterWarmUp == nil {
            ResourceUsage.trimHeap()
            residentAfterWarmUp = readResident()
        } else if residentAfterWarmUp != nil {
            residentPeak = max(residentPeak, resident)
        }
        if (windowStart / window) % 10 == 9 {
            log("  \(windowStart + window) requests, resident " + (reading.map { "\($0 / 1_048_576) MiB" } ?? "not measured"))
        }
    }
    Thread.sleep(forTimeInterval: 0.5)  // cancellations scheduled past the last window
    ResourceUsage.trimHeap()
    let residentAtEnd = readResident() ?? 0
    let seconds = ResourceUsage.now() - start
    let summary = ledger.summary
    if residentAfterWarmUp == nil { residentMeasured = false }
    let base = Double(residentAfterWarmUp ?? 1)
    let growth = (Double(residentAtEnd) - base) / base * 100
    // Unmeasured memory is not flat memory: the check fails.
    let flat = residentMeasured && growth <= 10
    // Failures other than the faults and the cancellations: a server that stopped serving, for example.
    let otherFailures = max(0, summary.failed - summary.cancelled - faultCount)
    let passed = summary.twice == 0 && summary.never == 0 && otherFailures == 0 && server.isRunning && flat
    let bytesPerRequest = (Double(residentAtEnd) - base) / Double(max(1, total - warmUp))
    #if canImport(FoundationNetworking)
    let leakNote =
        foundationLeakFixLoaded
        ? "Foundation's per-request leak: patched out (scripts/curlu-leak-fix.c loaded)"
        : "Foundation's per-request leak: present (≈ 200 B a request, see docs/reliability.md); scripts/soak-without-foundation-leak.sh measures without it"
    #else
    let leakNote = "Foundation's per-request leak (swift-corelibs-foundation's libcurl URLs): not applicable, this is Apple's URLSession"
    #endif
    let residentLine =
        residentMeasured
        ? "resident: \(fixed(base / 1_048_576, 1)) MiB after warm-up (\(grouped(Double(warmUp))) requests), \(fixed(Double(residentAtEnd) / 1_048_576, 1)) MiB at the end (\(signed(growth, 1)) %, \(grouped(bytesPerRequest)) B a request), peak between windows \(fixed(Double(residentPeak) / 1_048_576, 1)) MiB"
        : "resident: NOT MEASURED (the resident size could not be read on this platform), so the memory check fails"
    print(
        """
        soak: \(grouped(Double(total))) requests at concurrency 16 in \(fixed(seconds, 1)) s (\(grouped(Double(total) / seconds)) req/s), \(server.description)
          server faults: \(grouped(Double(faultCount))); cancelled: \(grouped(Double(summary.cancelled))); failed in all: \(grouped(Double(summary.failed))); other failures: \(grouped(Double(otherFailures)))\(server.isRunning ? "" : " (the server process died)")
          completions: called twice \(summary.twice), never called \(summary.never)
          \(residentLine)
          \(leakNote)
          \(passed ? "PASS: every completion once, no failure but the faults and cancellations, memory flat (≤ 10 % growth)" : residentMeasured ? "FAIL" : "FAIL: memory not measured")
        """)
    exit(passed ? 0 : 1)
}
#endif
