#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

// One round of the cancel storm (`requests-bench --storm-round --url BASE --per-round N --seed S --timeout T
// [--kinds LIST]`), in a process of its own so that a crash ends only this round (the parent is in CancelStorm.swift).
// It keeps 16 requests in flight until N have been added, a seeded mix of every kind, and cancels each at a random moment
// 0–4 ms after adding it, as users do: `cancel()` on the operation (`cancel(producingResumeState: true)` for a
// resumable download), or cancelling the Task of the async forms. It checks that every completion runs exactly
// once and no stream element comes after it, and prints a one-line JSON summary.
// Exit: 0; 3 a completion ran twice, or an element came after it, or one never ran though every operation finished;
// 4 a hang (the timeout passed with operations still in the queue); 2 usage.

private struct StormRecipe: Decodable {
    let name: String
    let ingredients: [String]
    let steps: [String]
}

private struct StormDecodable: DecodableRequest, Sendable {
    typealias Success = StormRecipe
    let url: URL
    let identifier: String
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
}

private struct StormBody: DataRequest, Sendable {
    typealias Success = Int
    typealias Failure = Error
    let url: URL
    let identifier: String
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
    func processData(_ data: Data) throws -> Int { data.count }
}

private struct StormDownload: DownloadRequest, Sendable {
    let url: URL
    let identifier: String
    let destination: URL?
    var downloadOptions: DownloadOptions { [.createIntermediateDirectories, .replaceExistingFile] }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
}

private struct StormStream: StreamRequest, Sendable {
    let url: URL
    let identifier: String
    /// Above the 8 MiB body: a consumer slowed by the machine must not fail the stream with `consumerTooSlow`.
    var bufferSize: Int { 16 << 20 }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
}

private enum StormOutcome {
    case ok, cancelled
    case failed(String)

    var isOK: Bool {
        if case .ok = self { return true }
        return false
    }

    init<S, F: Error>(_ result: Result<S, F>) {
        switch result {
        case .success: self = .ok
        case let .failure(error): self.init(error)
        }
    }

    init(_ error: Error) {
        if case .cancelled? = error as? RequestQueueError {
            self = .cancelled
        } else if error is CancellationError || (error as? URLError)?.code == .cancelled {
            self = .cancelled
        } else {
            self = .failed(String("\(type(of: error)): \(error)".prefix(160)))
        }
    }
}

/// Every completion, per request, from any thread; and the resume states waiting to be resumed.
private final class StormLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var calls: [UInt8]
    private var kinds: [StormKind?]
    /// When each was added and cancelled (``ResourceUsage/now()``), for a hang's report; 0 for not yet.
    private var addedAt: [Double]
    private var cancelledAt: [Double]
    private var pending: [ResumeState] = []
    private var summary = StormRoundSummary()

    init(count: Int, seed: UInt64) {
        calls = Array(repeating: 0, count: count)
        kinds = Array(repeating: nil, count: count)
        addedAt = Array(repeating: 0, count: count)
        cancelledAt = Array(repeating: 0, count: count)
        summary.seed = seed
    }

    func added(_ index: Int, _ kind: StormKind) {
        let now = ResourceUsage.now()
        lock.withLock {
            kinds[index] = kind
            addedAt[index] = now
            summary.requests += 1
        }
    }

    /// Records a completion; `true` the first time for `index`.
    func complete(_ index: Int, _ outcome: StormOutcome) -> Bool {
        lock.withLock {
            calls[index] &+= 1
            guard calls[index] == 1 else { return false }
            switch outcome {
            case .ok: summary.ok += 1
            case .cancelled: summary.cancelled += 1
            case let .failed(text):
                summary.errors += 1
                summary.errorKinds[text, default: 0] += 1
            }
            return true
        }
    }

    func cancelling(_ index: Int) {
        let now = ResourceUsage.now()
        lock.withLock {
            cancelledAt[index] = now
            summary.cancels += 1
            if calls[index] > 0 { summary.cancelsAfterCompletion += 1 }
        }
    }

    func element(_ index: Int) { lock.withLock { if calls[index] > 0 { summary.lateElements += 1 } } }

    /// A state to resume from, if one waits.
    func takeState() -> ResumeState? {
        lock.withLock {
            guard let state = pending.popLast() else { return nil }
            summary.resumes += 1
            return state
        }
    }

    func resumableEnded(resumed: Bool, ok: Bool, state: ResumeState?) {
        let surplus: ResumeState? = lock.withLock {
            if resumed, ok { summary.resumesOK += 1 }
            guard let state else { return nil }
            summary.resumeStates += 1
            guard pending.count < 32 else { return state }
            pending.append(state)
            return nil
        }
        surplus?.discard()
    }

    func discardPendingStates() {
        let states = lock.withLock { () -> [ResumeState] in
            defer { pending = [] }
            return pending
        }
        states.forEach { $0.discard() }
    }

    /// Up to 10 requests whose completion has not run, described.
    func missing() -> [String] {
        let now = ResourceUsage.now()
        return lock.withLock {
            calls.indices.filter { calls[$0] == 0 && kinds[$0] != nil }.prefix(10).map {
                let cancel = cancelledAt[$0] > 0 ? "cancelled \(fixed((now - cancelledAt[$0]) * 1000, 0)) ms ago" : "not cancelled yet"
                return "#\($0) \(kinds[$0]?.rawValue ?? "?") (added \(fixed((now - addedAt[$0]) * 1000, 0)) ms ago, \(cancel))"
            }
        }
    }

    func finalSummary(seconds: Double, hung: Bool) -> StormRoundSummary {
        lock.withLock {
            var result = summary
            let issued = calls.indices.filter { kinds[$0] != nil }
            result.twice = issued.filter { calls[$0] > 1 }.count
            result.never = hung ? 0 : issued.filter { calls[$0] == 0 }.count
            result.seconds = seconds
            result.hung = hung
            return result
        }
    }
}

