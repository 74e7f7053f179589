// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

/// Wall time and process CPU time of one timed run.
struct RunResult {
    var requests: Int
    var seconds: Double
    var cpuMicroseconds: Double
    var contextSwitches: Int
    var failures: Int
    var completed: Bool

    var requestsPerSecond: Double { completed ? Double(requests) / seconds : .nan }
    var cpuMicrosecondsPerRequest: Double { completed ? cpuMicroseconds / Double(requests) : .nan }
    var contextSwitchesPerRequest: Double { completed ? Double(contextSwitches) / Double(requests) : .nan }
}

/// Runs `body` (which starts `requests` requests and returns a countdown for them) and times it.
private func timedRun(requests: Int, _ body: () -> Countdown) -> RunResult {
    let timeout = max(60, Double(requests) / 20)
    let before = ResourceUsage.usage()
    let start = ResourceUsage.now()
    let countdown = body()
    let completed = countdown.wait(seconds: timeout)
    let end = ResourceUsage.now()
    let after = ResourceUsage.usage()
    return RunResult(requests: requests, seconds: end - start, cpuMicroseconds: after.cpuMicroseconds - before.cpuMicroseconds,
                     contextSwitches: after.contextSwitches - before.contextSwitches,
                     failures: countdown.failureCount, completed: completed)
}

// MARK: - 1 and 2: throughput and CPU per request

/// How the raw baseline issues each next task. Neither is best everywhere, so the library is compared with the
/// faster of the two at each concurrency.
enum RawStrategy: CaseIterable {
    /// Inside the previous task's completion handler, on the session's delegate queue: no thread hop, the fastest
    /// at concurrency 1; but task creation then waits behind every other completion on that serial queue.
    case fromCompletionHandler
    /// From a thread of its own, woken by each completion: creation runs beside the delegate queue.
    case fromOwnThread

    var name: String {
        switch self {
        case .fromCompletionHandler: "raw URLSession, next task from the completion handler"
        case .fromOwnThread: "raw URLSession, next task from its own thread"
        }
    }
}

/// Keeps `concurrency` raw data tasks in flight until `total` have completed.
private final class RawDriver: @unchecked Sendable {
    private let session: URLSession
    private let url: URL
    private let total: Int
    private let countdown: Countdown
    private let lock = NSLock()
    private var issued = 0

    init(session: URLSession, url: URL, total: Int, countdown: Countdown) {
        self.session = session
        self.url = url
        self.total = total
        self.countdown = countdown
    }

    func start(concurrency: Int, strategy: RawStrategy) {
        switch strategy {
        case .fromCompletionHandler:
            for _ in 0..<min(concurrency, total) { issueNext(after: nil) }
        case .fromOwnThread:
            let slots = DispatchSemaphore(value: concurrency)
            let thread = Thread { [self] in
                for _ in 0..<total {
                    slots.wait()
                    issueNext(after: slots)
                }
            }
            thread.start()
        }
    }

    /// Issues one task; when it completes, it issues the next itself, or signals `slots` for the thread to do it.
    private func issueNext(after slots: DispatchSemaphore?) {
        let mayIssue: Bool = lock.withLock {
            guard issued < total else { return false }
            issued += 1
            return true
        }
        guard mayIssue else { return }
        let task = session.dataTask(with: URLRequest(url: url)) { [self] data, response, error in
            countdown.done(ok: error == nil && decodesRecipe(data, response))
            if let slots { slots.signal() } else { issueNext(after: nil) }
        }
        task.resume()
    }
}

/// `count` GETs of `url` with raw `URLSession` data tasks, `concurrency` in flight.
func runRawURLSession(session: URLSession, url: URL, count: Int, concurrency: Int, strategy: RawStrategy) -> RunResult {
    timedRun(requests: count) {
        let countdown = Countdown(count)
        RawDriver(session: session, url: url, total: count, countdown: countdown).start(concurrency: concurrency, strategy: strategy)
        return countdown
    }
}

