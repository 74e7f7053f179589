#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
import RequestsOutbox
import RequestsTestServer

/// The outbox's goals (issue 37).
enum OutboxGoals {
    static let enqueuesPerSecond = 20_000.0
    static let p99Seconds = 0.005
    static let firstPostSeconds = 1.0
    static let bytesPerEntry = 2048.0
    /// Issue 47: enqueues ≥ this share of the journal alone's appends (same threads, same disk).
    static let shareOfJournal = 0.8
}

/// What the enqueue benchmark measured.
struct OutboxEnqueueFigures {
    var settings: OutboxEnqueueSettings
    /// One entry per call, every round pooled; and each round.
    var single = EnqueueRun()
    var singleRounds: [EnqueueRun] = []
    /// The journal alone, pooled and per round, and the size of the record it appends.
    var journal = EnqueueRun()
    var journalRounds: [EnqueueRun] = []
    var recordBytes = 0
    var batched = EnqueueRun()
    var fsyncPerSecond = Double.nan
    var fsyncMedian = Double.nan
    var reopen = ReopenFigures()
}

/// Runs the enqueue benchmark and the reopen measurement against `server`.
func measureOutboxEnqueue(_ settings: OutboxEnqueueSettings, server: LoopbackServer) -> OutboxEnqueueFigures {
    var figures = OutboxEnqueueFigures(settings: settings)
    let url = server.url("/outbox-enqueue").absoluteString
    (figures.fsyncPerSecond, figures.fsyncMedian) = measureFsync(count: settings.seconds < 1 ? 50 : 500)
    // The record an outbox stores for one of these entries (its seq has as many digits as most of the runs' have).
    let record = (try? BenchmarkJournal.sampleEntryRecord(OutboxNote(url: url, lane: "lane-0", seq: 10_000), lane: "lane-0")) ?? Data()
    figures.recordBytes = record.count
    for round in 1...settings.rounds {
        // Odd rounds start with the outbox, even ones with the journal alone.
        for outboxTurn in round % 2 == 1 ? [true, false] : [false, true] {
            if outboxTurn {
                let run = measureEnqueues(threads: settings.threads, seconds: settings.seconds, batch: 1, url: url)
                figures.singleRounds.append(run)
                log("  round \(round), enqueue(_:): \(grouped(run.entriesPerSecond)) entries/s, \(describeCalls(run, per: "entry"))")
            } else {
                let run = measureJournalAppends(threads: settings.threads, seconds: settings.seconds, record: record)
                figures.journalRounds.append(run)
                log("  round \(round), journal alone (\(record.count) B records): \(grouped(run.entriesPerSecond)) records/s, \(describeCalls(run, per: "record"))")
            }
        }
    }
    figures.single = .pooled(figures.singleRounds)
    figures.journal = .pooled(figures.journalRounds)
    figures.batched = measureEnqueues(threads: settings.threads, seconds: settings.seconds, batch: settings.batch, url: url)
    log("  enqueue(contentsOf:) × \(settings.batch): \(grouped(figures.batched.entriesPerSecond)) entries/s")
    figures.reopen = measureReopen(entries: settings.reopenEntries, server: server)
    return figures
}

private func milliseconds(_ seconds: Double) -> String { "\(fixed(seconds * 1000, 2)) ms" }

/// A run's CPU and latencies: `CPU 68 µs per entry, p50 0.63 ms, p99 6.94 ms`.
private func describeCalls(_ run: EnqueueRun, per unit: String) -> String {
    "CPU \(grouped(run.cpuMicrosecondsPerEntry)) µs per \(unit), p50 \(milliseconds(run.percentile(0.5))), p99 \(milliseconds(run.percentile(0.99)))"
}

