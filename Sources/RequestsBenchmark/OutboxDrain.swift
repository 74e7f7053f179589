#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// `requests-bench outbox-drain [--entries 4000] [--lanes 4] [--concurrency 8] [--lost 0.02] [--refusals 0.05]
// [--rounds 2] [--attempt-timeout 15] [--base-delay 0.05]`: issue 46's row "outbox drain with 2 % lost answers ≥ 0.5×
// the drain without faults, both in one run". Each round enqueues --entries POSTs (a small JSON body each, lane
// `lane-(seq % lanes)`) into a suspended outbox, resumes it and times the drain against the embedded LoopbackServer
// (in this process), in three scenarios: no faults; --lost of the keys lose their answer on their first arrival (the
// server applies the entry, then closes the connection without answering); --refusals of the keys are answered 503
// on their first arrival, unapplied. The server (DrainLedger) applies each Idempotency-Key once and answers its
// repeats 201 like the first time. Checks: every entry applied exactly once, with one body; nothing pending or parked;
// no request arrived with its head and not its body. With --against-direct: issue 47's rows instead (the drain
// against the same POSTs sent directly, and syncs per removal; OutboxDrainDirect.swift).

/// The drain benchmark's settings.
struct OutboxDrainSettings {
    var entries = 4_000
    var lanes = 4
    /// `OutboxOptions.maximumConcurrentEntries`, the session's connections per host and the queue's width.
    var concurrency = 8
    var lost = 0.02
    var refusals = 0.05
    var rounds = 2
    var attemptTimeout = 15.0
    var baseDelay = 0.05
    var maxDelay = 1.0
    /// Issue 47's mode (OutboxDrainDirect.swift), its rounds (default 5) and its options.
    var againstDirect = false
    var roundsGiven = false
    /// Entries per `enqueue(contentsOf:)` call in that mode; 0: each lane in one call.
    var enqueueBatch = 100
    var warmUp = true
    /// For a profiler: time one side only ("outbox" or "direct"); no ratio then.
    var side: String?

    init(_ arguments: [String]) {
        var flags = FlagReader(arguments, mode: "outbox-drain")
        func rate(_ flag: String) -> Double {
            let text = flags.value(flag)
            guard let rate = Double(text), (0..<1).contains(rate) else { fail("outbox-drain: \(flag) takes 0 ≤ r < 1, not \(text)", code: 2) }
            return rate
        }
        func seconds(_ flag: String) -> Double {
            let text = flags.value(flag)
            guard let value = Double(text), value > 0 else { fail("outbox-drain: \(flag) takes a positive number of seconds, not \(text)", code: 2) }
            return value
        }
        while let flag = flags.nextFlag() {
            switch flag {
            case "--entries": entries = max(1, flags.number(flag))
            case "--lanes": lanes = max(1, flags.number(flag))
            case "--concurrency": concurrency = max(1, flags.number(flag))
            case "--lost": lost = rate(flag)
            case "--refusals": refusals = rate(flag)
            case "--rounds":
                rounds = max(1, flags.number(flag))
                roundsGiven = true
            case "--attempt-timeout": attemptTimeout = seconds(flag)
            case "--base-delay": baseDelay = seconds(flag)
            case "--against-direct": againstDirect = true
            case "--enqueue-batch": enqueueBatch = flags.number(flag)
            case "--no-warm-up": warmUp = false
            case "--side":
                let text = flags.value(flag)
                guard text == "outbox" || text == "direct" else { fail("outbox-drain: --side takes outbox or direct, not \(text)", code: 2) }
                side = text
            default: fail("outbox-drain: unknown argument \(flag)\n\(Options.usage)", code: 2)
            }
        }
    }
}

/// One of the three drains of a round.
enum DrainScenario: String, CaseIterable {
    case clean = "no faults"
    case lost = "lost answers"
    case refusals = "503s"
}

/// Counts the outbox's `willRetry` changes, by their error.
private final class RetryCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var byError: [String: Int] = [:]

    func add(_ error: String) {
        lock.withLock { byError[Self.kind(of: error), default: 0] += 1 }
    }

    /// A short name for an error's description: `URLError -1011 (Empty reply from server)`, or its first words (an
    /// NSError's description lists its user info in no fixed order, with the URL and the key in it).
    static func kind(of error: String) -> String {
        guard let code = error.range(of: "Code=") else { return error.split(separator: " ").prefix(4).joined(separator: " ") }
        let number = error[code.upperBound...].prefix { $0 == "-" || $0.isNumber }
        let known = ["Empty reply from server", "timed out", "network connection was lost", "cancelled"].first { error.contains($0) }
        return "URLError \(number)" + (known.map { " (\($0))" } ?? "")
    }

    var total: Int { lock.withLock { byError.values.reduce(0, +) } }
    var kinds: [String: Int] { lock.withLock { byError } }
}

