#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
import RequestsTestServer

// `requests-bench outbox-kill [--entries 5000] [--kills 200] [--lanes 8] [--seed S] [--refusals 0.02]`: nothing lost,
// nothing doubled. The parent serves POST /outbox-kill (OutboxKillLedger) and runs `outbox-child` processes one
// after another on one folder, SIGKILLing each at a random moment (2–60 ms after it starts or after it opened the
// outbox, or after a random number of acknowledgements) and starting the next with --start = the highest
// acknowledged seq + 1, until `--kills` kills have landed; the last child runs until it has drained. Then it checks
// the server's record against the acknowledgements (OutboxKillVerdicts) and prints a table; exits 1 on a violation.

/// The kill test's settings.
struct OutboxKillSettings {
    var entries = 5_000
    var kills = 200
    var lanes = 8
    var seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xFFFF_FFFF
    /// The share of first deliveries the server answers 503 (not applied), so that retries happen.
    var refusals = 0.02

    static let smoke = OutboxKillSettings(entries: 50, kills: 3)

    init(entries: Int = 5_000, kills: Int = 200) {
        self.entries = entries
        self.kills = kills
    }

    init(_ arguments: [String]) {
        var flags = FlagReader(arguments, mode: "outbox-kill")
        while let flag = flags.nextFlag() {
            switch flag {
            case "--entries": entries = max(1, flags.number(flag))
            case "--kills": kills = flags.number(flag)
            case "--lanes": lanes = max(1, flags.number(flag))
            case "--seed": seed = UInt64(flags.number(flag))
            case "--refusals":
                let text = flags.value(flag)
                guard let rate = Double(text), (0..<1).contains(rate) else { fail("outbox-kill: --refusals takes 0 ≤ r < 1, not \(text)", code: 2) }
                refusals = rate
            default: fail("outbox-kill: unknown argument \(flag)\n\(Options.usage)", code: 2)
            }
        }
    }
}

/// What a kill test run did and found.
struct OutboxKillResult {
    var settings: OutboxKillSettings
    var verdicts: OutboxKillVerdicts
    var snapshot: OutboxKillLedger.Snapshot
    var acked = 0
    var kills = 0
    var children = 0
    var killsByPhase: [OutboxChildRun.Phase: Int] = [:]
    /// Pending entries found by the children's outboxes when they opened, added up.
    var resumed = 0
    var seconds = 0.0
    /// A child found nothing to send or enqueue and drained before its kill, so the kills stopped there.
    var drainedEarly = false
    /// Children that ended other than by our SIGKILL or by draining, the last one not draining, and the like.
    var failures: [String] = []

    var violated: Bool {
        !failures.isEmpty || !verdicts.lost.isEmpty || !verdicts.doubled.isEmpty || verdicts.inversionCount > 0
            || snapshot.conflicts > 0 || snapshot.malformed > 0 || verdicts.strays > 0 || acked != settings.entries
    }
}

/// When to kill a child.
private enum KillPlan {
    /// After the delay, or once the child has made `cap` acknowledgements.
    case afterStart(milliseconds: Int, cap: Int)
    case afterOpen(milliseconds: Int, cap: Int)
    case afterAcks(Int)
}

