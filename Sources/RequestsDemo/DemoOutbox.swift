#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The demo's outbox step: a child process (`requests-demo --outbox-child …`) writes notes into an outbox, is
// SIGKILLed half-way, and a second child on the same folder sends what the first left on disk.

/// A note POSTed to /demo/notes: `run:number`, with the outbox's Idempotency-Key.
struct DemoNote: OutboxRequest, NoContentRequest {
    let run: String
    let number: Int
    var identifier: String { "note-\(number)" }
    var validHTTPStatusCodes: [Int] { [200, 201] }
    var shouldEnforceNoContent: Bool { false }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: DemoServer.url("/demo/notes"))
        request.httpMethod = "POST"
        request.httpBody = Data("\(run):\(number)".utf8)
        completion(.success(request))
    }
}

/// The server's side of the notes: applies each Idempotency-Key once, and tells per run what it applied.
final class NotesLedger: @unchecked Sendable {
    /// What the server did with one run's notes: the note numbers in the order they were applied (one per key), and
    /// the deliveries of a key it had already applied.
    struct Report: Codable {
        var applied: [Int] = []
        var repeats = 0
    }

    private let lock = NSLock()
    private var keys: Set<String> = []
    private var reports: [String: Report] = [:]

    /// POST /demo/notes: 201 for a new key (applied) and for a known one (a repeat, not applied again).
    func receive(_ request: LoopbackRequest) -> LoopbackResponse {
        let key = request.headers["idempotency-key"] ?? ""
        let parts = String(decoding: request.body, as: UTF8.self).split(separator: ":")
        guard !key.isEmpty, parts.count == 2, let number = Int(parts[1]) else { return .text("bad note", status: 400) }
        let run = String(parts[0])
        lock.withLock {
            if keys.insert(key).inserted {
                reports[run, default: Report()].applied.append(number)
            } else {
                reports[run, default: Report()].repeats += 1
            }
        }
        var response = LoopbackResponse(status: 201)
        // A slow server, so that notes wait in the outbox while the writer goes on.
        response.delayMilliseconds = 100
        return response
    }

    func report(run: String) -> Report { lock.withLock { reports[run] ?? Report() } }

    static let shared = NotesLedger()

    static func addRoutes(to server: LoopbackServer) {
        server.route("/demo/notes") { shared.receive($0) }
        server.route("/demo/notes/report") { request in
            let report = shared.report(run: request.query["run"] ?? "")
            return .json(String(decoding: (try? JSONEncoder().encode(report)) ?? Data("{}".utf8), as: UTF8.self))
        }
    }
}

/// The server's report for a run, fetched over HTTP so that it works with `--url` too.
func fetchNotesReport(run: String, session: URLSession) -> NotesLedger.Report? {
    final class Box: @unchecked Sendable { var report: NotesLedger.Report? }
    let box = Box()
    let done = DispatchSemaphore(value: 0)
    session.dataTask(with: DemoServer.url("/demo/notes/report?run=\(run)")) { data, _, _ in
        box.report = data.flatMap { try? JSONDecoder().decode(NotesLedger.Report.self, from: $0) }
        done.signal()
    }.resume()
    _ = done.wait(timeout: .now() + 10)
    return box.report
}

/// `requests-demo --outbox-child --url BASE --dir DIR --run RUN --from N --count C`: opens the outbox on DIR, writes
/// `open P` (P notes found pending), enqueues notes N..<C (skipping those already pending), writes `ack n` after each
/// enqueue has returned, waits until all were sent, writes `drained`.
func runOutboxDemoChild(_ arguments: [String]) -> Never {
    var values: [String: String] = [:]
    var index = 0
    while index + 1 < arguments.count {
        values[arguments[index]] = arguments[index + 1]
        index += 2
    }
    guard let base = values["--url"].flatMap(URL.init(string:)), let folder = values["--dir"], let run = values["--run"],
        let from = values["--from"].flatMap(Int.init), let count = values["--count"].flatMap(Int.init)
    else {
        FileHandle.standardError.write(Data("--outbox-child needs --url --dir --run --from --count\n".utf8))
        exit(2)
    }
    DemoServer.baseURL = base
    let parent = getppid()
    Thread {
        while getppid() == parent { usleep(50_000) }
        exit(3)
    }.start()
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    var options = OutboxOptions()
    options.baseDelay = 0.05
    let outbox: Outbox
    do {
        outbox = try Outbox(
            directory: URL(fileURLWithPath: folder), queue: OperationQueue(), session: URLSession(configuration: configuration),
            requestTypes: [DemoNote.self], options: options)
    } catch {
        say("error \(error)")
        exit(1)
    }
    let pending = Set(outbox.pendingEntries.compactMap { $0.request(as: DemoNote.self)?.number })
    say("open \(pending.count)")
    for number in from..<max(from, count) where !pending.contains(number) {
        do {
            try outbox.enqueue(DemoNote(run: run, number: number), lane: "notes")
        } catch {
            say("error \(error)")
            exit(1)
        }
        say("ack \(number)")
        usleep(30_000)  // a person writing notes
    }
    while outbox.pendingCount > 0 { usleep(10_000) }
    say("drained")
    outbox.close()
    exit(0)
}

