#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

/// What one cell of the lab did: its outcome, how long it took, and what broke the rules.
struct LabCellResult {
    let row: LabRow
    let column: LabColumn
    let kind: LabKind
    var outcome = "no outcome"
    var elapsed: TimeInterval = 0
    var arrivals = ""
    var problems: [String] = []

    var name: String { "\(row.rawValue) × \(kind.rawValue) × \(column.rawValue)" }
}

/// Waits for a semaphore on a thread of its own; `false` after `seconds`.
private func wait(_ semaphore: DispatchSemaphore, seconds: TimeInterval) -> Bool {
    semaphore.wait(timeout: .now() + seconds) == .success
}

/// Polls `condition` for up to `seconds` (for releases, which follow the completion on other threads).
private func eventually(_ seconds: TimeInterval = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() > deadline { return false }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return true
}

/// Runs the cells of the lab: each on its own server and session, so cells can run side by side.
enum LabCellRunner {
    /// The session's timeout where the server never answers (Linux rounds timeouts down to whole seconds).
    static let faultTimeout: TimeInterval = 1
    /// Everywhere else: a hang then ends at this timeout, beyond the cell's bound.
    static let hangTimeout: TimeInterval = 4
    /// How long a cell may take: its fault's own time (the timeout of a server that never answers) plus one second.
    static func bound(for row: LabRow) -> TimeInterval { (row.waitsForTimeout ? faultTimeout : 0) + 1 }

    static func run(_ row: LabRow, _ column: LabColumn, _ kind: LabKind) -> LabCellResult {
        var result = LabCellResult(row: row, column: column, kind: kind)
        guard let server = try? LoopbackServer() else {
            result.problems.append("no server")
            return result
        }
        defer { server.stop() }
        LabRoutes.install(on: server)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = row.waitsForTimeout ? faultTimeout : hangTimeout
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        server.connectionPolicy = row.policy(column)

        if column == .reused {
            // Through the library, as the cell's request: the library sends on a session derived from this one, whose
            // connections a plain task of `session` would not share.
            let done = DispatchSemaphore(value: 0)
            let warmUp = Box<Result<Data, Error>>()
            OperationQueue().addRequest(GetData(url: server.url("/lab/warm-up")), session: session) {
                warmUp.value = $0.mapError { $0 }
                done.signal()
            }
            guard wait(done, seconds: 10), warmUp.value?.success != nil else {
                result.problems.append("the warm-up failed: \(String(describing: warmUp.value))")
                return result
            }
            // The race itself, not a margin: the next request leaves as the server's idle time runs out.
            if row == .closeAfterIdle { Thread.sleep(forTimeInterval: Double(LabRow.idleMilliseconds) / 1000) }
        }

        let start = Date()
        let outcome = kind == .outbox ? runOutbox(server, session, &result) : runRequest(kind, server, session, &result)
        result.elapsed = Date().timeIntervalSince(start)
        check(outcome, server: server, into: &result)
        return result
    }

    /// Checks the outcome against the contract, and what the server saw of the cell's requests.
    private static func check(_ outcome: Result<Data?, Error>?, server: LoopbackServer, into result: inout LabCellResult) {
        let (row, column, kind) = (result.row, result.column, result.kind)
        let expected = LabExpectation.of(row, column, kind)
        let code = ((outcome?.failure) as? URLError)?.code
        switch (outcome, expected) {
        case (nil, _):
            result.outcome = "no completion"
        case (.success?, _):
            result.outcome = "success"
        case (.failure(let error)?, _):
            result.outcome = FaultMatrixTests.describe(error)
        }
        let succeeded = outcome?.success != nil
        switch expected {
        case .success where !succeeded,
            .error where code.map({ !expected.codes.contains($0) }) ?? true,
            .successOrError where !succeeded && code.map({ !expected.codes.contains($0) }) ?? true:
            result.problems.append("ended with \(result.outcome), expected \(expected.text)")
        default:
            break
        }
        let bound = bound(for: row)
        if result.elapsed > bound {
            result.problems.append("took \(String(format: "%.2f", result.elapsed)) s, more than \(bound) s")
        }
        // A successful upload: the server read the whole body.
        if succeeded, kind.bodyLength != nil, kind != .outbox, let data = outcome?.success ?? nil {
            if String(decoding: data, as: UTF8.self) != #"{"bytes":\#(LabRoutes.uploadLength)}"# {
                result.problems.append("the answer says \(String(decoding: data, as: UTF8.self))")
            }
        }