/// Runs the kill test against `server` (which gets the route).
func runOutboxKillTest(_ settings: OutboxKillSettings, server: LoopbackServer) -> OutboxKillResult {
    let ledger = OutboxKillLedger(refusalRate: settings.refusals, seed: settings.seed ^ 0x5EED)
    let path = "/outbox-kill/\(UUID().uuidString)"
    server.route(path) { ledger.handle($0) }
    let url = server.url(path).absoluteString
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("requests-outbox-kill-\(getpid())-\(UUID().uuidString)")
    let outboxFolder = folder.appendingPathComponent("outbox")
    let errorFile = folder.appendingPathComponent("children.stderr")
    defer { try? FileManager.default.removeItem(at: folder) }
    var result = OutboxKillResult(
        settings: settings, verdicts: OutboxKillVerdicts(snapshot: ledger.snapshot, acked: [], entries: 0, startedAt: [:]),
        snapshot: ledger.snapshot)
    guard (try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)) != nil,
        FileManager.default.createFile(atPath: errorFile.path, contents: nil), let errors = try? FileHandle(forWritingTo: errorFile)
    else {
        result.failures.append("could not create \(folder.path)")
        return result
    }
    defer { try? errors.close() }
    var random = SplitMix64(seed: settings.seed)
    var acked = Set<Int>()
    var startedAt: [Int: Int] = [:]
    let began = ResourceUsage.now()
    // Enough rounds for every kill to land, even when some children finish before their kill comes.
    let maximumRounds = settings.kills * 3 + 10
    var round = 0
    var lastRan = false
    while result.failures.isEmpty, round < maximumRounds {
        round += 1
        let start = (acked.max() ?? -1) + 1
        let isLast = result.kills >= settings.kills || result.drainedEarly || round == maximumRounds
        let arguments = [
            "--dir", outboxFolder.path, "--url", url, "--start", String(start), "--entries", String(settings.entries),
            "--lanes", String(settings.lanes),
        ]
        let child: OutboxChildRun
        do {
            child = try OutboxChildRun(arguments: arguments, errors: errors)
        } catch {
            result.failures.append("could not start a child: \(error)")
            break
        }
        result.children += 1
        startedAt[start, default: 0] += 1
        if isLast {
            lastRan = true
            let status = child.waitForExit(timeout: 300 + Double(settings.entries) * 0.05)
            let state = child.state
            acked.formUnion(state.acks)
            result.resumed += state.openedWith ?? 0
            if status != 0 || !state.drained {
                let how = status.map { "exit status \($0)" } ?? "hung, killed after the timeout"
                result.failures.append("the last child did not drain: \(how); it said: \(state.otherLines.suffix(3).joined(separator: " / "))")
            }
            break
        }
        let plan = chooseKillPlan(&random, start: start, settings: settings, killsLeft: settings.kills - result.kills)
        let deadline = ResourceUsage.now() + 60
        var stalled: String?
        switch plan {
        case let .afterStart(milliseconds, cap):
            child.wait(until: ResourceUsage.now() + Double(milliseconds) / 1000) { $0.acks.count >= cap }
        case let .afterOpen(milliseconds, cap):
            if child.wait(until: deadline, for: { $0.openedWith != nil }) {
                child.wait(until: ResourceUsage.now() + Double(milliseconds) / 1000) { $0.acks.count >= cap }
            } else if !child.state.ended {
                stalled = "a child did not open its outbox within 60 s"
            }
        case let .afterAcks(count):
            if !child.wait(until: deadline, for: { $0.acks.count >= count || $0.drained }), !child.state.ended {
                stalled = "a child made \(child.state.acks.count) of \(count) acknowledgements in 60 s"
            }
        }
        let phase = child.phase
        let landed = child.kill()
        let state = child.state
        acked.formUnion(state.acks)
        result.resumed += state.openedWith ?? 0
        if let stalled {
            result.failures.append(stalled)
        } else if landed {
            result.kills += 1
            result.killsByPhase[phase, default: 0] += 1
        } else if state.drained {
            // Nothing was left to send or enqueue: no later kill can land anywhere but in a start-up.
            if start >= settings.entries, (state.openedWith ?? 0) == 0 { result.drainedEarly = true }
        } else {
            let status = child.process.terminationStatus
            result.failures.append("a child ended by itself (status \(status)) before its kill; it said: \(state.otherLines.suffix(3).joined(separator: " / "))")
        }
    }
    if !lastRan, result.failures.isEmpty {
        result.failures.append("the last child did not run")
    }
    result.seconds = ResourceUsage.now() - began
    result.acked = acked.count
    result.snapshot = ledger.snapshot
    result.verdicts = OutboxKillVerdicts(snapshot: result.snapshot, acked: acked, entries: settings.entries, startedAt: startedAt)
    if !result.failures.isEmpty, let text = try? String(contentsOf: errorFile, encoding: .utf8), !text.isEmpty {
        result.failures.append("children's standard error ends: " + text.split(separator: "\n").suffix(3).joined(separator: " / "))
    }
    return result
}

/// A kill 2–60 ms after the child starts (20 %) or after it opened the outbox (40 %), or after a random number of
/// acknowledgements (40 %). Each child may make at most a random number up to its share of the remaining entries (half of it on
/// average), so the entries outlast the kills and every kill lands while a child enqueues and sends; kills planned
/// after the last acknowledgement land 1–10 ms after a child opened, while it sends what it found pending.
private func chooseKillPlan(_ random: inout SplitMix64, start: Int, settings: OutboxKillSettings, killsLeft: Int) -> KillPlan {
    let remaining = settings.entries - start
    guard remaining > 0 else { return .afterOpen(milliseconds: Int.random(in: 1...10, using: &random), cap: 1) }
    let delay = Int.random(in: 2...60, using: &random)
    let draw = random.nextDouble()
    let share = max(1, remaining / max(1, killsLeft))
    let cap = Int.random(in: 1...share, using: &random)
    if draw < 0.2 { return .afterStart(milliseconds: delay, cap: cap) }
    if draw < 0.6 { return .afterOpen(milliseconds: delay, cap: cap) }
    return .afterAcks(cap)
}

