// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// Section 11: the response cache. The same 100 KB JSON (not decoded: on Linux decoding it takes ~5 ms, which would
// hide what the cache changes) from three routes of the embedded server: one that forbids storing (a full fetch every time), one fresh for an hour (hits), one `no-cache` with an
// ETag (a 304 every time after the first). Requests per second for each, in the same run, and the body bytes the
// 304s saved.

private struct CatalogueFetch: DataRequest {
    typealias Success = Int
    let url: URL
    func processData(_ data: Data) throws -> Int { data.count }
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Counts the full answers and the 304s of a route.
private final class AnswerCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var full = 0
    private var notModified = 0
    func count(notModified isNotModified: Bool) { lock.withLock { if isNotModified { notModified += 1 } else { full += 1 } } }
    var counts: (full: Int, notModified: Int) { lock.withLock { (full, notModified) } }
}

struct CacheFigures {
    var bodyBytes = 0
    var requests = 0
    var fullPerSecond = Double.nan
    var hitPerSecond = Double.nan
    var revalidatedPerSecond = Double.nan
    var fullAnswers = 0
    var notModifiedAnswers = 0
    var failures = 0
}

func measureCache(requests: Int, server: LoopbackServer) -> CacheFigures {
    let items = (0..<800).map { #"{"id":\#($0),"name":"Item number \#($0) of the catalogue","tags":["alpha","beta","gamma","delta"],"price":\#($0 * 3).99,"available":true}"# }
    let body = Data(("[" + items.joined(separator: ",") + "]").utf8)
    var figures = CacheFigures(bodyBytes: body.count, requests: requests)
    let counter = AnswerCounter()
    let routes = [("full", ["Cache-Control": "no-store"]), ("fresh", ["Cache-Control": "max-age=3600", "ETag": #""v1""#]),
                  ("revalidated", ["Cache-Control": "no-cache", "ETag": #""v1""#])]
    for (name, headers) in routes {
        server.route("/cache-bench/\(name)") { request in
            let isNotModified = request.headers["if-none-match"] == headers["ETag"] && headers["ETag"] != nil
            if name == "revalidated" { counter.count(notModified: isNotModified) }
            if isNotModified { return LoopbackResponse(status: 304, headers: headers) }
            return LoopbackResponse(headers: headers.merging(["Content-Type": "application/json"]) { $1 }, body: body)
        }
    }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    let session = URLSession(configuration: configuration)
    var failures = 0
    func run(_ name: String) -> Double {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        queue.requestPolicies = RequestPolicies(responseCache: ResponseCache.inMemory())
        let url = server.url("/cache-bench/\(name)")
        // One request first, so that the cache holds the response (and the connection is open) for the timed ones.
        let warmUp = queue.addRequest(CatalogueFetch(url: url), session: session)
        queue.waitUntilAllOperationsAreFinished()
        guard case .success? = warmUp.result else { return .nan }
        let start = ResourceUsage.now()
        let operations = (0..<requests).map { _ in queue.addRequest(CatalogueFetch(url: url), session: session) }
        queue.waitUntilAllOperationsAreFinished()
        let seconds = ResourceUsage.now() - start
        failures += operations.filter { if case .success? = $0.result { return false } else { return true } }.count
        return Double(requests) / seconds
    }
    figures.fullPerSecond = run("full")
    figures.hitPerSecond = run("fresh")
    figures.revalidatedPerSecond = run("revalidated")
    (figures.fullAnswers, figures.notModifiedAnswers) = counter.counts
    figures.failures = failures
    return figures
}

func cacheSection(_ figures: CacheFigures) -> Section {
    var section = Section(
        name: "Cache",
        title: "11. Response cache: a \(grouped(Double(figures.bodyBytes))) B JSON (embedded server, concurrency 8)",
        rows: [])
    let ok = figures.failures == 0
    func row(_ measure: String, _ value: Double, goal: String, passes: Bool) -> Row {
        Row(
            measure: measure,
            library: value.isNaN || !ok ? "no number" : "\(grouped(value)) req/s",
            baseline: figures.fullPerSecond.isNaN ? "" : "\(grouped(figures.fullPerSecond)) req/s full fetch",
            comparison: value.isNaN || figures.fullPerSecond.isNaN ? "" : "\(fixed(value / figures.fullPerSecond, 2))×",
            goal: goal,
            verdict: value.isNaN || !ok ? .failed : (passes ? .pass : .miss))
    }
    section.rows.append(row("Fresh hit (max-age), no network", figures.hitPerSecond, goal: "faster than a full fetch",
                            passes: figures.hitPerSecond > figures.fullPerSecond))
    section.rows.append(row("Revalidated (no-cache, ETag → 304)", figures.revalidatedPerSecond, goal: "faster than a full fetch",
                            passes: figures.revalidatedPerSecond > figures.fullPerSecond))
    let total = figures.fullAnswers + figures.notModifiedAnswers
    let saved = figures.notModifiedAnswers * figures.bodyBytes
    section.rows.append(Row(
        measure: "Body bytes on the wire over \(grouped(Double(total))) requests to an unchanged resource",
        library: "\(grouped(Double(figures.fullAnswers * figures.bodyBytes))) B (\(figures.fullAnswers) full, \(figures.notModifiedAnswers) × 304)",
        baseline: "\(grouped(Double(total * figures.bodyBytes))) B without the cache",
        comparison: "\(grouped(Double(saved))) B saved",
        goal: "one full body",
        verdict: total == 0 ? .failed : (figures.fullAnswers == 1 ? .pass : .miss)))
    section.notes.append("Each run starts with one untimed request that fills the cache. A 304 carries headers only; the saved figure counts bodies, not headers.")
    return section
}
#endif