/// Cancels at their planned moments from a thread of its own: a busy global queue (a 2-core machine under load) delays
/// `asyncAfter` blocks by tens of milliseconds, which would move the cancels out of the 0–4 ms window.
private final class StormCanceller: @unchecked Sendable {
    private struct Planned {
        let at: Double
        let cancel: @Sendable () -> Void
    }
    private let condition = NSCondition()
    /// Sorted by `at`; a few dozen at most.
    private var planned: [Planned] = []
    private var lateness: [Double] = []

    init() {
        let thread = Thread { [self] in run() }
        thread.name = "storm-canceller"
        thread.start()
    }

    func schedule(at moment: Double, _ cancel: @escaping @Sendable () -> Void) {
        condition.withLock {
            let position = planned.firstIndex { $0.at > moment } ?? planned.endIndex
            planned.insert(Planned(at: moment, cancel: cancel), at: position)
            condition.signal()
        }
    }

    /// Median, 99th percentile and largest lateness so far, in milliseconds.
    func delays() -> [Double] {
        let sorted = condition.withLock { lateness }.sorted()
        guard !sorted.isEmpty else { return [] }
        return [sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)], sorted[sorted.count - 1]].map { $0 * 1000 }
    }

    private func run() {
        condition.lock()
        while true {
            guard let first = planned.first else {
                condition.wait()
                continue
            }
            let now = ResourceUsage.now()
            if first.at > now {
                _ = condition.wait(until: Date(timeIntervalSinceNow: first.at - now))
                continue
            }
            planned.removeFirst()
            lateness.append(now - first.at)
            condition.unlock()
            first.cancel()
            condition.lock()
        }
    }
}

/// SplitMix64: a small seeded generator, so that a round can be replayed with its seed.
struct StormRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func runStormRound(_ arguments: [String]) -> Never {
    var values: [String: String] = [:]
    var remaining = arguments[...]
    while let flag = remaining.popFirst() {
        guard ["--url", "--per-round", "--seed", "--timeout", "--kinds", "--session"].contains(flag), let value = remaining.popFirst() else {
            fail("--storm-round takes --url BASE --per-round N --seed S --timeout SECONDS --kinds LIST --session ephemeral|no-cache, not \(flag)", code: 2)
        }
        values[flag] = value
    }
    guard let baseText = values["--url"], let base = URL(string: baseText), let total = Int(values["--per-round"] ?? "3000"), total > 0,
        let seed = UInt64(values["--seed"] ?? "1"), let timeout = Double(values["--timeout"] ?? "300"), timeout > 0,
        let kinds = StormKind.parse(values["--kinds"] ?? "all")
    else {
        fail("--storm-round: bad arguments \(arguments)", code: 2)
    }
    let configuration = URLSessionConfiguration.ephemeral
    // Today's mix runs without a URLCache; the issue mix's session is `.ephemeral` as Foundation makes it, whose
    // URLCache (URLCache.shared on Linux) makes each data task look up the cache on a background queue before it starts.
    if values["--session"] != "ephemeral" { configuration.urlCache = nil }
    // 16 in flight is the caller's count (a slot frees when a completion runs). The queue and the session have room
    // beyond it: a cancelled operation finishes, and its task ends, a little after its completion (50 ms later on
    // Linux), and new requests must not wait behind those, or nearly all would be cancelled before they start.
    configuration.httpMaximumConnectionsPerHost = 64
    let session = URLSession(configuration: configuration)
    let queue = OperationQueue()
    let shared = UncheckedSendable(queue)
    let destinations = FileManager.default.temporaryDirectory.appendingPathComponent("storm-destinations-\(getpid())")
    let ledger = StormLedger(count: total, seed: seed)
    var random = StormRandom(seed: seed)
    let slots = DispatchSemaphore(value: 16)
    let canceller = StormCanceller()
    let group = DispatchGroup()
    let start = ResourceUsage.now()
    let deadline = DispatchTime.now() + timeout