/// The kill test's table.
func outboxKillSection(_ result: OutboxKillResult) -> Section {
    let settings = result.settings, verdicts = result.verdicts, snapshot = result.snapshot
    func check(_ ok: Bool) -> Verdict { ok ? .pass : .violated }
    func count(_ value: Int) -> String { grouped(Double(value)) }
    var section = Section(
        name: "Outbox kill test",
        title: "12a. Outbox, nothing lost, nothing doubled: \(count(settings.entries)) entries in \(settings.lanes) lanes, "
            + "\(count(result.kills)) SIGKILLs, \(count(result.children)) child processes",
        rows: [])
    let lostExamples = verdicts.lost.prefix(5).map(String.init).joined(separator: ", ")
    section.rows.append(
        Row(
            measure: "Acknowledged entries applied by the server", library: "\(count(result.acked - verdicts.lost.count)) of \(count(result.acked))",
            baseline: verdicts.lost.isEmpty ? "" : "lost: \(lostExamples)\(verdicts.lost.count > 5 ? " …" : "")",
            comparison: "acknowledged: \(count(result.acked)) of \(count(settings.entries))", goal: "all, and all acknowledged",
            verdict: check(verdicts.lost.isEmpty && result.acked == settings.entries)))
    section.rows.append(
        Row(
            measure: "Keys sent with two different bodies", library: count(snapshot.conflicts),
            baseline: snapshot.conflictExamples.joined(separator: "; "), comparison: "\(count(snapshot.malformed)) malformed deliveries",
            goal: "0", verdict: check(snapshot.conflicts == 0 && snapshot.malformed == 0)))
    section.rows.append(
        Row(
            measure: "Entries applied more than once", library: count(verdicts.doubled.count),
            baseline: "\(count(snapshot.order.count)) keys applied, each once",
            comparison: "\(count(snapshot.repeats)) repeat deliveries deduplicated; \(count(verdicts.reenqueues)) re-enqueues",
            goal: "0", verdict: check(verdicts.doubled.isEmpty && verdicts.strays == 0)))
    section.rows.append(
        Row(
            measure: "Lane order (seqs per lane in first-application order)", library: "\(count(verdicts.inversionCount)) inversions",
            baseline: verdicts.inversions.joined(separator: "; "), comparison: "\(settings.lanes) lanes", goal: "0",
            verdict: check(verdicts.inversionCount == 0)))
    section.rows.append(
        Row(
            measure: "Child processes", library: result.failures.isEmpty ? "as expected" : result.failures.joined(separator: "; "),
            baseline: "", comparison: "", goal: "killed or drained", verdict: check(result.failures.isEmpty)))
    let phases = OutboxChildRun.Phase.allCases.map { "\($0.rawValue) \(count(result.killsByPhase[$0] ?? 0))" }.joined(separator: ", ")
    section.notes.append(
        "Counts: entries \(count(settings.entries)), kills \(count(result.kills)) (\(phases)), acked \(count(result.acked)), "
            + "applied \(count(snapshot.order.count)) keys, repeats \(count(snapshot.repeats)), unacked-but-stored re-enqueues "
            + "\(count(verdicts.reenqueues)), deliveries \(count(snapshot.deliveries)) (\(count(snapshot.refused)) answered 503), "
            + "entries found pending on open \(count(result.resumed)), elapsed \(fixed(result.seconds, 1)) s, seed \(settings.seed).")
    if result.kills < settings.kills {
        section.notes.append(
            "Only \(count(result.kills)) of the \(count(settings.kills)) kills landed: "
                + (result.drainedEarly ? "a child found nothing left to enqueue or send and drained before its kill." : "the test stopped early."))
    }
    section.notes.append(
        "A child acknowledges a seq after its enqueue returned, and the next child starts after the highest acknowledged seq; "
            + "so a seq that was stored but not yet acknowledged when its child was killed is enqueued again, under a new key. "
            + "The server applies both keys: such a seq may be applied once more for each child started at it (a re-enqueue, "
            + "counted above); any other seq applied twice is a doubled effect. Lane order allows the equal seq of a re-enqueue.")
    return section
}

/// `requests-bench outbox-kill …`: runs the test with its own loopback server, prints the table, exits 1 on a violation.
func runOutboxKillCommand(_ arguments: [String]) -> Never {
    let settings = OutboxKillSettings(arguments)
    guard let server = try? LoopbackServer() else { fail("outbox-kill: could not start the loopback server", code: 2) }
    log("outbox-kill: \(settings.entries) entries, \(settings.kills) kills, \(settings.lanes) lanes, seed \(settings.seed)…")
    let result = runOutboxKillTest(settings, server: server)
    server.stop()
    let section = outboxKillSection(result)
    print("")
    print(plainTextTable([section]))
    print("Command: \(benchCommandLine())")
    print(result.violated ? "VIOLATED: " + section.violations.joined(separator: "; ") : "Nothing lost, nothing doubled, lane order held.")
    exit(result.violated ? 1 : 0)
}

/// How this run was started, as a `swift run` command.
func benchCommandLine() -> String {
    #if DEBUG
    let prefix = "swift run requests-bench"
    #else
    let prefix = "swift run -c release requests-bench"
    #endif
    return ([prefix] + CommandLine.arguments.dropFirst()).joined(separator: " ")
}
#endif