// The outbox step starts child processes: Foundation's `Process`, which iOS, tvOS and watchOS do not have. The demo
// still builds there (an iOS build of the whole package builds the executables too), and says so when it runs.
#if os(macOS) || os(Linux)
/// A running demo child and the lines it wrote.
final class DemoChild: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var lines: [String] = []
    private var closed = false

    init(_ arguments: [String]) throws {
        process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["--outbox-child"] + arguments
        process.standardInput = FileHandle.nullDevice
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        Thread { [self] in
            var buffer = Data()
            while case let chunk = pipe.fileHandleForReading.availableData, !chunk.isEmpty {
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    lock.withLock { lines.append(line) }
                }
            }
            lock.withLock { closed = true }
        }.start()
    }

    var output: [String] { lock.withLock { lines } }
    var isClosed: Bool { lock.withLock { closed } }
    var acks: [Int] { output.compactMap { $0.hasPrefix("ack ") ? Int($0.dropFirst(4)) : nil } }
    var foundPending: Int? { output.first { $0.hasPrefix("open ") }.flatMap { Int($0.dropFirst(5)) } }
    var drained: Bool { output.contains("drained") }

    /// Kills the child if it is still running, and waits for it.
    func kill() {
        if process.isRunning { _ = sendKill(process.processIdentifier) }
        process.waitUntilExit()
    }
}

private func sendKill(_ pid: pid_t) -> Int32 { kill(pid, SIGKILL) }

/// Step 11: a child writes notes into an outbox and is killed half-way; a second child on the same folder sends what
/// the first left, and the server shows every acknowledged note applied once, in order.
@MainActor
func runOutboxStep(session: URLSession) {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("requests-demo-outbox-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: folder) }
    let run = String(UUID().uuidString.prefix(8)).lowercased()
    let count = 20
    let killAfter = Int.random(in: 7...11)
    func arguments(from: Int) -> [String] {
        ["--url", DemoServer.baseURL.absoluteString, "--dir", folder.path, "--run", run, "--from", String(from), "--count", String(count)]
    }
    /// Runs the main run loop while the child works, redrawing the notes it has stored.
    func watch(_ child: DemoChild, name: String, timeout: TimeInterval, until done: @escaping () -> Bool) {
        var shown = -1
        runUntil(timeout: timeout) {
            let acks = child.acks
            if acks.count != shown {
                shown = acks.count
                say("\r  \(name) stored notes: \(acks.map(String.init).joined(separator: " "))", terminator: "")
            }
            return done() || child.isClosed
        }
        say("")
    }
    let first: DemoChild
    do {
        first = try DemoChild(arguments(from: 0))
    } catch {
        return check(false, "could not start a child process: \(error)")
    }
    say("  child 1 (pid \(first.process.processIdentifier)) writes \(count) notes into an outbox; enqueue returns once a note is on disk")
    watch(first, name: "child 1", timeout: 30) { first.acks.count >= killAfter }
    first.kill()
    let firstAcks = first.acks
    let atKill = fetchNotesReport(run: run, session: session)
    say("  ☠ SIGKILL child 1 after it had stored \(firstAcks.count) notes; the server had applied \(atKill?.applied.count ?? 0) of them")
    let second: DemoChild
    do {
        second = try DemoChild(arguments(from: (firstAcks.max() ?? -1) + 1))
    } catch {
        return check(false, "could not start a child process: \(error)")
    }
    runUntil(timeout: 10) { second.foundPending != nil || second.isClosed }
    let found = second.foundPending ?? 0
    let pid = second.process.processIdentifier
    say("  child 2 (pid \(pid)) reopened the folder: \(found) notes pending (stored, no answer yet), sent again with their original keys")
    watch(second, name: "child 2", timeout: 60) { second.drained }
    second.kill()
    let acked = Set(firstAcks + second.acks)
    let report = fetchNotesReport(run: run, session: session) ?? NotesLedger.Report()
    say("  child 2 \(second.drained ? "sent everything and exited" : "did NOT finish")")
    say("  the server applied: \(report.applied.map(String.init).joined(separator: " "))")
    say("  repeat deliveries recognised by their Idempotency-Key (sent, but the answer never reached child 1): \(report.repeats)")
    let everyOnce = acked == Set(0..<count) && report.applied.sorted() == Array(0..<count)
    check(everyOnce, "every one of the \(acked.count) acknowledged notes reached the server exactly once")
    check(found > 0 && everyOnce, "child 2 found the notes child 1 had left in the outbox, and sent them")
    check(!report.applied.isEmpty && report.applied == report.applied.sorted(), "the notes were applied in the order they were written")
}
#else
/// Step 11 needs child processes, which this platform does not allow.
@MainActor
func runOutboxStep(session: URLSession) {
    say("  skipped: this step kills a child process that writes into an outbox, and only macOS and Linux can start one")
}
#endif