    /// The timeout passed: completions are missing. With no operation left in the queue, they will never run (an
    /// exactly-once failure, exit 3); otherwise something still runs or waits: a hang (exit 4).
    func hang(_ what: String) -> Never {
        let missing = ledger.missing().joined(separator: ", ")
        let never = queue.operationCount == 0 && !missing.isEmpty
        if never {
            log("storm-round: EXACTLY-ONCE FAILURE: \(what) within \(fixed(timeout, 0)) s, and every operation has finished; never called: \(missing)")
        } else {
            log("storm-round: HANG: \(what) within \(fixed(timeout, 0)) s; still waiting for \(missing)")
        }
        let summary = ledger.finalSummary(seconds: ResourceUsage.now() - start, hung: !never)
        print(String(decoding: (try? JSONEncoder().encode(summary)) ?? Data(), as: UTF8.self))
        exit(never ? 3 : 4)
    }

    for index in 0..<total {
        guard slots.wait(timeout: deadline) == .success else { hang("\(index) of \(total) requests added, a slot did not free") }
        let kind = kinds[Int.random(in: 0..<kinds.count, using: &random)]
        let delay = Int.random(in: 0...4_000, using: &random)
        let identifier = "storm-\(index)"
        ledger.added(index, kind)
        group.enter()
        let finish: @Sendable (StormOutcome) -> Void = { outcome in
            if ledger.complete(index, outcome) {
                slots.signal()
                group.leave()
            }
        }
        let file = destinations.appendingPathComponent("\(index).bin")
        let removeFile: @Sendable () -> Void = { try? FileManager.default.removeItem(at: file) }
        let cancel: @Sendable () -> Void
        switch kind {
        case .json:
            let operation = queue.addRequest(StormDecodable(url: base.appendingPathComponent(StormPaths.json), identifier: identifier), session: session) {
                finish(StormOutcome($0))
            }
            cancel = { operation.cancel() }
        case .body:
            let operation = queue.addRequest(StormBody(url: base.appendingPathComponent(StormPaths.mebibyte), identifier: identifier), session: session) {
                finish(StormOutcome($0))
            }
            cancel = { operation.cancel() }
        case .download, .download1m:
            let path = kind == .download ? StormPaths.large : StormPaths.mebibyte
            let request = StormDownload(url: base.appendingPathComponent(path), identifier: identifier, destination: file)
            let operation = queue.addRequest(request, session: session) { result in
                removeFile()
                finish(StormOutcome(result))
            }
            cancel = { operation.cancel() }
        case .resumable, .resumableAsync:
            let saved = ledger.takeState()
            let request = StormDownload(url: base.appendingPathComponent(StormPaths.large), identifier: identifier, destination: file)
            let ended: @Sendable (Result<URL, Error>, ResumeState?) -> Void = { result, state in
                removeFile()
                let outcome = StormOutcome(result)
                ledger.resumableEnded(resumed: saved != nil, ok: outcome.isOK, state: state)
                finish(outcome)
            }
            if kind == .resumable {
                let operation = queue.addRequest(request, resumingFrom: saved, session: session) { ended($0, $1) }
                cancel = { operation.cancel(producingResumeState: true) }
            } else {
                let task = Task {
                    let (result, state) = await shared.value.download(request, resumingFrom: saved, session: session)
                    ended(result, state)
                }
                cancel = { task.cancel() }
            }
        case .stream:
            let request = StormStream(url: base.appendingPathComponent(StormPaths.large), identifier: identifier)
            let operation = queue.addRequest(request, session: session) { _ in
                ledger.element(index)
            } completion: {
                finish(StormOutcome($0))
            }
            cancel = { operation.cancel() }
        case .streamAsync:
            let request = StormStream(url: base.appendingPathComponent(StormPaths.large), identifier: identifier)
            let task = Task {
                do {
                    for try await _ in shared.value.stream(for: request, session: session) { ledger.element(index) }
                    finish(.ok)
                } catch {
                    finish(StormOutcome(error))
                }
            }
            cancel = { task.cancel() }
        }
        canceller.schedule(at: ResourceUsage.now() + Double(delay) / 1_000_000) {
            ledger.cancelling(index)
            cancel()
        }
        if (index + 1) % 250 == 0 { log("storm-round: issued \(index + 1)") }
    }
    guard group.wait(timeout: deadline) == .success else { hang("not every completion ran") }
    guard waitUntilDrained(queue, seconds: max(1, start + timeout - ResourceUsage.now())) else { hang("every completion ran, but not every operation finished") }
    Thread.sleep(forTimeInterval: 0.3)  // time for a late second completion or element, and for the last cancels
    ledger.discardPendingStates()
    try? FileManager.default.removeItem(at: destinations)
    var summary = ledger.finalSummary(seconds: ResourceUsage.now() - start, hung: false)
    summary.cancelDelayMs = canceller.delays()
    print(String(decoding: (try? JSONEncoder().encode(summary)) ?? Data(), as: UTF8.self))
    for (text, count) in summary.errorKinds.sorted(by: { $0.value > $1.value }).prefix(5) { log("storm-round: error ×\(count): \(text)") }
    if summary.twice > 0 || summary.never > 0 || summary.lateElements > 0 {
        log("storm-round: EXACTLY-ONCE FAILURE: \(summary.twice) completions ran twice, \(summary.never) never, \(summary.lateElements) elements after the completion")
        exit(3)
    }
    exit(0)
}
#endif
