#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// `requests-bench outbox-drain --against-direct [--entries 4000] [--lanes 4] [--concurrency 8] [--rounds 5]
// [--enqueue-batch 100] [--no-warm-up] [--side outbox|direct] [--attempt-timeout 15]`: issue 47's rows, in one run
// (--side: one side only, for a profiler such as callgrind).
//
// 1. "A backlog drains at ≥ 0.9× the rate of the same POSTs sent directly through the queue with the same lanes and
//    concurrency." Each round times, in alternating order, (a) the outbox drain without faults: --entries
//    `DrainEntry` POSTs enqueued (untimed) into a suspended outbox, in --lanes lanes, --enqueue-batch per
//    `enqueue(contentsOf:)`; timed from `isSuspended = false` to the moment the last entry of every lane has settled
//    (its `operation(for:)` finished); and (b) the same POSTs (same body, URL, `Content-Type`, a quoted
//    `Idempotency-Key` header), built untimed, sent with `OperationQueue.addRequest`: each lane a chain, its next
//    POST added when the previous completes; no retries, no cache, the attempt timeout as the deadline, as an
//    outbox attempt has. Both: a fresh queue --concurrency wide, a fresh ephemeral session with --concurrency
//    connections per host, completions on one serial queue, the embedded LoopbackServer in this process, a
//    `DrainLedger` route each (every key applied once).
// 2. "At most one sync per 8 removals during a full drain": the journal's group commits (each one `fdatasync`) from
//    resume until every removal is durable (no live record left), ÷ entries. The group commits of the enqueue and
//    of every outbox opened are printed too, to check against `strace -f -c -e trace=fdatasync,fsync`.

/// A side of a round.
enum DrainSide: String {
    case outbox = "outbox drain"
    case direct = "direct sends"
}

/// One timed drain of either side.
struct SideRun {
    var side: DrainSide
    var round: Int
    var entries: Int
    var seconds = Double.nan
    var cpuSeconds = Double.nan
    /// Of `cpuSeconds`, the system's (the kernel's work for the process: sockets, the journal's writes and syncs).
    var systemSeconds = Double.nan
    /// The process's context switches (voluntary and not) during the timed part.
    var contextSwitches = 0
    var deliveries = 0
    var connections = 0
    /// The outbox's journal: group commits and calls while enqueueing, and from resume until every removal is durable.
    var enqueueGroups = 0
    var enqueueCalls = 0
    var drainGroups = 0
    var drainCalls = 0
    /// From the last entry settled to the last removal durable.
    var removalLag = Double.nan
    var problems: [String] = []

    var entriesPerSecond: Double { Double(entries) / seconds }
    var syncsPerRemoval: Double { Double(drainGroups) / Double(entries) }
}

/// The direct side's lanes: each a chain of POSTs, the next added when the previous completes.
private final class DirectChains: @unchecked Sendable {
    private let lanes: [[DirectDrainPost]]
    private let queue: OperationQueue
    private let session: URLSession
    private let callbacks = DispatchQueue(label: "requests-bench.outbox-drain.direct")
    private let lock = NSLock()
    private var lanesLeft: Int
    private var failures: [String: Int] = [:]
    private var endTime = Double.nan
    let done = DispatchSemaphore(value: 0)

    init(lanes: [[DirectDrainPost]], queue: OperationQueue, session: URLSession) {
        self.lanes = lanes.filter { !$0.isEmpty }
        self.queue = queue
        self.session = session
        lanesLeft = self.lanes.count
    }

    func start() {
        for lane in lanes.indices { send(lane, 0) }
    }

    private func send(_ lane: Int, _ index: Int) {
        queue.addRequest(lanes[lane][index], session: session, completionQueue: callbacks) { [self] result in
            if case let .failure(error) = result {
                lock.withLock { failures[String(describing: error).prefix(80).description, default: 0] += 1 }
            }
            if index + 1 < lanes[lane].count { return send(lane, index + 1) }
            let last: Bool = lock.withLock {
                lanesLeft -= 1
                if lanesLeft == 0 { endTime = ResourceUsage.now() }
                return lanesLeft == 0
            }
            if last { done.signal() }
        }
    }

    var end: Double { lock.withLock { endTime } }
    var failed: [String: Int] { lock.withLock { failures } }
}