/// The enqueue benchmark's table.
func outboxEnqueueSection(_ figures: OutboxEnqueueFigures) -> Section {
    let settings = figures.settings, single = figures.single, batched = figures.batched, reopen = figures.reopen
    let threads = "\(settings.threads) thread\(settings.threads == 1 ? "" : "s")"
    var section = Section(
        name: "Outbox enqueue",
        title: "12b. Outbox: durable enqueues from \(threads) for \(fixed(settings.seconds, 1)) s into a suspended outbox, against the journal alone; "
            + "reopening with \(grouped(Double(settings.reopenEntries))) pending",
        rows: [])
    let fsyncFloor = "\(grouped(figures.fsyncPerSecond)) fsyncs/s (1 thread, 128 B write + fsync)"
    let perFsync = single.entriesPerSecond / figures.fsyncPerSecond
    let rounds = figures.singleRounds.count
    let perRound = { (runs: [EnqueueRun], figure: (EnqueueRun) -> Double) in runs.map { fixed(figure($0), 2) }.joined(separator: ", ") }
    section.rows.append(
        Row(
            measure: "\(threads), enqueue(_:), one entry per call (\(rounds) run\(rounds == 1 ? "" : "s"))",
            library: "\(grouped(single.entriesPerSecond)) entries/s", baseline: fsyncFloor, comparison: "\(fixed(perFsync, 1)) × the fsync rate",
            goal: "≥ \(grouped(OutboxGoals.enqueuesPerSecond))/s",
            verdict: verdict([single.entriesPerSecond], passes: single.entriesPerSecond >= OutboxGoals.enqueuesPerSecond)))
    // Issue 47: against the journal alone, round by round (each pair alternates which runs first).
    let ratios = zip(figures.singleRounds, figures.journalRounds).map { $0.entriesPerSecond / $1.entriesPerSecond }
    let ratio = median(ratios)
    section.rows.append(
        Row(
            measure: "\(threads), the journal alone: one \(figures.recordBytes) B entry record per append "
                + "(\(figures.journalRounds.count) run\(figures.journalRounds.count == 1 ? "" : "s"), alternating)",
            library: "enqueue \(grouped(single.entriesPerSecond))/s", baseline: "journal \(grouped(figures.journal.entriesPerSecond)) records/s",
            comparison: "enqueue ÷ journal \(fixed(ratio, 3)) (per round: \(ratios.map { fixed($0, 3) }.joined(separator: ", "))); CPU per entry "
                + "\(grouped(single.cpuMicrosecondsPerEntry)) µs, journal \(grouped(figures.journal.cpuMicrosecondsPerEntry)) µs",
            goal: "≥ \(fixed(OutboxGoals.shareOfJournal, 1))×", verdict: verdict([ratio], passes: ratio >= OutboxGoals.shareOfJournal)))
    section.rows.append(
        Row(
            measure: "enqueue(_:) latency per call", library: "p50 \(milliseconds(single.percentile(0.5))), p99 \(milliseconds(single.percentile(0.99)))",
            baseline: "journal alone: p50 \(milliseconds(figures.journal.percentile(0.5))), p99 \(milliseconds(figures.journal.percentile(0.99))); "
                + "fsync alone: median \(milliseconds(figures.fsyncMedian))",
            comparison: "\(grouped(Double(single.calls))) calls; p99 per round: \(perRound(figures.singleRounds) { $0.percentile(0.99) * 1000 }) ms",
            goal: "p99 < \(milliseconds(OutboxGoals.p99Seconds))",
            verdict: verdict([single.percentile(0.99)], passes: single.percentile(0.99) < OutboxGoals.p99Seconds)))
    section.rows.append(
        Row(
            measure: "\(threads), enqueue(contentsOf:), \(settings.batch) per call", library: "\(grouped(batched.entriesPerSecond)) entries/s",
            baseline: "", comparison: "\(fixed(batched.entriesPerSecond / single.entriesPerSecond, 1)) × one per call", goal: "",
            verdict: batched.entriesPerSecond.isFinite ? .info : .failed))
    section.rows.append(
        Row(
            measure: "enqueue(contentsOf:) latency per call", library: "p50 \(milliseconds(batched.percentile(0.5))), p99 \(milliseconds(batched.percentile(0.99)))",
            baseline: "", comparison: "\(grouped(Double(batched.calls))) calls", goal: "",
            verdict: batched.percentile(0.99).isFinite ? .info : .failed))
    section.rows.append(
        Row(
            measure: "Reopen with \(grouped(Double(reopen.entries))) pending → first POST at the server",
            library: milliseconds(reopen.firstPostSeconds), baseline: "Outbox.init took \(milliseconds(reopen.initSeconds))",
            comparison: "\(grouped(Double(reopen.resumed))) found pending", goal: "< \(fixed(OutboxGoals.firstPostSeconds, 0)) s",
            verdict: reopen.resumed == reopen.entries
                ? verdict([reopen.firstPostSeconds], passes: reopen.firstPostSeconds < OutboxGoals.firstPostSeconds) : .failed))
    section.rows.append(
        Row(
            measure: "Resident memory per pending entry", library: "\(grouped(reopen.bytesPerEntry)) B",
            baseline: "", comparison: "RSS delta of opening, suspended", goal: "< \(grouped(OutboxGoals.bytesPerEntry)) B",
            verdict: reopen.resumed == reopen.entries
                ? verdict([reopen.bytesPerEntry], passes: reopen.bytesPerEntry < OutboxGoals.bytesPerEntry) : .failed))
    section.notes.append(
        "Each thread enqueues into its own lane, in a loop, an `OutboxNote` (a Codable POST of `lane:seq`, about 120 bytes "
            + "encoded); the outbox is opened with `startsSuspended = true`, so nothing is sent meanwhile. Latency: the time of "
            + "one `enqueue` call, which returns once the entry is on disk. The folder is under \(FileManager.default.temporaryDirectory.path).")
    section.notes.append(
        "The journal alone: the same threads each append, one call at a time, the \(figures.recordBytes)-byte record an outbox stores "
            + "for such an entry (`OutboxRecord.encode`, via `BenchmarkJournal`), through the outbox's `Journal` (same options) in a "
            + "new folder beside the outbox's, for the same seconds; \(rounds) pair\(rounds == 1 ? "" : "s") of runs, odd ones starting with the outbox. "
            + "Entries/s: every round's entries ÷ their seconds; latencies: every call of every round; CPU: the process's "
            + "user + system time during the runs ÷ entries.")
    section.notes.append(
        "Reopen: \(grouped(Double(reopen.entries))) entries in 8 lanes, stored by an outbox that was then closed; "
            + "memory: \(ResourceUsage.residentSource), RSS before and after `Outbox.init` with `startsSuspended`; "
            + "first POST: from the start of a second, live `Outbox.init` to the arrival of its first request at the embedded server.")
    for (name, run) in [("enqueue(_:)", single), ("the journal alone", figures.journal), ("enqueue(contentsOf:)", batched)] where run.errors > 0 {
        section.notes.append("\(name) FAILED \(run.errors) times: \(run.firstError ?? "")")
    }
    if let problem = reopen.problem { section.notes.append("Reopen FAILED: \(problem)") }
    return section
}

/// `requests-bench outbox-enqueue …`: prints the table, exits 1 when a row has no number.
func runOutboxEnqueueCommand(_ arguments: [String]) -> Never {
    let settings = OutboxEnqueueSettings(arguments)
    guard let server = try? LoopbackServer() else { fail("outbox-enqueue: could not start the loopback server", code: 2) }
    log("outbox-enqueue: \(settings.threads) threads, \(settings.seconds) s per run, \(settings.rounds) rounds against the journal alone, reopen with \(settings.reopenEntries)…")
    let section = outboxEnqueueSection(measureOutboxEnqueue(settings, server: server))
    server.stop()
    print("")
    print(plainTextTable([section]))
    print("Command: \(benchCommandLine())")
    exit(section.missingNumbers.isEmpty ? 0 : 1)
}
#endif
