#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// `requests-bench outbox-child --dir D --url U --start S --entries N --lanes L`: the process the kill test
// (OutboxKill.swift) kills. It opens an outbox on D, enqueues seq S..<N one at a time in lane "lane-(seq % L)",
// writes `ack <seq>` after each enqueue has returned, then waits until nothing is pending and writes `drained`.

/// One entry of the outbox benchmarks: a POST of `lane:seq` to `url`, answered 201.
struct OutboxNote: OutboxRequest, NoContentRequest {
    var url: String
    var lane: String
    var seq: Int

    var identifier: String { "\(lane):\(seq)" }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var shouldEnforceNoContent: Bool { false }

    /// The body the server records: `lane:seq`.
    var body: String { "\(lane):\(seq)" }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        guard let target = URL(string: url) else { return completion(.failure(URLError(.badURL))) }
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        completion(.success(request))
    }
}

/// A session for the outbox benchmarks: ephemeral, no cache.
func makeOutboxSession(connections: Int) -> URLSession {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.httpMaximumConnectionsPerHost = max(1, connections)
    return URLSession(configuration: configuration)
}

/// Writes one line to standard output at once (no buffering), so that the parent reads it before a kill.
func tell(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The child's arguments.
private struct OutboxChildOptions {
    var directory = ""
    var url = ""
    var start = 0
    var entries = 0
    var lanes = 8

    init(_ arguments: [String]) {
        var flags = FlagReader(arguments, mode: "outbox-child")
        while let flag = flags.nextFlag() {
            switch flag {
            case "--dir": directory = flags.value(flag)
            case "--url": url = flags.value(flag)
            case "--start": start = flags.number(flag)
            case "--entries": entries = flags.number(flag)
            case "--lanes": lanes = max(1, flags.number(flag))
            default: fail("outbox-child: unknown argument \(flag)", code: 2)
            }
        }
        guard !directory.isEmpty, !url.isEmpty else { fail("outbox-child: --dir and --url are required", code: 2) }
    }
}

/// Exits when the parent goes away (it was killed, or stopped without killing this child), so no child is left.
private func exitWhenOrphaned() {
    let parent = getppid()
    let watchdog = Thread {
        while getppid() == parent { usleep(50_000) }
        _exit(3)
    }
    watchdog.start()
}

/// The child's main: never returns. Exit status 0 once drained; 1 if the outbox failed; 4 if it did not drain in
/// time; 5 if an entry was parked (the server never answers with a status that parks).
func runOutboxChild(_ arguments: [String]) -> Never {
    let options = OutboxChildOptions(arguments)
    let outbox = openChildOutbox(options.directory, lanes: options.lanes, requestTypes: [OutboxNote.self])
    for seq in options.start..<max(options.start, options.entries) {
        let lane = "lane-\(seq % options.lanes)"
        do {
            try outbox.enqueue(OutboxNote(url: options.url, lane: lane, seq: seq), lane: lane)
        } catch {
            fail("outbox-child: enqueue \(seq) failed: \(error)", code: 1)
        }
        tell("ack \(seq)")
    }
    tell("enqueued")
    finishOutboxChild(outbox, entries: options.entries)
}

/// A kill test child's start: exits when its parent goes away, opens the outbox on `directory` (retries after 5 ms,
/// `lanes` entries at once), and writes `open <pending> <parked> <skipped> <discarded>`; exits 1 if it cannot open.
func openChildOutbox(
    _ directory: String, lanes: Int, requestTypes: [any OutboxRequest.Type], configure: (inout OutboxOptions) -> Void = { _ in }
) -> Outbox {
    exitWhenOrphaned()
    let session = makeOutboxSession(connections: lanes)
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = lanes * 2
    var outboxOptions = OutboxOptions()
    outboxOptions.maximumConcurrentEntries = lanes
    outboxOptions.baseDelay = 0.005
    outboxOptions.maxDelay = 0.1
    configure(&outboxOptions)
    let outbox: Outbox
    do {
        outbox = try Outbox(directory: URL(fileURLWithPath: directory), queue: queue, session: session, requestTypes: requestTypes, options: outboxOptions)
    } catch {
        fail("outbox child: cannot open the outbox: \(error)", code: 1)
    }
    let report = outbox.openingReport
    tell("open \(report.pending) \(report.deadLetters) \(report.skippedRecords) \(report.discardedIncompleteRecord ? 1 : 0)")
    return outbox
}

/// Waits until `outbox` has sent everything, then writes `drained`, closes it and exits 0; exits 4 if that takes too
/// long, 5 if an entry was parked.
func finishOutboxChild(_ outbox: Outbox, entries: Int) -> Never {
    let deadline = ResourceUsage.now() + 120 + Double(entries) * 0.02
    while outbox.pendingCount > 0 {
        if !outbox.deadLetters.isEmpty { break }
        if ResourceUsage.now() > deadline {
            tell("hung \(outbox.pendingCount)")
            exit(4)
        }
        usleep(2_000)
    }
    let parked = outbox.deadLetters
    if !parked.isEmpty {
        tell("parked \(parked.count) \(parked.first.map { String(describing: $0.deadLetter?.reason) } ?? "")")
        exit(5)
    }
    tell("drained")
    outbox.close()
    exit(0)
}
#endif
