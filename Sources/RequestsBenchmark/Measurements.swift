// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// MARK: - Shared pieces

/// The session both sides use: ephemeral, no URL cache, `concurrency` connections per host.
func makeSession(maxConnectionsPerHost: Int) -> URLSession {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
    return URLSession(configuration: configuration)
}

/// Counts completions; ``wait(seconds:)`` returns once `count` have arrived (or the timeout passes).
final class Countdown: @unchecked Sendable {
    private let lock = NSLock()
    private var remaining: Int
    private var failures = 0
    private var finishedAt = Double.nan
    private let semaphore = DispatchSemaphore(value: 0)

    init(_ count: Int) {
        remaining = count
        if count == 0 { semaphore.signal() }
    }

    func done(ok: Bool = true) {
        let isLast: Bool = lock.withLock {
            remaining -= 1
            if !ok { failures += 1 }
            if remaining == 0 { finishedAt = ResourceUsage.now() }
            return remaining == 0
        }
        if isLast { semaphore.signal() }
    }

    /// `true` if every completion arrived in time.
    func wait(seconds: Double) -> Bool {
        semaphore.wait(timeout: .now() + seconds) == .success
    }

    var failureCount: Int { lock.withLock { failures } }
    /// When the last completion arrived (``ResourceUsage/now()``).
    var lastCompletionTime: Double { lock.withLock { finishedAt } }
}

/// Carries a plain Foundation `OperationQueue` or `Operation` into a `@Sendable` block (a `DispatchQueue` one).
/// swift-corelibs-foundation marks those classes `Sendable`, Apple's SDKs may not, and Swift 6 mode then rejects
/// the capture; both are safe to use from any thread, hence `@unchecked`.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Waits, off the main thread, until `queue` has no operations left; `false` after `seconds`.
func waitUntilDrained(_ queue: OperationQueue, seconds: Double) -> Bool {
    let drained = DispatchSemaphore(value: 0)
    let handle = UncheckedSendable(queue)
    DispatchQueue.global().async {
        handle.value.waitUntilAllOperationsAreFinished()
        drained.signal()
    }
    return drained.wait(timeout: .now() + seconds) == .success
}

/// A GET whose success value is the raw body: the cheapest ``DataRequest``.
struct RawBytesRequest: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    let identifier: String

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }

    func processData(_ data: Data) throws -> Data {
        data
    }
}

// MARK: - 3: resident bytes per queued request

struct MemoryFigures {
    var blockOperationBytes = Double.nan
    /// Each request with its own identifier (the usual case: one id per resource).
    var requestBytes = Double.nan
    /// Every request with the same identifier.
    var sharedIdentifierRequestBytes = Double.nan
    var completions = 0
    var expectedCompletions = 0
    var drained = true
    var libraryDrainSeconds = Double.nan
    var blockDrainSeconds = Double.nan
}

/// Fills a suspended queue with `fill` and returns the RSS delta per item, then cancels and drains it.
private func residentBytesPerItem(count: Int, fill: (OperationQueue) -> Countdown?)
    -> (bytes: Double, completed: Bool, drainSeconds: Double) {
    let queue = OperationQueue()
    queue.name = "requests-bench.memory"
    queue.isSuspended = true
    ResourceUsage.trimHeap()
    guard let before = ResourceUsage.residentBytes() else { return (.nan, false, .nan) }
    let countdown = fill(queue)
    guard let after = ResourceUsage.residentBytes() else { return (.nan, false, .nan) }

    let start = ResourceUsage.now()
    queue.cancelAllOperations()
    queue.isSuspended = false
    let completed = countdown?.wait(seconds: 120) ?? true
    let drained = waitUntilDrained(queue, seconds: 120)
    let drainSeconds = ResourceUsage.now() - start
    ResourceUsage.trimHeap()
    return (Double(after - before) / Double(count), completed && drained, drainSeconds)
}