/// `count` GETs of `url` as ``RecipeRequest``s, all added at once to `queue` (whose
/// `maxConcurrentOperationCount` limits how many are in flight).
func runLibrary(queue: OperationQueue, session: URLSession, url: URL, count: Int) -> RunResult {
    timedRun(requests: count) {
        let countdown = Countdown(count)
        for index in 0..<count {
            queue.addRequest(RecipeRequest(url: url, identifier: String(index)), session: session) { result in
                if case .success = result { countdown.done() } else { countdown.done(ok: false) }
            }
        }
        return countdown
    }
}

// MARK: - The Operation floor

/// The body every side decodes: the 78-byte JSON of `/json`.
struct Recipe: Decodable, Sendable {
    let name: String
    let ingredients: [String]
    let steps: [String]
}

/// Whether a raw side's answer is a 200 whose body decodes as a ``Recipe`` (as the library's side does).
func decodesRecipe(_ data: Data?, _ response: URLResponse?) -> Bool {
    guard let data, (response as? HTTPURLResponse)?.statusCode == 200 else { return false }
    return (try? JSONDecoder().decode(Recipe.self, from: data)) != nil
}

/// The library's side: a GET of `/json` decoded as a ``Recipe``.
struct RecipeRequest: DecodableRequest {
    typealias Success = Recipe
    typealias Failure = Error
    let url: URL
    let identifier: String

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// The least any Operation-based design can cost: a bare asynchronous `Operation` that runs one raw data task and
/// finishes from its completion handler (on the session's delegate queue), after decoding the body there.
final class FloorOperation: BareAsyncOperation, @unchecked Sendable {
    private let session: URLSession
    private let url: URL
    private let countdown: Countdown

    init(session: URLSession, url: URL, countdown: Countdown) {
        self.session = session
        self.url = url
        self.countdown = countdown
    }

    override func start() {
        begin()
        let task = session.dataTask(with: URLRequest(url: url)) { [self] data, response, error in
            countdown.done(ok: error == nil && decodesRecipe(data, response))
            finish()
        }
        task.resume()
    }
}

/// `count` GETs of `url` as ``FloorOperation``s, all added at once to `queue`.
func runOperationFloor(queue: OperationQueue, session: URLSession, url: URL, count: Int) -> RunResult {
    timedRun(requests: count) {
        let countdown = Countdown(count)
        for _ in 0..<count {
            queue.addOperation(FloorOperation(session: session, url: url, countdown: countdown))
        }
        return countdown
    }
}

/// One side of the throughput measurement.
enum ThroughputSide: Hashable {
    case library
    /// The Operation floor: ``FloorOperation``s on an `OperationQueue`.
    case floor
    case raw(RawStrategy)

    static let all: [ThroughputSide] = [.library, .floor] + RawStrategy.allCases.map { .raw($0) }
}

struct ThroughputCell {
    let concurrency: Int
    var runs: [ThroughputSide: [RunResult]] = [:]

    func requestsPerSecond(_ side: ThroughputSide) -> Double { median((runs[side] ?? []).map(\.requestsPerSecond)) }
    func cpuPerRequest(_ side: ThroughputSide) -> Double { median((runs[side] ?? []).map(\.cpuMicrosecondsPerRequest)) }
    func switchesPerRequest(_ side: ThroughputSide) -> Double { median((runs[side] ?? []).map(\.contextSwitchesPerRequest)) }