/// One timed drain.
struct DrainRun {
    var scenario: DrainScenario
    var round: Int
    var seconds = Double.nan
    var cpuSeconds = Double.nan
    var counts = DrainLedger.Counts()
    /// Outbox-level retries (`willRetry` changes) and their errors.
    var retries = 0
    var retryKinds: [String: Int] = [:]
    /// Requests that arrived with their head and not their whole body (the old libcurl re-send without a body).
    var headsWithoutBody = 0
    /// Connections the server accepted for this drain.
    var connections = 0
    var problems: [String] = []

    var entriesPerSecond: Double { Double(entriesCount) / seconds }
    var entriesCount = 0
}

/// Enqueues `settings.entries` into a suspended outbox, resumes it and waits until nothing is pending.
private func runDrain(_ scenario: DrainScenario, round: Int, settings: OutboxDrainSettings, server: LoopbackServer) -> DrainRun {
    var run = DrainRun(scenario: scenario, round: round)
    run.entriesCount = settings.entries
    let path = "/outbox-drain/\(scenario == .clean ? "clean" : scenario == .lost ? "lost" : "refusals")/\(UUID().uuidString)"
    let ledger = DrainLedger(
        path: path, lostRate: scenario == .lost ? settings.lost : 0, refusalRate: scenario == .refusals ? settings.refusals : 0)
    server.route(path) { ledger.handle($0) }
    var policy = ConnectionPolicy()
    policy.requestFault = RequestFaultRule { ledger.fault(for: $0) }
    server.connectionPolicy = policy
    let url = server.url(path).absoluteString
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("requests-outbox-drain-\(getpid())-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: folder) }

    let session = makeOutboxSession(connections: settings.concurrency)
    defer { session.finishTasksAndInvalidate() }
    let queue = OperationQueue()
    queue.name = "requests-bench.outbox-drain"
    queue.maxConcurrentOperationCount = settings.concurrency
    var options = OutboxOptions()
    options.startsSuspended = true
    options.maximumConcurrentEntries = settings.concurrency
    options.attemptTimeout = settings.attemptTimeout
    options.baseDelay = settings.baseDelay
    options.maxDelay = settings.maxDelay
    let outbox: Outbox
    var keys: [String] = []
    do {
        outbox = try Outbox(directory: folder, queue: queue, session: session, requestTypes: [DrainEntry.self], options: options)
        for lane in 0..<settings.lanes {
            let name = "lane-\(lane)"
            let seqs = Array(stride(from: lane, to: settings.entries, by: settings.lanes))
            for start in stride(from: 0, to: seqs.count, by: 100) {
                let batch = seqs[start..<min(seqs.count, start + 100)].map { DrainEntry(url: url, lane: name, seq: $0) }
                keys += try outbox.enqueue(contentsOf: batch, lane: name).map(\.idempotencyKey)
            }
        }
    } catch {
        run.problems.append("could not open or fill the outbox: \(error)")
        return run
    }
    defer { outbox.close() }
    let retries = RetryCounter()
    let changes = outbox.changes
    let reader = Task {
        for await change in changes {
            if case .willRetry(_, let error) = change.kind { retries.add(error) }
        }
    }
    defer { reader.cancel() }

    let arrivalsBefore = server.arrivals.count
    let before = ResourceUsage.usage()
    let start = ResourceUsage.now()
    outbox.isSuspended = false
    let deadline = start + 120 + Double(settings.entries) * Double(settings.attemptTimeout) / 10
    while outbox.pendingCount > 0, outbox.deadLetters.isEmpty, ResourceUsage.now() < deadline {
        usleep(1_000)
    }
    run.seconds = ResourceUsage.now() - start
    run.cpuSeconds = (ResourceUsage.usage().cpuMicroseconds - before.cpuMicroseconds) / 1_000_000
    let pending = outbox.pendingCount, parked = outbox.deadLetters.count
    if pending > 0 || parked > 0 {
        run.problems.append("\(pending) pending, \(parked) parked after \(fixed(run.seconds, 1)) s")
        run.seconds = .nan
    }
    // The `sent` change and the last retries arrive on the outbox's queue: give the reader a moment.
    usleep(100_000)
    run.counts = ledger.snapshot
    run.retries = retries.total
    run.retryKinds = retries.kinds
    let arrivals = server.arrivals.dropFirst(arrivalsBefore).filter { $0.path == path }
    run.headsWithoutBody = arrivals.filter(\.isHeadWithoutBody).count
    run.connections = Set(arrivals.map(\.connection)).count

    let applications = ledger.applications
    let enqueued = Set(keys)
    let missing = enqueued.filter { applications[$0] == nil }.count
    let doubled = applications.filter { $0.value > 1 }.count
    let strays = applications.keys.filter { !enqueued.contains($0) }.count
    if missing > 0 { run.problems.append("\(missing) entries never applied") }
    if doubled > 0 { run.problems.append("\(doubled) entries applied more than once") }
    if strays > 0 { run.problems.append("\(strays) keys applied that were never enqueued") }
    if run.counts.conflicts > 0 || run.counts.malformed > 0 {
        run.problems.append("\(run.counts.conflicts) deliveries with another body than the key's first, \(run.counts.malformed) without a key")
    }
    if run.headsWithoutBody > 0 { run.problems.append("\(run.headsWithoutBody) requests arrived without their whole body") }
    return run
}

/// One line of figures for a drain.
private func describe(_ run: DrainRun) -> String {
    let counts = run.counts
    var text = "\(grouped(run.entriesPerSecond)) entries/s (\(fixed(run.seconds, 2)) s, CPU \(fixed(run.cpuSeconds, 1)) s)"
    text += "; server: \(grouped(Double(counts.deliveries))) deliveries, \(counts.repeats) repeats answered as the first"
    if counts.lostAnswers > 0 {
        let quick = counts.resendGaps.filter { $0 < 0.02 }.count
        text += ", \(counts.lostAnswers) answers lost (re-sent: \(counts.resendGaps.count), \(quick) within 20 ms"
        text += counts.resendGaps.isEmpty ? ")" : ", slowest after \(fixed((counts.resendGaps.max() ?? .nan) * 1000, 0)) ms)"
    }
    if counts.refused > 0 { text += ", \(counts.refused) answered 503" }
    text += ", \(run.connections) connections; outbox retries \(run.retries)"
    if !run.retryKinds.isEmpty {
        text += " (" + run.retryKinds.sorted { $0.value > $1.value }.map { "\($0.value)× \($0.key)" }.joined(separator: "; ") + ")"
    }
    return text
}

/// `requests-bench outbox-drain …`: the rounds, then the per-round ratios and the checks; exits 1 on a violation.
func runOutboxDrainCommand(_ arguments: [String]) -> Never {
    let settings = OutboxDrainSettings(arguments)
    if settings.againstDirect { runDrainAgainstDirectCommand(settings) }
    guard let server = try? LoopbackServer() else { fail("outbox-drain: could not start the loopback server", code: 2) }
    log(
        "outbox-drain: \(settings.entries) entries, \(settings.lanes) lanes, \(settings.concurrency) at once, lost \(settings.lost), "
            + "503s \(settings.refusals), attempt timeout \(settings.attemptTimeout) s, base delay \(settings.baseDelay) s, "
            + "\(settings.rounds) rounds; the embedded LoopbackServer in this process")
    var runs: [DrainRun] = []
    for round in 1...settings.rounds {
        // Each round starts with the next scenario, so a drift of the machine favours none.
        let order = DrainScenario.allCases.indices.map { DrainScenario.allCases[($0 + round - 1) % DrainScenario.allCases.count] }
        for scenario in order {
            let run = runDrain(scenario, round: round, settings: settings, server: server)
            log("  round \(round), \(scenario.rawValue): \(describe(run))" + (run.problems.isEmpty ? "" : " — PROBLEMS: " + run.problems.joined(separator: "; ")))
            runs.append(run)
        }
    }
    server.stop()

    print("")
    print(
        "outbox-drain: \(grouped(Double(settings.entries))) entries per drain, \(settings.lanes) lanes, \(settings.concurrency) at once, "
            + "lost answers \(fixed(settings.lost * 100, 1)) %, 503s \(fixed(settings.refusals * 100, 1)) %, attempt timeout \(fixed(settings.attemptTimeout, 0)) s, "
            + "backoff \(fixed(settings.baseDelay * 1000, 0)) ms doubling to \(fixed(settings.maxDelay * 1000, 0)) ms")
    for run in runs { print("round \(run.round), \(run.scenario.rawValue): \(describe(run))") }
    var ratios: [Double] = []
    for round in 1...settings.rounds {
        let clean = runs.first { $0.round == round && $0.scenario == .clean }?.entriesPerSecond ?? .nan
        let lost = runs.first { $0.round == round && $0.scenario == .lost }?.entriesPerSecond ?? .nan
        let refusals = runs.first { $0.round == round && $0.scenario == .refusals }?.entriesPerSecond ?? .nan
        ratios.append(lost / clean)
        print("round \(round): lost ÷ no faults = \(fixed(lost / clean, 2)), 503s ÷ no faults = \(fixed(refusals / clean, 2))")
    }
    for scenario in DrainScenario.allCases {
        print("median \(scenario.rawValue): \(grouped(median(runs.filter { $0.scenario == scenario }.map(\.entriesPerSecond)))) entries/s")
    }
    let problems = runs.flatMap { run in run.problems.map { "round \(run.round), \(run.scenario.rawValue): \($0)" } }
    let met = ratios.allSatisfy { $0.isFinite && $0 >= 0.5 }
    print("Goal (lost ÷ no faults ≥ 0.5 in each round): \(met ? "met" : "MISSED") (\(ratios.map { fixed($0, 2) }.joined(separator: ", ")))")
    print("Command: \(benchCommandLine())")
    if problems.isEmpty {
        print("Every entry applied exactly once, with one body; nothing pending or parked; no request without its body.")
    } else {
        print("VIOLATED: " + problems.joined(separator: "; "))
    }
    exit(problems.isEmpty ? 0 : 1)
}
#endif
