#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// `requests-bench outbox-files-kill [--entries 1000] [--kills 100] [--min-kib 256] [--max-kib 4096] [--lanes 4]
// [--seed S]` (issue 48): entries with files survive SIGKILLs. Children (`outbox-files-child`) enqueue seq S..<N, each
// with a file of --min-kib to --max-kib random bytes (the same bytes for a seq in every child) sent as the body, the
// file's SHA-256 in a header; the server checks each body against it and answers a few first deliveries 503. The
// rounds are the kill test's (OutboxKillRounds.swift). Then: every acknowledged seq arrived with the right SHA-256,
// and the outbox's `files` folder is empty once all is sent.

/// The test's settings.
struct OutboxFilesKillSettings {
    var entries = 1_000
    var kills = 100
    var minimumKiB = 256
    var maximumKiB = 4_096
    var lanes = 4
    var seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xFFFF_FFFF

    init(_ arguments: [String], mode: String) {
        var flags = FlagReader(arguments, mode: mode)
        while let flag = flags.nextFlag() {
            switch flag {
            case "--entries": entries = max(1, flags.number(flag))
            case "--kills": kills = flags.number(flag)
            case "--min-kib": minimumKiB = max(0, flags.number(flag))
            case "--max-kib": maximumKiB = max(0, flags.number(flag))
            case "--lanes": lanes = max(1, flags.number(flag))
            case "--seed": seed = UInt64(flags.number(flag))
            case "--dir", "--url", "--start": _ = flags.value(flag)  // the child's own, read in runOutboxFilesChild
            default: fail("\(mode): unknown argument \(flag)", code: 2)
            }
        }
        maximumKiB = max(maximumKiB, minimumKiB)
    }

    /// The arguments a child gets, besides its own.
    var childArguments: [String] {
        ["--entries", String(entries), "--lanes", String(lanes), "--seed", String(seed), "--min-kib", String(minimumKiB), "--max-kib", String(maximumKiB)]
    }

    /// The size of seq's file.
    func size(of seq: Int) -> Int {
        var random = SplitMix64(seed: seed &+ UInt64(seq) &* 0x9E37_79B9)
        return Int.random(in: (minimumKiB * 1024)...(maximumKiB * 1024), using: &random)
    }

    /// Writes seq's file (the same bytes for the same seed and seq) and returns its SHA-256 in hexadecimal.
    func writeFile(of seq: Int, to url: URL) throws -> String {
        var random = SplitMix64(seed: seed ^ (UInt64(seq) &* 0xD6E8_FEB8_6659_FD93))
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else { throw CocoaError(.fileWriteUnknown) }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var hasher = SHA256()
        var left = size(of: seq)
        while left > 0 {
            let count = min(left, 1 << 20)
            var words = [UInt64](repeating: 0, count: (count + 7) / 8)
            for index in words.indices { words[index] = random.next() }
            let chunk = words.withUnsafeBytes { Data($0.prefix(count)) }
            hasher.update(chunk)
            try handle.write(contentsOf: chunk)
            left -= count
        }
        return SHA256.hex(hasher.finalize())
    }
}

/// The server's side: the SHA-256 of each body against its header; the seqs that arrived whole.
final class OutboxFilesLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var arrived = Set<Int>()
    private var hashes: [Int: String] = [:]
    private var refusedKeys = Set<String>()
    private(set) var deliveries = 0
    private(set) var refused = 0
    private(set) var mismatches: [String] = []
    private(set) var bytes = 0

    var snapshot: (arrived: Set<Int>, deliveries: Int, refused: Int, mismatches: [String], bytes: Int) {
        lock.withLock { (arrived, deliveries, refused, mismatches, bytes) }
    }

    func handle(_ request: LoopbackRequest) -> LoopbackResponse {
        var hasher = SHA256()
        hasher.update(request.body)
        let found = SHA256.hex(hasher.finalize())
        let expected = request.headers.first { $0.key.lowercased() == "x-content-sha256" }?.value ?? ""
        let key = request.headers.first { $0.key.lowercased() == "idempotency-key" }?.value ?? ""
        let seq = request.query["seq"].flatMap { Int($0) } ?? -1
        return lock.withLock {
            deliveries += 1
            bytes += request.body.count
            if found != expected || hashes[seq].map({ $0 != expected }) == true {
                mismatches.append("seq \(seq): \(request.body.count) bytes, SHA-256 \(found.prefix(12))…, expected \(expected.prefix(12))…")
            }
            hashes[seq] = expected
            // One first delivery in 32 is answered 503, so that retries send the file again.
            if !refusedKeys.contains(key), key.hashValue & 31 == 0 {
                refusedKeys.insert(key)
                refused += 1
                return LoopbackResponse(status: 503)
            }
            arrived.insert(seq)
            return LoopbackResponse(status: 201)
        }
    }
}