        let seen = server.arrivals.filter { $0.path == kind.path || $0.method.isEmpty }
        result.arrivals = seen.map(describe).joined(separator: ", ")
        let headOnly = seen.filter(\.isHeadWithoutBody)
        if !headOnly.isEmpty {
            result.problems.append("the server saw a head without its body: \(headOnly.map(describe).joined(separator: ", "))")
        }
        if !kind.isSafeToResend, LabExpectation.unsafeRequestsHaveConnectionsOfTheirOwn, let reused = seen.first(where: { !$0.method.isEmpty && $0.index > 1 }) {
            result.problems.append("a request that must not be sent twice rode a kept-alive connection: \(describe(reused))")
        }
        if kind.method == "POST", kind != .outbox, seen.filter(\.isComplete).count > 1 {
            result.problems.append("a POST arrived whole \(seen.filter(\.isComplete).count) times (applied twice)")
        }
        if kind == .outbox, Set(seen.compactMap(\.idempotencyKey)).count > 1 || seen.contains(where: { !$0.method.isEmpty && $0.idempotencyKey == nil }) {
            result.problems.append("the outbox's attempts did not all carry one Idempotency-Key")
        }
        // A request that arrived whole with another body: a re-send that lost (part of) its body.
        if let length = kind.bodyLength {
            let wrong = seen.filter { $0.isComplete && $0.bodyBytes != length }
            if !wrong.isEmpty { result.problems.append("the server got a whole request with a wrong body: \(wrong.map(describe).joined(separator: ", "))") }
        }
    }

    /// `c2#1 POST whole answered` and the like: connection, place on it, method, body, answered.
    static func describe(_ arrival: LoopbackArrival) -> String {
        let body: String
        switch arrival.body {
        case .pending: body = "head only (waiting)"
        case .complete: body = arrival.bodyBytes > 0 || arrival.contentLength == 0 ? "whole" : "whole, empty body"
        case .cut(let received): body = "cut at \(received) B"
        case .stoppedByServer(let received): body = "stopped at \(received) B"
        case .notRead: body = "not read"
        }
        let method = arrival.method.isEmpty ? "" : arrival.method + " "
        return "c\(arrival.connection)#\(arrival.index) \(method)\(body)\(arrival.answered ? " answered" : "")"
    }

    // MARK: - The kinds

    private static func runRequest(_ kind: LabKind, _ server: LoopbackServer, _ session: URLSession, _ result: inout LabCellResult) -> Result<
        Data?, Error
    >? {
        let url = server.url(kind.path)
        let queue = OperationQueue()
        let completions = Recorder<Result<Data?, Error>>()
        let done = DispatchSemaphore(value: 0)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("lab-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        weak var weakOperation: Operation?
        weak var weakSentinel: Sentinel?
        do {
            let sentinel = Sentinel()
            weakSentinel = sentinel
            let finish: @Sendable (Result<Data?, Error>) -> Void = { outcome in
                withExtendedLifetime(sentinel) { completions.append(outcome) }
                done.signal()
            }
            let operation: Operation
            switch kind {
            case .data:
                operation = queue.addRequest(GetData(url: url), session: session) { finish($0.map { $0 }.mapError { $0 }) }
            case .decodable:
                operation = queue.addRequest(GetDecodable<ServedRecipe>(url: url), session: session) { finish($0.map { _ in nil }.mapError { $0 }) }
            case .noContent:
                operation = queue.addRequest(SendNoContent(url: url), session: session) { finish($0.map { _ in nil }.mapError { $0 }) }
            case .uploadDataPUT, .uploadDataPOST:
                let request = LabUpload(url: url, method: kind.method, uploadBody: .data(LabRoutes.uploadBody))
                operation = queue.addRequest(request, session: session) { finish($0.map { $0 }.mapError { $0 }) }
            case .uploadFilePUT, .uploadFilePOST:
                let request = LabUpload(url: url, method: kind.method, uploadBody: .file(LabRoutes.uploadFile))
                operation = queue.addRequest(request, session: session) { finish($0.map { $0 }.mapError { $0 }) }
            case .download:
                let request = Download(url: url, destination: folder.appendingPathComponent("file"))
                operation = queue.addRequest(request, session: session) { finish($0.map { _ in nil }.mapError { $0 }) }
            case .resumable:
                let request = FileDownload(url: url, destination: folder.appendingPathComponent("file"))
                // The state of a cut download is dropped with its bytes: nothing resumes it here.
                operation = queue.addRequest(request, resumingFrom: nil, session: session) { outcome, state in
                    state?.discard()
                    finish(outcome.map { _ in nil })
                }
            case .stream:
                operation = queue.addRequest(LabChunks(url: url), session: session, receive: { _ in }) { finish($0.map { _ in nil }.mapError { $0 }) }
            case .events:
                operation = queue.addRequest(LabEvents(url: url), session: session, receive: { _ in }) { finish($0.map { _ in nil }.mapError { $0 }) }
            case .outbox:
                return nil
            }
            weakOperation = operation
            // A hard cap well past any bound: the elapsed time is compared with the bound afterwards.
            guard wait(done, seconds: 20) else {
                result.problems.append("no completion within 20 s")
                operation.cancel()
                return nil
            }
            if !eventually(5, { operation.isFinished }) { result.problems.append("the operation did not finish") }
        }
        if !eventually(5, { weakOperation == nil }) { result.problems.append("the operation was not released") }
        if !eventually(5, { weakSentinel == nil }) { result.problems.append("the completion closure was not released") }
        if completions.count != 1 { result.problems.append("\(completions.count) completions") }
        return completions.values.first
    }

    private static func runOutbox(_ server: LoopbackServer, _ session: URLSession, _ result: inout LabCellResult) -> Result<Data?, Error>? {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("lab-outbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        var options = OutboxOptions()
        options.baseDelay = 0.01
        options.maxDelay = 0.2
        let outbox: Outbox
        do {
            outbox = try Outbox(directory: folder, queue: OperationQueue(), session: session, requestTypes: [LabNote.self], options: options)
        } catch {
            result.problems.append("the outbox did not open: \(error)")
            return nil
        }
        defer { outbox.close() }
        let settled = DispatchSemaphore(value: 0)
        let outcome = Box<Result<Data?, Error>>()
        let stream = outbox.changes
        let watcher = Task {
            for await change in stream {
                switch change.kind {
                case .sent: outcome.value = .success(nil)
                case .parked: outcome.value = .failure(RequestQueueError.misuse("parked: \(String(describing: change.entry.deadLetter))"))
                default: continue
                }
                settled.signal()
                return
            }
        }
        defer { watcher.cancel() }
        do {
            _ = try outbox.enqueue(LabNote(url: server.url(LabKind.outbox.path).absoluteString))
        } catch {
            result.problems.append("enqueue failed: \(error)")
            return nil
        }
        guard wait(settled, seconds: 20) else {
            result.problems.append("not sent within 20 s")
            return nil
        }
        return outcome.value
    }
}

extension LabExpectation {
    var codes: Set<URLError.Code> {
        switch self {
        case .success: return []
        case .error(let codes), .successOrError(let codes): return codes
        }
    }
}
