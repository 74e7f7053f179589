#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox

// The rounds of a kill test (outbox-kill, outbox-files-kill, outbox-coalesce-kill): child processes run one after
// another on one outbox folder, each SIGKILLed at a random moment (2–60 ms after it starts or after it opened the
// outbox, or after a random number of acknowledgements) and the next started with --start = the highest acknowledged
// seq + 1, until `kills` kills have landed; the last child runs until it has drained.

/// The entries of issue 48's benchmarks: a POST to `url` of `body` (none if `nil`) with the header `fields`,
/// answered 201.
struct OutboxPost: OutboxRequest, NoContentRequest {
    var url: String
    var body: String?
    var fields: [String: String] = [:]

    var identifier: String { url }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var shouldEnforceNoContent: Bool { false }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        guard let target = URL(string: url) else { return completion(.failure(URLError(.badURL))) }
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.httpBody = body.map { Data($0.utf8) }
        for (name, value) in fields { request.setValue(value, forHTTPHeaderField: name) }
        completion(.success(request))
    }
}

/// Prints `section` and the command, then `success` or the violations; exits 1 on a violation or a missed goal.
func finishBenchCommand(_ section: Section, success: String) -> Never {
    print("")
    print(plainTextTable([section]))
    print("Command: \(benchCommandLine())")
    let failed = section.violations + section.missedGoals
    print(failed.isEmpty ? success : "FAILED: " + failed.joined(separator: "; "))
    exit(failed.isEmpty ? 0 : 1)
}

/// How many entries the children make, how many kills land, and the seed of the kill moments.
struct KillRoundSettings {
    var entries: Int
    var kills: Int
    var seed: UInt64
}

/// What the rounds did.
struct KillRounds {
    var acked = Set<Int>()
    /// How many children were started at each seq.
    var startedAt: [Int: Int] = [:]
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
    /// The outbox folder's files left after the last child drained and closed (`outbox/files`).
    var filesLeft: [String] = []
}

extension KillRounds {
    /// The row that says whether every child was killed or drained.
    var childProcessesRow: Row {
        Row(
            measure: "Child processes", library: failures.isEmpty ? "as expected" : failures.joined(separator: "; "), baseline: "",
            comparison: "", goal: "killed or drained", verdict: failures.isEmpty ? .pass : .violated)
    }

    /// The kills in each phase, for a note.
    var killsByPhaseText: String {
        OutboxChildRun.Phase.allCases.map { "\($0.rawValue) \(grouped(Double(killsByPhase[$0] ?? 0)))" }.joined(separator: ", ")
    }
}

/// When to kill a child.
private enum KillPlan {
    /// After the delay, or once the child has made `cap` acknowledgements.
    case afterStart(milliseconds: Int, cap: Int)
    case afterOpen(milliseconds: Int, cap: Int)
    case afterAcks(Int)
}

/// Runs the rounds: `requests-bench <mode> <arguments(folder, start)>` children on one outbox folder (a new one,
/// removed at the end).
func runKillRounds(_ settings: KillRoundSettings, mode: String, arguments: (URL, Int) -> [String]) -> KillRounds {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("requests-\(mode)-\(getpid())-\(UUID().uuidString)")
    let outboxFolder = folder.appendingPathComponent("outbox")
    let errorFile = folder.appendingPathComponent("children.stderr")
    defer { try? FileManager.default.removeItem(at: folder) }
    var result = KillRounds()
    guard (try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)) != nil,
        FileManager.default.createFile(atPath: errorFile.path, contents: nil), let errors = try? FileHandle(forWritingTo: errorFile)
    else {
        result.failures.append("could not create \(folder.path)")
        return result
    }
    defer { try? errors.close() }
    var random = SplitMix64(seed: settings.seed)
    let began = ResourceUsage.now()
    // Enough rounds for every kill to land, even when some children finish before their kill comes.
    let maximumRounds = settings.kills * 3 + 10
    var round = 0
    var lastRan = false
    while result.failures.isEmpty, round < maximumRounds {
        round += 1
        let start = (result.acked.max() ?? -1) + 1
        let isLast = result.kills >= settings.kills || result.drainedEarly || round == maximumRounds
        let arguments = arguments(outboxFolder, start)
        let child: OutboxChildRun
        do {
            child = try OutboxChildRun(mode: mode, arguments: arguments, errors: errors)
        } catch {
            result.failures.append("could not start a child: \(error)")
            break
        }
        result.children += 1
        result.startedAt[start, default: 0] += 1
        if isLast {
            lastRan = true
            let status = child.waitForExit(timeout: 300 + Double(settings.entries) * 0.05)
            let state = child.state
            result.acked.formUnion(state.acks)
            result.resumed += state.openedWith ?? 0
            if status != 0 || !state.drained {
                let how = status.map { "exit status \($0)" } ?? "hung, killed after the timeout"
                result.failures.append("the last child did not drain: \(how); it said: \(state.otherLines.suffix(3).joined(separator: " / "))")
            }
            break
        }
        let plan = chooseKillPlan(&random, start: start, entries: settings.entries, killsLeft: settings.kills - result.kills)
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
        result.acked.formUnion(state.acks)
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
    result.filesLeft = (try? FileManager.default.contentsOfDirectory(atPath: outboxFolder.appendingPathComponent("files").path)) ?? []
    if !result.failures.isEmpty, let text = try? String(contentsOf: errorFile, encoding: .utf8), !text.isEmpty {
        result.failures.append("children's standard error ends: " + text.split(separator: "\n").suffix(3).joined(separator: " / "))
    }
    return result
}

/// A kill 2–60 ms after the child starts (20 %) or after it opened the outbox (40 %), or after a random number of
/// acknowledgements (40 %). Each child may make at most a random number up to its share of the remaining entries (half of it on
/// average), so the entries outlast the kills and every kill lands while a child enqueues and sends; kills planned
/// after the last acknowledgement land 1–10 ms after a child opened, while it sends what it found pending.
private func chooseKillPlan(_ random: inout SplitMix64, start: Int, entries: Int, killsLeft: Int) -> KillPlan {
    let remaining = entries - start
    guard remaining > 0 else { return .afterOpen(milliseconds: Int.random(in: 1...10, using: &random), cap: 1) }
    let delay = Int.random(in: 2...60, using: &random)
    let draw = random.nextDouble()
    let share = max(1, remaining / max(1, killsLeft))
    let cap = Int.random(in: 1...share, using: &random)
    if draw < 0.2 { return .afterStart(milliseconds: delay, cap: cap) }
    if draw < 0.6 { return .afterOpen(milliseconds: delay, cap: cap) }
    return .afterAcks(cap)
}

#endif