func measureQueuedMemory(url: URL, count: Int) -> MemoryFigures {
    let session = makeSession(maxConnectionsPerHost: 16)
    defer { session.finishTasksAndInvalidate() }
    var figures = MemoryFigures()
    figures.expectedCompletions = 2 * count

    let blocks = residentBytesPerItem(count: count) { queue in
        for _ in 0..<count { queue.addOperation(BlockOperation {}) }
        return nil
    }
    figures.blockOperationBytes = blocks.bytes
    figures.blockDrainSeconds = blocks.drainSeconds

    let counter = CompletionCounter()
    for sharedIdentifier in [false, true] {
        let requests = residentBytesPerItem(count: count) { queue in
            let countdown = Countdown(count)
            for index in 0..<count {
                let identifier = sharedIdentifier ? "bench" : String(index)
                queue.addRequest(RawBytesRequest(url: url, identifier: identifier), session: session) { _ in
                    counter.increment()
                    countdown.done()
                }
            }
            return countdown
        }
        if sharedIdentifier {
            figures.sharedIdentifierRequestBytes = requests.bytes
        } else {
            figures.requestBytes = requests.bytes
            figures.libraryDrainSeconds = requests.drainSeconds
        }
        figures.drained = figures.drained && requests.completed
    }
    figures.completions = counter.value
    return figures
}

/// A thread-safe counter.
final class CompletionCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

// MARK: - 4: cancellation latency

/// One cancellation run: `requests` queued, some in flight, then `cancelAllOperations()`.
struct CancellationRun {
    var requests = 0
    var inFlightAtCancel = 0
    /// Requests that reached the server after `cancelAllOperations()` began: started by the queue while the
    /// cancel loop was still walking the operations.
    var sentDuringCancel = 0
    /// From the `cancelAllOperations()` call to the last completion handler.
    var latencySeconds = Double.nan
    /// How long the `cancelAllOperations()` call itself took.
    var cancelCallSeconds = Double.nan
    /// From the call until the queue was empty.
    var drainSeconds = Double.nan
    var distinctCompletions = 0
    var totalCompletions = 0
    var cancelledResults = 0

    var exactlyOnce: Bool { distinctCompletions == requests && totalCompletions == requests }
}

struct CancellationFigures {
    /// `cancelAllOperations()` on the running queue.
    var plain = CancellationRun()
    /// The same, with `isSuspended = true` before the call and `false` after it.
    var suspended = CancellationRun()
    /// The same with ``HeldOperation``s (no network): how long `cancelAllOperations()` takes, from it until the
    /// queue is empty, and how many the queue started during the call.
    var baselineCallSeconds = Double.nan
    var baselineDrainSeconds = Double.nan
    var baselineStartedDuringCancel = 0
}

/// Records each request's completions by index, and when the last distinct one arrived.
private final class CompletionLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [Int]
    private var distinct = 0
    private var total = 0
    private var cancelled = 0
    private var lastDistinctAt = Double.nan
    private let allArrived = DispatchSemaphore(value: 0)

    init(count: Int) {
        counts = Array(repeating: 0, count: count)
    }

    func record(index: Int, cancelled isCancelled: Bool) {
        let isLast: Bool = lock.withLock {
            counts[index] += 1
            total += 1
            if isCancelled { cancelled += 1 }
            guard counts[index] == 1 else { return false }
            distinct += 1
            if distinct == counts.count {
                lastDistinctAt = ResourceUsage.now()
                return true
            }
            return false
        }
        if isLast { allArrived.signal() }
    }

    func wait(seconds: Double) -> Bool {
        allArrived.wait(timeout: .now() + seconds) == .success
    }

    var snapshot: (distinct: Int, total: Int, cancelled: Int, lastDistinctAt: Double) {
        lock.withLock { (distinct, total, cancelled, lastDistinctAt) }
    }
}

/// Queues `count` requests to `/delay/5000` at concurrency `concurrency`, waits until that many are at the
/// server, then cancels everything (with the queue suspended during the call if `suspend`) and times the
/// wait for the last completion handler.
func measureCancellation(server: LoopbackServer, count: Int, concurrency: Int, suspend: Bool) -> CancellationRun {
    let path = "/delay/5000"
    let url = server.url(path)
    let session = makeSession(maxConnectionsPerHost: concurrency)
    defer { session.finishTasksAndInvalidate() }
    let queue = OperationQueue()
    queue.name = "requests-bench.cancellation"
    queue.maxConcurrentOperationCount = concurrency

    let before = server.requestCount(path: path)
    let ledger = CompletionLedger(count: count)
    for index in 0..<count {
        queue.addRequest(RawBytesRequest(url: url, identifier: String(index)), session: session) { result in
            var isCancelled = false
            if case .failure(RequestQueueError.cancelled) = result { isCancelled = true }
            ledger.record(index: index, cancelled: isCancelled)
        }
    }
    // Wait (up to 5 s) until the first `concurrency` requests have reached the server.
    let deadline = ResourceUsage.now() + 5
    while server.requestCount(path: path) - before < concurrency && ResourceUsage.now() < deadline {
        usleep(5_000)
    }

    var figures = CancellationRun()
    figures.requests = count
    figures.inFlightAtCancel = server.requestCount(path: path) - before
    let start = ResourceUsage.now()
    if suspend { queue.isSuspended = true }
    queue.cancelAllOperations()
    if suspend { queue.isSuspended = false }
    figures.cancelCallSeconds = ResourceUsage.now() - start
    let arrived = ledger.wait(seconds: 30)
    let drained = waitUntilDrained(queue, seconds: 30)
    let end = ResourceUsage.now()
    usleep(200_000)  // let any duplicate completion show up before counting
    let snapshot = ledger.snapshot
    figures.sentDuringCancel = server.requestCount(path: path) - before - figures.inFlightAtCancel
    figures.latencySeconds = arrived ? snapshot.lastDistinctAt - start : .nan
    figures.drainSeconds = drained ? end - start : .nan
    figures.distinctCompletions = snapshot.distinct
    figures.totalCompletions = snapshot.total
    figures.cancelledResults = snapshot.cancelled
    return figures
}