/// Keeps the moment an operation ran.
private final class Moment: @unchecked Sendable {
    private let lock = NSLock()
    private var time = Double.nan
    let done = DispatchSemaphore(value: 0)

    func mark() {
        lock.withLock { time = ResourceUsage.now() }
        done.signal()
    }

    var value: Double { lock.withLock { time } }
}

/// What every outbox of a run cost the journal, for `strace`.
struct SyncAccount {
    var outboxes = 0
    var enqueueGroups = 0
    var drainGroups = 0
    /// Group commits after the drain, until `close()` returned (removals written by `close`).
    var closeGroups = 0
}

/// A route with its ledger, the session and the queue of one side, on `server`.
private struct SideSetup {
    let ledger: DrainLedger
    let path: String
    let url: String
    let session: URLSession
    let queue: OperationQueue

    init(_ side: DrainSide, settings: OutboxDrainSettings, server: LoopbackServer) {
        path = "/outbox-drain/\(side == .outbox ? "outbox" : "direct")/\(UUID().uuidString)"
        ledger = DrainLedger(path: path, lostRate: 0, refusalRate: 0)
        let ledger = ledger
        server.route(path) { ledger.handle($0) }
        url = server.url(path).absoluteString
        session = makeOutboxSession(connections: settings.concurrency)
        queue = OperationQueue()
        queue.name = "requests-bench.outbox-drain.\(side == .outbox ? "outbox" : "direct")"
        queue.maxConcurrentOperationCount = settings.concurrency
    }

    /// Entry `seq`'s lane.
    static func lane(_ seq: Int, lanes: Int) -> String { "lane-\(seq % lanes)" }

    /// Fills in what the server saw, and checks that each of `keys` was applied once and nothing else.
    func finish(_ run: inout SideRun, keys: [String], server: LoopbackServer, arrivalsBefore: Int) {
        let counts = ledger.snapshot
        run.deliveries = counts.deliveries
        let arrivals = server.arrivals.dropFirst(arrivalsBefore).filter { $0.path == path }
        run.connections = Set(arrivals.map(\.connection)).count
        let applications = ledger.applications
        let enqueued = Set(keys)
        let missing = enqueued.filter { applications[$0] == nil }.count
        let doubled = applications.filter { $0.value > 1 }.count
        let strays = applications.keys.filter { !enqueued.contains($0) }.count
        if missing > 0 { run.problems.append("\(missing) entries never applied") }
        if doubled > 0 { run.problems.append("\(doubled) entries applied more than once") }
        if strays > 0 { run.problems.append("\(strays) keys applied that were never sent") }
        if counts.conflicts > 0 || counts.malformed > 0 {
            run.problems.append("\(counts.conflicts) deliveries with another body than the key's first, \(counts.malformed) without a key")
        }
        session.finishTasksAndInvalidate()
    }
}

