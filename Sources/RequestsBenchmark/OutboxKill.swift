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
    var rounds = KillRounds()
    var acked: Int { rounds.acked.count }
    var kills: Int { rounds.kills }
    var children: Int { rounds.children }
    var killsByPhase: [OutboxChildRun.Phase: Int] { rounds.killsByPhase }
    var resumed: Int { rounds.resumed }
    var seconds: Double { rounds.seconds }
    var drainedEarly: Bool { rounds.drainedEarly }
    var failures: [String] { rounds.failures }

    var violated: Bool {
        !failures.isEmpty || !verdicts.lost.isEmpty || !verdicts.doubled.isEmpty || verdicts.inversionCount > 0
            || snapshot.conflicts > 0 || snapshot.malformed > 0 || verdicts.strays > 0 || acked != settings.entries
    }
}

/// Runs the kill test against `server` (which gets the route).
func runOutboxKillTest(_ settings: OutboxKillSettings, server: LoopbackServer) -> OutboxKillResult {
    let ledger = OutboxKillLedger(refusalRate: settings.refusals, seed: settings.seed ^ 0x5EED)
    let path = "/outbox-kill/\(UUID().uuidString)"
    server.route(path) { ledger.handle($0) }
    let url = server.url(path).absoluteString
    var result = OutboxKillResult(
        settings: settings, verdicts: OutboxKillVerdicts(snapshot: ledger.snapshot, acked: [], entries: 0, startedAt: [:]),
        snapshot: ledger.snapshot)
    let rounds = runKillRounds(KillRoundSettings(entries: settings.entries, kills: settings.kills, seed: settings.seed), mode: "outbox-child") { folder, start in
        [
            "--dir", folder.path, "--url", url, "--start", String(start), "--entries", String(settings.entries),
            "--lanes", String(settings.lanes),
        ]
    }
    result.rounds = rounds
    result.snapshot = ledger.snapshot
    result.verdicts = OutboxKillVerdicts(snapshot: result.snapshot, acked: rounds.acked, entries: settings.entries, startedAt: rounds.startedAt)
    return result
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