/// `requests-bench outbox-files-child …`: enqueues seq --start..<--entries with their files, one at a time in lane
/// `seq % lanes`, writing `ack <seq>` after each; then drains (see ``finishOutboxChild(_:entries:)``).
func runOutboxFilesChild(_ arguments: [String]) -> Never {
    let settings = OutboxFilesKillSettings(arguments, mode: "outbox-files-child")
    var values: [String: String] = [:]
    var rest = arguments[...]
    while let flag = rest.popFirst() { values[flag] = rest.popFirst() }
    guard let directory = values["--dir"], let url = values["--url"], let start = values["--start"].flatMap({ Int($0) }) else {
        fail("outbox-files-child: --dir, --url and --start are required", code: 2)
    }
    let outbox = openChildOutbox(directory, lanes: settings.lanes, requestTypes: [OutboxPost.self]) { $0.attemptTimeout = 60 }
    let scratch = URL(fileURLWithPath: directory).deletingLastPathComponent().appendingPathComponent("scratch-\(getpid())")
    try? FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    for seq in start..<max(start, settings.entries) {
        let file = scratch.appendingPathComponent("photo-\(seq).jpg")
        do {
            let sha256 = try settings.writeFile(of: seq, to: file)
            let lane = "lane-\(seq % settings.lanes)"
            try outbox.enqueue(
                OutboxPost(url: "\(url)?seq=\(seq)", fields: ["X-Content-SHA256": sha256]), lane: lane, files: .body(OutboxAttachment(file: file)))
            try FileManager.default.removeItem(at: file)
        } catch {
            fail("outbox-files-child: enqueue \(seq) failed: \(error)", code: 1)
        }
        tell("ack \(seq)")
    }
    tell("enqueued")
    try? FileManager.default.removeItem(at: scratch)
    finishOutboxChild(outbox, entries: settings.entries)
}

/// `requests-bench outbox-files-kill …`: runs the test with its own loopback server, prints the table, exits 1 on a
/// violation.
func runOutboxFilesKillCommand(_ arguments: [String]) -> Never {
    let settings = OutboxFilesKillSettings(arguments, mode: "outbox-files-kill")
    guard let server = try? LoopbackServer() else { fail("outbox-files-kill: could not start the loopback server", code: 2) }
    log("outbox-files-kill: \(settings.entries) entries of \(settings.minimumKiB)–\(settings.maximumKiB) KiB, \(settings.kills) kills, seed \(settings.seed)…")
    let ledger = OutboxFilesLedger()
    server.route("/outbox-files") { ledger.handle($0) }
    let url = server.url("/outbox-files").absoluteString
    let rounds = runKillRounds(KillRoundSettings(entries: settings.entries, kills: settings.kills, seed: settings.seed), mode: "outbox-files-child") {
        ["--dir", $0.path, "--url", url, "--start", String($1)] + settings.childArguments
    }
    server.stop()
    let seen = ledger.snapshot
    let missing = rounds.acked.subtracting(seen.arrived).sorted()
    func check(_ ok: Bool) -> Verdict { ok ? .pass : .violated }
    func count(_ value: Int) -> String { grouped(Double(value)) }
    var section = Section(
        name: "Outbox files kill test",
        title: "Issue 48. Outbox entries with files (\(settings.minimumKiB)–\(settings.maximumKiB) KiB): \(count(settings.entries)) entries, "
            + "\(count(rounds.kills)) SIGKILLs, \(count(rounds.children)) child processes",
        rows: [])
    section.rows.append(
        Row(
            measure: "Acknowledged entries arrived with their file", library: "\(count(rounds.acked.count - missing.count)) of \(count(rounds.acked.count))",
            baseline: missing.isEmpty ? "" : "missing: \(missing.prefix(5).map(String.init).joined(separator: ", "))",
            comparison: "acknowledged: \(count(rounds.acked.count)) of \(count(settings.entries))", goal: "all, and all acknowledged",
            verdict: check(missing.isEmpty && rounds.acked.count == settings.entries)))
    section.rows.append(
        Row(
            measure: "Deliveries whose body's SHA-256 was wrong", library: count(seen.mismatches.count), baseline: seen.mismatches.prefix(3).joined(separator: "; "),
            comparison: "\(count(seen.deliveries)) deliveries (\(count(seen.refused)) answered 503), \(grouped(Double(seen.bytes) / 1_048_576)) MiB",
            goal: "0", verdict: check(seen.mismatches.isEmpty)))
    section.rows.append(
        Row(
            measure: "Files left in the outbox's folder once all was sent", library: count(rounds.filesLeft.count),
            baseline: rounds.filesLeft.prefix(3).joined(separator: ", "), comparison: "", goal: "0", verdict: check(rounds.filesLeft.isEmpty)))
    section.rows.append(rounds.childProcessesRow)
    section.notes.append(
        "Kills: \(rounds.killsByPhaseText); entries found pending on open \(count(rounds.resumed)); elapsed \(fixed(rounds.seconds, 1)) s; seed \(settings.seed).")
    finishBenchCommand(section, success: "Every acknowledged file arrived whole; no file left.")
}
#endif
