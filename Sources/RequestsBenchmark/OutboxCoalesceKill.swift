#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// `requests-bench outbox-coalesce-kill [--saves 10000] [--threads 8] [--kills 20] [--seed S]` (issue 48): saves of
// one draft, coalesced, through SIGKILLs. Children (`outbox-coalesce-child`) save versions S..<N of the draft from
// --threads threads, each save `enqueue(…, replacing: "draft")`; a save takes the next version and enqueues it under
// the app's own lock (as a form's saves come one after another), so that the version order is the order the saves
// were stored in. The rounds are the kill test's (OutboxKillRounds.swift). The server applies each key once, in
// arrival order; then: the versions applied never go back (a re-enqueued version may repeat), and the last
// acknowledged version arrives.

/// The server: each key applied once, the versions in the order they were applied.
private final class DraftLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var keys = Set<String>()
    private(set) var applied: [Int] = []
    private(set) var repeats = 0

    var snapshot: (applied: [Int], repeats: Int) { lock.withLock { (applied, repeats) } }

    func handle(_ request: LoopbackRequest) -> LoopbackResponse {
        let key = request.headers.first { $0.key.lowercased() == "idempotency-key" }?.value ?? ""
        let version = Int(String(decoding: request.body, as: UTF8.self).dropFirst(2)) ?? -1
        lock.withLock {
            if keys.insert(key).inserted { applied.append(version) } else { repeats += 1 }
        }
        return LoopbackResponse(status: 201)
    }
}

/// `requests-bench outbox-coalesce-child --dir D --url U --start S --entries N --threads T`: saves versions S..<N.
func runOutboxCoalesceChild(_ arguments: [String]) -> Never {
    var values: [String: String] = [:]
    var rest = arguments[...]
    while let flag = rest.popFirst() { values[flag] = rest.popFirst() }
    guard let directory = values["--dir"], let url = values["--url"], let start = values["--start"].flatMap({ Int($0) }),
        let entries = values["--entries"].flatMap({ Int($0) }), let threads = values["--threads"].flatMap({ Int($0) })
    else { fail("outbox-coalesce-child: --dir, --url, --start, --entries and --threads are required", code: 2) }
    let outbox = openChildOutbox(directory, lanes: 1, requestTypes: [OutboxPost.self])
    let saves = SaveCounter(start)
    let group = DispatchGroup()
    for _ in 0..<max(1, threads) {
        group.enter()
        Thread {
            while true {
                let saved: Bool = saves.lock.withLock {
                    let version = saves.next
                    guard version < entries else { return false }
                    saves.next += 1
                    do {
                        try outbox.enqueue(OutboxPost(url: url, body: "v:\(version)"), replacing: "draft")
                    } catch {
                        fail("outbox-coalesce-child: save \(version) failed: \(error)", code: 1)
                    }
                    tell("ack \(version)")
                    return true
                }
                if !saved { break }
            }
            group.leave()
        }.start()
    }
    group.wait()
    tell("enqueued")
    finishOutboxChild(outbox, entries: entries)
}

/// The next version to save, and the app's lock around a save.
private final class SaveCounter: @unchecked Sendable {
    let lock = NSLock()
    var next: Int
    init(_ next: Int) { self.next = next }
}

/// `requests-bench outbox-coalesce-kill …`: runs the test with its own loopback server, prints the table, exits 1 on
/// a violation.
func runOutboxCoalesceKillCommand(_ arguments: [String]) -> Never {
    var saves = 10_000
    var threads = 8
    var kills = 20
    var seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xFFFF_FFFF
    var flags = FlagReader(arguments, mode: "outbox-coalesce-kill")
    while let flag = flags.nextFlag() {
        switch flag {
        case "--saves": saves = max(1, flags.number(flag))
        case "--threads": threads = max(1, flags.number(flag))
        case "--kills": kills = flags.number(flag)
        case "--seed": seed = UInt64(flags.number(flag))
        default: fail("outbox-coalesce-kill: unknown argument \(flag)", code: 2)
        }
    }
    guard let server = try? LoopbackServer() else { fail("outbox-coalesce-kill: could not start the loopback server", code: 2) }
    log("outbox-coalesce-kill: \(saves) saves from \(threads) threads, \(kills) kills, seed \(seed)…")
    let ledger = DraftLedger()
    server.route("/draft") { ledger.handle($0) }
    let url = server.url("/draft").absoluteString
    let rounds = runKillRounds(KillRoundSettings(entries: saves, kills: kills, seed: seed), mode: "outbox-coalesce-child") {
        ["--dir", $0.path, "--url", url, "--start", String($1), "--entries", String(saves), "--threads", String(threads)]
    }
    server.stop()
    let (applied, repeats) = ledger.snapshot
    let backwards = zip(applied, applied.dropFirst()).filter { $0.1 < $0.0 }
    let lastAcked = rounds.acked.max() ?? -1
    func check(_ ok: Bool) -> Verdict { ok ? .pass : .violated }
    func count(_ value: Int) -> String { grouped(Double(value)) }
    var section = Section(
        name: "Outbox coalescing kill test",
        title: "Issue 48. Outbox coalescing: \(count(saves)) saves of one draft from \(threads) threads, \(count(rounds.kills)) SIGKILLs, "
            + "\(count(rounds.children)) child processes",
        rows: [])
    section.rows.append(
        Row(
            measure: "An older draft applied after a newer one", library: count(backwards.count),
            baseline: backwards.prefix(3).map { "\($0.0) then \($0.1)" }.joined(separator: "; "),
            comparison: "\(count(applied.count)) drafts applied of \(count(saves)) saves; \(count(repeats)) repeat deliveries", goal: "0",
            verdict: check(backwards.isEmpty)))
    section.rows.append(
        Row(
            measure: "The last acknowledged draft arrived", library: applied.last == lastAcked ? "yes" : "no",
            baseline: "last applied \(applied.last.map(String.init) ?? "none")", comparison: "last acknowledged \(lastAcked) of \(saves - 1)",
            goal: "yes", verdict: check(applied.last == lastAcked && lastAcked == saves - 1)))
    section.rows.append(rounds.childProcessesRow)
    section.notes.append(
        "Kills: \(rounds.killsByPhaseText); drafts found pending on open \(count(rounds.resumed)); elapsed \(fixed(rounds.seconds, 1)) s "
            + "(\(fixed(Double(saves) / max(rounds.seconds, 1e-9), 0)) saves/s with the children's start-ups); seed \(seed).")
    finishBenchCommand(section, success: "Never an older draft after a newer one; the last one arrived.")
}
#endif