/// The least an asynchronous `Operation` needs: one lock over its two states, and KVO notifications sent outside it.
/// Subclasses call ``begin()`` from `start()` and ``finish()`` when their work ends (once; later calls do nothing).
class BareAsyncOperation: Operation, @unchecked Sendable {
    private let lock = NSLock()
    private var executing = false
    private var finished = false

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { lock.withLock { executing } }
    override var isFinished: Bool { lock.withLock { finished } }

    final func begin() {
        willChangeValue(forKey: "isExecuting")
        lock.withLock { executing = true }
        didChangeValue(forKey: "isExecuting")
    }

    final func finish() {
        let claimed: Bool = lock.withLock { executing && !finished }
        guard claimed else { return }
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        lock.withLock {
            executing = false
            finished = true
        }
        didChangeValue(forKey: "isFinished")
        didChangeValue(forKey: "isExecuting")
    }
}

/// A minimal asynchronous `Operation` that stays executing until it is cancelled: a stand-in for a request
/// in flight, with the same cancellation semantics (an executing operation finishes at once when cancelled)
/// but no network.
final class HeldOperation: BareAsyncOperation, @unchecked Sendable {
    private let onStart: @Sendable () -> Void

    init(onStart: @escaping @Sendable () -> Void) {
        self.onStart = onStart
    }

    override func start() {
        begin()
        if isCancelled {
            finish()
        } else {
            onStart()
        }
    }

    override func cancel() {
        super.cancel()
        if isExecuting { finish() }
    }
}

/// The floor for any Operation-based design: `count` ``HeldOperation``s at `concurrency`, the first ones
/// executing, then `cancelAllOperations()`. Returns how long the call took, when the queue was empty, and
/// how many operations the queue started while the call ran.
func measureOperationCancellation(count: Int, concurrency: Int)
    -> (callSeconds: Double, drainSeconds: Double, startedDuringCancel: Int) {
    let queue = OperationQueue()
    queue.name = "requests-bench.cancellation-baseline"
    queue.maxConcurrentOperationCount = concurrency
    let starts = CompletionCounter()
    for _ in 0..<count {
        queue.addOperation(HeldOperation { starts.increment() })
    }
    let deadline = ResourceUsage.now() + 5
    while starts.value < concurrency && ResourceUsage.now() < deadline { usleep(1_000) }
    let startedBefore = starts.value
    let start = ResourceUsage.now()
    queue.cancelAllOperations()
    let callSeconds = ResourceUsage.now() - start
    let drained = waitUntilDrained(queue, seconds: 60)
    return (callSeconds, drained ? ResourceUsage.now() - start : .nan, starts.value - startedBefore)
}

// MARK: - 5: decoding a large JSON body

struct Item: Codable, Sendable {
    let id: Int
    let name: String
    let price: Double
    let active: Bool
    let tags: [String]
}

/// A JSON array of small ``Item``s of about `targetBytes` bytes.
func makeItemsJSON(targetBytes: Int) throws -> Data {
    func items(_ count: Int) -> [Item] {
        (0..<count).map { Item(id: $0, name: "item-\($0)", price: Double($0 % 1000) + 0.25,
                               active: $0 % 2 == 0, tags: ["tag\($0 % 7)", "x"]) }
    }
    let sample = try JSONEncoder().encode(items(1000))
    let count = max(1, Int(Double(targetBytes) / Double(sample.count) * 1000))
    return try JSONEncoder().encode(items(count))
}