/// (a): enqueues `entries` into a suspended outbox (untimed), resumes it, times until every lane's last entry has
/// settled, then waits until every removal is durable.
private func runOutboxSide(round: Int, entries: Int, settings: OutboxDrainSettings, server: LoopbackServer, account: inout SyncAccount) -> SideRun {
    var run = SideRun(side: .outbox, round: round, entries: entries)
    let setup = SideSetup(.outbox, settings: settings, server: server)
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("requests-outbox-drain-\(getpid())-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: folder) }
    var options = OutboxOptions()
    options.startsSuspended = true
    options.maximumConcurrentEntries = settings.concurrency
    options.attemptTimeout = settings.attemptTimeout
    options.baseDelay = settings.baseDelay
    options.maxDelay = settings.maxDelay
    let outbox: Outbox
    var keys: [String] = []
    var lastIDs: [UInt64] = []
    let opened: (groups: Int, calls: Int)
    do {
        outbox = try Outbox(directory: folder, queue: setup.queue, session: setup.session, requestTypes: [DrainEntry.self], options: options)
        account.outboxes += 1
        opened = outbox.journalGroupCommits
        for lane in 0..<settings.lanes {
            let name = SideSetup.lane(lane, lanes: settings.lanes)
            let seqs = Array(stride(from: lane, to: entries, by: settings.lanes))
            let step = settings.enqueueBatch == 0 ? max(1, seqs.count) : settings.enqueueBatch
            for start in stride(from: 0, to: seqs.count, by: step) {
                let batch = seqs[start..<min(seqs.count, start + step)].map { DrainEntry(url: setup.url, lane: name, seq: $0) }
                let stored = try outbox.enqueue(contentsOf: batch, lane: name)
                keys += stored.map(\.idempotencyKey)
                if start + step >= seqs.count, let last = stored.last { lastIDs.append(last.id) }
            }
        }
    } catch {
        run.problems.append("could not open or fill the outbox: \(error)")
        return run
    }
    let enqueued = outbox.journalGroupCommits
    (run.enqueueGroups, run.enqueueCalls) = (enqueued.groups - opened.groups, enqueued.calls - opened.calls)
    // The end: an operation that depends on every lane's last entry settling.
    let moment = Moment()
    let end = BlockOperation { moment.mark() }
    for id in lastIDs {
        guard let settled = outbox.operation(for: id) else { continue }
        end.addDependency(settled)
    }
    let watcher = OperationQueue()
    watcher.addOperation(end)

    let arrivalsBefore = server.arrivals.count
    let before = ResourceUsage.usage(), systemBefore = ResourceUsage.userAndSystemMicroseconds().system
    let start = ResourceUsage.now()
    outbox.isSuspended = false
    let limit = 120 + Double(entries) * settings.attemptTimeout / 10
    if moment.done.wait(timeout: .now() + limit) == .timedOut {
        run.problems.append("not drained after \(fixed(limit, 0)) s: \(outbox.pendingCount) pending")
        watcher.cancelAllOperations()
    } else {
        run.seconds = moment.value - start
    }
    let after = ResourceUsage.usage()
    run.cpuSeconds = (after.cpuMicroseconds - before.cpuMicroseconds) / 1_000_000
    run.contextSwitches = after.contextSwitches - before.contextSwitches
    run.systemSeconds = (ResourceUsage.userAndSystemMicroseconds().system - systemBefore) / 1_000_000
    // Every removal durable: no live record left (removals are written in groups, the last ones once idle).
    let removalLimit = ResourceUsage.now() + 10
    while outbox.journalLiveCount > 0, ResourceUsage.now() < removalLimit { usleep(200) }
    run.removalLag = ResourceUsage.now() - moment.value
    let drained = outbox.journalGroupCommits
    (run.drainGroups, run.drainCalls) = (drained.groups - enqueued.groups, drained.calls - enqueued.calls)
    if outbox.journalLiveCount > 0 { run.problems.append("\(outbox.journalLiveCount) records still live 10 s after the drain") }
    let pending = outbox.pendingCount, parked = outbox.deadLetters.count
    if pending > 0 || parked > 0 {
        run.problems.append("\(pending) pending, \(parked) parked")
        run.seconds = .nan
    }
    setup.finish(&run, keys: keys, server: server, arrivalsBefore: arrivalsBefore)
    outbox.close()
    account.enqueueGroups += run.enqueueGroups
    account.drainGroups += run.drainGroups
    account.closeGroups += outbox.journalGroupCommits.groups - drained.groups
    return run
}

/// (b): the same POSTs sent directly, each lane a chain.
private func runDirectSide(round: Int, entries: Int, settings: OutboxDrainSettings, server: LoopbackServer) -> SideRun {
    var run = SideRun(side: .direct, round: round, entries: entries)
    let setup = SideSetup(.direct, settings: settings, server: server)
    guard let url = URL(string: setup.url) else { fail("outbox-drain: bad URL \(setup.url)", code: 2) }
    let deadline = TransferLimits(deadline: settings.attemptTimeout)
    let lanes: [[DirectDrainPost]] = (0..<settings.lanes).map { lane in
        let name = SideSetup.lane(lane, lanes: settings.lanes)
        return stride(from: lane, to: entries, by: settings.lanes).map { seq in
            let entry = DrainEntry(url: setup.url, lane: name, seq: seq)
            return DirectDrainPost(url: url, body: entry.body, key: UUID().uuidString.lowercased(), identifier: entry.identifier, limits: deadline)
        }
    }
    let chains = DirectChains(lanes: lanes, queue: setup.queue, session: setup.session)
    let arrivalsBefore = server.arrivals.count
    let before = ResourceUsage.usage(), systemBefore = ResourceUsage.userAndSystemMicroseconds().system
    let start = ResourceUsage.now()
    chains.start()
    let limit = 120 + Double(entries) * settings.attemptTimeout / 10
    if chains.done.wait(timeout: .now() + limit) == .timedOut {
        run.problems.append("not done after \(fixed(limit, 0)) s")
    } else {
        run.seconds = chains.end - start
    }
    let after = ResourceUsage.usage()
    run.cpuSeconds = (after.cpuMicroseconds - before.cpuMicroseconds) / 1_000_000
    run.contextSwitches = after.contextSwitches - before.contextSwitches
    run.systemSeconds = (ResourceUsage.userAndSystemMicroseconds().system - systemBefore) / 1_000_000
    let failed = chains.failed
    if !failed.isEmpty {
        run.problems.append("\(failed.values.reduce(0, +)) POSTs failed: " + failed.map { "\($0.value)× \($0.key)" }.joined(separator: "; "))
        run.seconds = .nan
    }
    setup.finish(&run, keys: lanes.flatMap { $0.map(\.key) }, server: server, arrivalsBefore: arrivalsBefore)
    return run
}

/// One line of figures for a side.
private func describe(_ run: SideRun) -> String {
    var text =
        "\(grouped(run.entriesPerSecond)) entries/s (\(fixed(run.seconds, 2)) s, CPU \(fixed(run.cpuSeconds, 2)) s = "
        + "\(grouped(run.cpuSeconds * 1_000_000 / Double(run.entries))) µs per entry, client and server, "
        + "\(grouped(run.systemSeconds * 1_000_000 / Double(run.entries))) µs of it in the kernel; "
        + "\(fixed(Double(run.contextSwitches) / Double(run.entries), 1)) context switches per entry); "
        + "\(grouped(Double(run.deliveries))) deliveries, \(run.connections) connections"
    if run.side == .outbox {
        text +=
            "; journal: enqueue \(run.enqueueGroups) group commits (\(run.enqueueCalls) calls), drain \(run.drainGroups) group commits "
            + "(\(run.drainCalls) removal calls) for \(grouped(Double(run.entries))) removals = \(fixed(run.syncsPerRemoval, 4)) syncs per removal, "
            + "the last durable \(fixed(run.removalLag * 1000, 1)) ms after the drain"
    }
    return text + (run.problems.isEmpty ? "" : " — PROBLEMS: " + run.problems.joined(separator: "; "))
}

/// `requests-bench outbox-drain --against-direct …`: the rounds, the ratios, the syncs; exits 1 on a violation.
func runDrainAgainstDirectCommand(_ given: OutboxDrainSettings) -> Never {
    var settings = given
    if !settings.roundsGiven { settings.rounds = 5 }
    guard let server = try? LoopbackServer() else { fail("outbox-drain: could not start the loopback server", code: 2) }
    // Records arrivals (to count connections), for both sides alike; no fault.
    server.connectionPolicy = ConnectionPolicy()
    let batch = settings.enqueueBatch == 0 ? "each lane in one call" : "\(settings.enqueueBatch) per call"
    log(
        "outbox-drain --against-direct: \(settings.entries) entries, \(settings.lanes) lanes, \(settings.concurrency) at once, "
            + "\(settings.rounds) rounds, enqueue \(batch); the embedded LoopbackServer in this process")
    var account = SyncAccount()
    if settings.warmUp, settings.side == nil {
        let entries = min(settings.entries, 400)
        let outbox = runOutboxSide(round: 0, entries: entries, settings: settings, server: server, account: &account)
        let direct = runDirectSide(round: 0, entries: entries, settings: settings, server: server)
        log("  warm-up (\(entries) entries, not counted): outbox \(grouped(outbox.entriesPerSecond))/s, direct \(grouped(direct.entriesPerSecond))/s")
    }
    var runs: [SideRun] = []
    for round in 1...settings.rounds {
        // Odd rounds start with the outbox, even ones with the direct sends, so a drift of the machine favours neither.
        let sides: [DrainSide] = round % 2 == 1 ? [.outbox, .direct] : [.direct, .outbox]
        for side in sides where settings.side == nil || settings.side == (side == .outbox ? "outbox" : "direct") {
            let run =
                side == .outbox
                ? runOutboxSide(round: round, entries: settings.entries, settings: settings, server: server, account: &account)
                : runDirectSide(round: round, entries: settings.entries, settings: settings, server: server)
            log("  round \(round), \(side.rawValue): \(describe(run))")
            runs.append(run)
        }
    }
    server.stop()

    let goal = 0.9, syncGoal = 1.0 / Double(Outbox.removalGroupForBenchmark)
    print("")
    print(
        "outbox-drain --against-direct: \(grouped(Double(settings.entries))) entries per drain, \(settings.lanes) lanes, "
            + "\(settings.concurrency) at once (queue \(settings.concurrency) wide, \(settings.concurrency) connections per host), enqueue \(batch), "
            + "\(settings.rounds) rounds; entries/s from resume (outbox) or the first addRequest (direct) to the last entry settled")
    for run in runs { print("round \(run.round), \(run.side.rawValue): \(describe(run))") }
    var ratios: [Double] = []
    for round in 1...settings.rounds {
        let outbox = runs.first { $0.round == round && $0.side == .outbox }?.entriesPerSecond ?? .nan
        let direct = runs.first { $0.round == round && $0.side == .direct }?.entriesPerSecond ?? .nan
        let ratio = outbox / direct
        ratios.append(ratio)
        print(
            "round \(round): outbox \(grouped(outbox)) entries/s, direct \(grouped(direct)) entries/s, outbox ÷ direct = \(fixed(ratio, 3)) "
                + "— \(ratio >= goal ? "pass" : "FAIL") (≥ \(goal))")
    }
    let outboxMedian = median(runs.filter { $0.side == .outbox }.map(\.entriesPerSecond))
    let directMedian = median(runs.filter { $0.side == .direct }.map(\.entriesPerSecond))
    let ratioMedian = median(ratios)
    print(
        "median: outbox \(grouped(outboxMedian)) entries/s, direct \(grouped(directMedian)) entries/s, ratio of medians "
            + "\(fixed(outboxMedian / directMedian, 3)), median of the rounds' ratios \(fixed(ratioMedian, 3)) — \(ratioMedian >= goal ? "pass" : "FAIL") (≥ \(goal)); "
            + "\(ratios.filter { $0 >= goal }.count) of \(ratios.count) rounds pass")
    let drains = runs.filter { $0.side == .outbox }
    let syncs = drains.map(\.syncsPerRemoval)
    let syncsMet = syncs.allSatisfy { $0 <= syncGoal + 1e-12 }
    print(
        "syncs per removal (the drain's journal group commits ÷ entries; goal ≤ 1/\(Outbox.removalGroupForBenchmark) = \(fixed(syncGoal, 4))): "
            + syncs.map { fixed($0, 4) }.joined(separator: ", ") + " — \(syncsMet ? "pass" : "FAIL")"
            + "; the outbox's removal calls ÷ entries (before the journal merges calls that meet): "
            + drains.map { fixed(Double($0.drainCalls) / Double($0.entries), 4) }.joined(separator: ", "))
    print(
        "for strace -f -c -e trace=fdatasync,fsync: \(account.outboxes) outboxes opened (each 1 fdatasync + 1 fsync of its folder), "
            + "journal group commits (1 fdatasync each): enqueue \(account.enqueueGroups), drains \(account.drainGroups), close \(account.closeGroups); "
            + "so fdatasync = \(account.outboxes + account.enqueueGroups + account.drainGroups + account.closeGroups) + c and fsync = \(account.outboxes) + c, "
            + "c = compactions (each 1 fdatasync + 1 fsync); the direct sends sync nothing")
    print("Command: \(benchCommandLine())")
    let problems = runs.flatMap { run in run.problems.map { "round \(run.round), \(run.side.rawValue): \($0)" } }
    if problems.isEmpty {
        print("Every POST applied exactly once on both sides; nothing pending or parked; every removal durable.")
    } else {
        print("VIOLATED: " + problems.joined(separator: "; "))
    }
    exit(problems.isEmpty ? 0 : 1)
}