    /// The raw strategy with the higher median throughput: the raw baseline for throughput.
    var fasterRaw: RawStrategy {
        RawStrategy.allCases.max { requestsPerSecond(.raw($0)).orZero < requestsPerSecond(.raw($1)).orZero } ?? .fromCompletionHandler
    }
    /// The raw strategy with the lower median CPU per request: the raw baseline for CPU.
    var thriftierRaw: RawStrategy {
        RawStrategy.allCases.min { cpuPerRequest(.raw($0)).orInfinity < cpuPerRequest(.raw($1)).orInfinity } ?? .fromCompletionHandler
    }
    var failures: Int { runs.values.joined().reduce(0) { $0 + $1.failures } }
    /// Library ÷ the floor in each round (the two ran one after the other), to show the spread.
    var roundRatiosToFloor: [Double] {
        let library = runs[.library] ?? [], floor = runs[.floor] ?? []
        return zip(library, floor).map { $0.requestsPerSecond / $1.requestsPerSecond }
    }
    /// Library ÷ the faster raw strategy of each round.
    var roundRatiosToRaw: [Double] {
        (runs[.library] ?? []).enumerated().map { round, library in
            let best = RawStrategy.allCases.compactMap { runs[.raw($0)]?[round].requestsPerSecond }.filter { !$0.isNaN }.max() ?? .nan
            return library.requestsPerSecond / best
        }
    }
}

private extension Double {
    var orZero: Double { isNaN ? 0 : self }
    var orInfinity: Double { isNaN ? .infinity : self }
}

/// Runs `count` requests of one side: each side has its own session (the raw strategies share one) with the same
/// configuration, and the library and the floor each their own `OperationQueue`.
final class ThroughputSides {
    let url: URL
    let concurrency: Int
    private let rawSession: URLSession
    private let librarySession: URLSession
    private let floorSession: URLSession
    let libraryQueue = OperationQueue()
    let floorQueue = OperationQueue()

    init(url: URL, concurrency: Int) {
        self.url = url
        self.concurrency = concurrency
        rawSession = makeSession(maxConnectionsPerHost: concurrency)
        librarySession = makeSession(maxConnectionsPerHost: concurrency)
        floorSession = makeSession(maxConnectionsPerHost: concurrency)
        for (queue, name) in [(libraryQueue, "library"), (floorQueue, "floor")] {
            queue.name = "requests-bench.throughput.\(name)"
            queue.maxConcurrentOperationCount = concurrency
        }
    }

    func run(_ side: ThroughputSide, count: Int) -> RunResult {
        switch side {
        case .library: runLibrary(queue: libraryQueue, session: librarySession, url: url, count: count)
        case .floor: runOperationFloor(queue: floorQueue, session: floorSession, url: url, count: count)
        case let .raw(strategy): runRawURLSession(session: rawSession, url: url, count: count, concurrency: concurrency, strategy: strategy)
        }
    }

    func close() {
        _ = waitUntilDrained(libraryQueue, seconds: 10)
        _ = waitUntilDrained(floorQueue, seconds: 10)
        [rawSession, librarySession, floorSession].forEach { $0.finishTasksAndInvalidate() }
    }
}

/// Warms every side up, then runs them in turn for `rounds` rounds, starting each round with the next side (so a
/// slow drift of the machine favours none).
func measureThroughput(url: URL, concurrency: Int, requests: Int, warmup: Int, rounds: Int,
                       log: (String) -> Void) -> ThroughputCell {
    let sides = ThroughputSides(url: url, concurrency: concurrency)
    defer { sides.close() }
    var cell = ThroughputCell(concurrency: concurrency)
    for side in ThroughputSide.all { _ = sides.run(side, count: warmup) }
    for round in 0..<rounds {
        for offset in ThroughputSide.all.indices {
            let side = ThroughputSide.all[(round + offset) % ThroughputSide.all.count]
            cell.runs[side, default: []].append(sides.run(side, count: requests))
        }
        log(String(format: "  concurrency %d, round %d/%d: req/s library %.0f, floor %.0f, raw %@", concurrency, round + 1, rounds,
                   cell.runs[.library]?.last?.requestsPerSecond ?? .nan, cell.runs[.floor]?.last?.requestsPerSecond ?? .nan,
                   RawStrategy.allCases.map { String(format: "%.0f", cell.runs[.raw($0)]?.last?.requestsPerSecond ?? .nan) }
                       .joined(separator: " / ")))
    }
    return cell
}
#endif