/// The library's usual path: decode `[Item]` with the default `JSONDecoder`.
struct ItemsRequest: DecodableRequest {
    typealias Success = [Item]
    typealias Failure = Error
    let url: URL
    var identifier: String { "items" }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// Decodes `[Item]` in `processData`, timing only the decode.
struct TimedItemsRequest: DataRequest {
    typealias Success = (count: Int, seconds: Double)
    typealias Failure = Error
    let url: URL
    var identifier: String { "timed-items" }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }

    func processData(_ data: Data) throws -> Success {
        let start = ResourceUsage.now()
        let items = try JSONDecoder().decode([Item].self, from: data)
        return (items.count, ResourceUsage.now() - start)
    }
}

/// Holds one result across threads.
private final class ResultBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T?
    func set(_ value: T) { lock.withLock { stored = value } }
    var value: T? { lock.withLock { stored } }
}

/// Runs one request on `queue` and returns its value (or `nil` on failure or timeout) and its wall time.
func fetch<R: DataRequest>(_ request: R, queue: OperationQueue, session: URLSession) -> (value: R.Success?, seconds: Double) {
    let box = ResultBox<R.Success>()
    let countdown = Countdown(1)
    let start = ResourceUsage.now()
    queue.addRequest(request, session: session) { result in
        if case .success(let value) = result { box.set(value) }
        countdown.done()
    }
    guard countdown.wait(seconds: 120) else { return (nil, .nan) }
    return (box.value, ResourceUsage.now() - start)
}

struct DecodeFigures {
    var bytes = 0
    var items = 0
    /// `JSONDecoder().decode` alone on bytes in memory.
    var decoderOnlySeconds = Double.nan
    /// A `DecodableRequest`, from `addRequest` to its completion: transfer plus decode.
    var endToEndSeconds = Double.nan
    /// A `DataRequest` returning the raw body: transfer only.
    var transferSeconds = Double.nan
    /// The decode time measured inside a `DataRequest`'s `processData`.
    var decodeInsideLibrarySeconds = Double.nan

    func megabytesPerSecond(_ seconds: Double) -> Double {
        Double(bytes) / 1_000_000 / seconds
    }
}

/// Serves `body` at `/bench/items.json` on the embedded server and measures each way of decoding it,
/// alternating them for `rounds` rounds after one warm-up of each, and keeps medians.
func measureDecode(server: LoopbackServer, body: Data, rounds: Int) -> DecodeFigures {
    let path = "/bench/items.json"
    server.route(path) { _ in
        LoopbackResponse(status: 200, headers: ["Content-Type": "application/json"], body: body)
    }
    let url = server.url(path)
    let session = makeSession(maxConnectionsPerHost: 1)
    defer { session.finishTasksAndInvalidate() }
    let queue = OperationQueue()
    queue.name = "requests-bench.decode"
    queue.maxConcurrentOperationCount = 1

    var figures = DecodeFigures()
    figures.bytes = body.count
    var decoderOnly: [Double] = [], endToEnd: [Double] = [], transfer: [Double] = [], inside: [Double] = []
    for round in -1..<rounds {  // round -1 is the warm-up
        let start = ResourceUsage.now()
        let decoded = try? JSONDecoder().decode([Item].self, from: body)
        let decodeSeconds = ResourceUsage.now() - start
        let full = fetch(ItemsRequest(url: url), queue: queue, session: session)
        let raw = fetch(RawBytesRequest(url: url, identifier: "raw-items"), queue: queue, session: session)
        let timed = fetch(TimedItemsRequest(url: url), queue: queue, session: session)
        guard let decoded, full.value?.count == decoded.count, raw.value?.count == body.count,
              let timedValue = timed.value, timedValue.count == decoded.count else {
            return figures  // a failure leaves the figures at nan
        }
        figures.items = decoded.count
        if round >= 0 {
            decoderOnly.append(decodeSeconds)
            endToEnd.append(full.seconds)
            transfer.append(raw.seconds)
            inside.append(timedValue.seconds)
        }
    }
    figures.decoderOnlySeconds = median(decoderOnly)
    figures.endToEndSeconds = median(endToEnd)
    figures.transferSeconds = median(transfer)
    figures.decodeInsideLibrarySeconds = median(inside)
    return figures
}
#endif
