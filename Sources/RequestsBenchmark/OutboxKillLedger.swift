#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
import RequestsTestServer

/// The kill test's server side: records each delivery's `Idempotency-Key` and body (`lane:seq`), applies a key the
/// first time it arrives (later deliveries of it are deduplicated repeats, answered 201 like the first), and answers
/// some first deliveries 503 instead, without applying them, so that retries happen.
final class OutboxKillLedger: @unchecked Sendable {
    /// One application: the key, and the entry its body names.
    struct Application {
        let key: String
        let lane: String
        let seq: Int
    }

    private let lock = NSLock()
    private let refusalRate: Double
    private var random: SplitMix64
    private var bodies: [String: String] = [:]
    private var applied: Set<String> = []
    private var order: [Application] = []
    private var keysBySeq: [Int: [String]] = [:]
    private var deliveryCount = 0
    private var repeatCount = 0
    private var refusedCount = 0
    private var conflictCount = 0
    private var conflictExamples: [String] = []
    private var malformedCount = 0

    init(refusalRate: Double, seed: UInt64) {
        self.refusalRate = refusalRate
        random = SplitMix64(seed: seed)
    }

    /// The route's handler.
    func handle(_ request: LoopbackRequest) -> LoopbackResponse {
        let header = request.headers.first { $0.key.lowercased() == "idempotency-key" }?.value ?? ""
        // The header is a structured-field string: the key in double quotes.
        let key = header.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        let body = String(decoding: request.body, as: UTF8.self)
        let parsed = Self.parse(body)
        return lock.withLock {
            deliveryCount += 1
            guard !key.isEmpty, let (lane, seq) = parsed else {
                malformedCount += 1
                return LoopbackResponse(status: 400, body: Data("no Idempotency-Key, or a body that is not lane:seq".utf8))
            }
            if let first = bodies[key], first != body {
                conflictCount += 1
                if conflictExamples.count < 3 { conflictExamples.append("\(key): \(first) then \(body)") }
            } else if bodies[key] == nil {
                bodies[key] = body
            }
            if applied.contains(key) {
                repeatCount += 1
                return LoopbackResponse(status: 201)
            }
            if refusalRate > 0, random.nextDouble() < refusalRate {
                refusedCount += 1
                return LoopbackResponse(status: 503, body: Data("try again".utf8))
            }
            applied.insert(key)
            order.append(Application(key: key, lane: lane, seq: seq))
            keysBySeq[seq, default: []].append(key)
            return LoopbackResponse(status: 201)
        }
    }

    /// `lane-3:17` → ("lane-3", 17).
    static func parse(_ body: String) -> (String, Int)? {
        guard let colon = body.lastIndex(of: ":"), let seq = Int(body[body.index(after: colon)...]) else { return nil }
        return (String(body[..<colon]), seq)
    }

    /// What the server saw, for the checks.
    struct Snapshot {
        var order: [Application]
        var keysBySeq: [Int: [String]]
        var deliveries: Int
        var repeats: Int
        var refused: Int
        var conflicts: Int
        var conflictExamples: [String]
        var malformed: Int
    }

    var snapshot: Snapshot {
        lock.withLock {
            Snapshot(
                order: order, keysBySeq: keysBySeq, deliveries: deliveryCount, repeats: repeatCount, refused: refusedCount,
                conflicts: conflictCount, conflictExamples: conflictExamples, malformed: malformedCount)
        }
    }
}

/// What the kill test's checks found.
struct OutboxKillVerdicts {
    /// Acknowledged seqs that the server never applied.
    var lost: [Int] = []
    /// Applications beyond what re-enqueues allow: a doubled effect.
    var doubled: [Int] = []
    /// Extra keys applied for a seq, each allowed because a child was started at that seq (a re-enqueue of an entry
    /// that was durable but not acknowledged when its child was killed).
    var reenqueues = 0
    /// Applications of a seq after a larger seq of its lane had been applied: lane order broken.
    var inversionCount = 0
    /// The first few of them.
    var inversions: [String] = []
    /// Seqs applied that were never enqueued (out of range).
    var strays = 0

    /// Checks the server's record against the acknowledgements. `startedAt[s]`: how many children were started with
    /// `--start s`.
    init(snapshot: OutboxKillLedger.Snapshot, acked: Set<Int>, entries: Int, startedAt: [Int: Int]) {
        lost = acked.filter { (snapshot.keysBySeq[$0] ?? []).isEmpty }.sorted()
        for (seq, keys) in snapshot.keysBySeq {
            guard (0..<entries).contains(seq) else {
                strays += keys.count
                continue
            }
            // A seq is enqueued by the child that first reaches it and again by every child started at it (each starts
            // after the highest acknowledged seq); no other child enqueues it.
            let allowed = (seq > 0 ? 1 : 0) + (startedAt[seq] ?? 0)
            let bound = max(1, allowed)
            if keys.count > bound { doubled.append(seq) }
            reenqueues += min(keys.count, bound) - 1
        }
        doubled.sort()
        var lastSeq: [String: Int] = [:]
        for application in snapshot.order {
            if let last = lastSeq[application.lane], application.seq < last {
                inversionCount += 1
                if inversions.count < 5 { inversions.append("\(application.lane): \(application.seq) after \(last)") }
            }
            lastSeq[application.lane] = max(application.seq, lastSeq[application.lane] ?? application.seq)
        }
    }
}

/// The cancel storm's seeded generator, so that a run can be repeated with `--seed`.
typealias SplitMix64 = StormRandom

extension StormRandom {
    /// A double in [0, 1).
    mutating func nextDouble() -> Double { Double(next() >> 11) / Double(1 << 53) }
}

/// Reads a mode's `--flag value` arguments; a missing value or a bad number ends the process (status 2) with a
/// message naming the mode and the flag.
struct FlagReader {
    private var remaining: ArraySlice<String>
    private let mode: String

    init(_ arguments: [String], mode: String) {
        remaining = arguments[...]
        self.mode = mode
    }

    mutating func nextFlag() -> String? { remaining.popFirst() }

    mutating func value(_ flag: String) -> String {
        guard let next = remaining.popFirst(), !next.hasPrefix("--") else { fail("\(mode): \(flag) needs a value", code: 2) }
        return next
    }

    /// A whole number ≥ 0.
    mutating func number(_ flag: String) -> Int {
        let text = value(flag)
        guard let number = Int(text), number >= 0 else { fail("\(mode): \(flag): not a number: \(text)", code: 2) }
        return number
    }
}
#endif
