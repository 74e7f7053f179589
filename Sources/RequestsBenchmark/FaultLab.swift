// requests-bench --fault-lab [--styles plain,delegate,library] [--rows NAMES] [--kinds NAMES] [--parallel N] [--warm-up get|same]
//
// --warm-up same: the request before the cell's on a reused connection is the cell's own (a GET by default).
//
// The reused-connection fault lab beside raw URLSession: every connection fault of the loopback server (ConnectionPolicy)
// on a fresh connection and on a kept-alive one, for a few request kinds, each sent with plain URLSession (completion
// handlers), with a delegate session, and through Requests, each cell in a child process (raw URLSession can crash
// here). Prints a Markdown table: what each ended with, when, and what the server saw. The full matrix of request
// kinds through Requests is `ReusedConnectionFaultTests`.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import RequestsTestServer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The rows: every ``ConnectionFault``, then a server that closes after one request, or after 100 ms idle.
struct FaultLabRow {
    let name: String
    let fault: ConnectionFault?
    let closeAfterRequests: Int?
    let idleMilliseconds: Int?

    static let all: [FaultLabRow] =
        ConnectionFault.allCases.map { FaultLabRow(name: $0.rawValue, fault: $0, closeAfterRequests: nil, idleMilliseconds: nil) } + [
            FaultLabRow(name: "close-after-1-request", fault: nil, closeAfterRequests: 1, idleMilliseconds: nil),
            FaultLabRow(name: "close-after-100-ms-idle", fault: nil, closeAfterRequests: nil, idleMilliseconds: 100),
        ]

    var waitsForTimeout: Bool { fault == .noResponse || fault == .stallAtStart }

    /// As in the tests: the cell's request is the first of a fresh connection or the second of a kept-alive one; a
    /// fault at the end hits the request before it; once in all.
    func policy(reused: Bool) -> ConnectionPolicy {
        if let closeAfterRequests { return ConnectionPolicy(closeAfterRequests: closeAfterRequests) }
        if let idleMilliseconds { return ConnectionPolicy(closeAfterIdleMilliseconds: idleMilliseconds) }
        let onRequest = !reused || fault?.isAtEnd == true ? 1 : 2
        return ConnectionPolicy(fault: fault, onRequest: onRequest, times: 1)
    }
}

private struct LabCellOutcome {
    var text: String
    var server: String
}

private func installLabRoutes(on server: LoopbackServer) {
    server.route("/lab/warm-up") { _ in .json(#"{"warm":true}"#) }
    server.route("/lab/json") { _ in .json(#"{"name":"Pancakes"}"#) }
    server.route("/lab/upload") { request in .json(#"{"bytes":\#(request.body.count)}"#) }
    server.route("/lab/bytes") { _ in LoopbackResponse(headers: ["Content-Type": "application/octet-stream"], body: Data(count: 65_536)) }
}

/// `c1#2 POST whole` for each request the server saw on the cell's path (the warm-up left out).
private func describeArrivals(_ arrivals: [LoopbackArrival], path: String) -> String {
    let seen = arrivals.filter { $0.path == path || $0.method.isEmpty }
    return seen.map { arrival in
        let body: String
        switch arrival.body {
        case .pending: body = "head only, waiting"
        case .complete:
            body = arrival.contentLength == 0 ? "whole" : arrival.bodyBytes == FaultLabBodies.length ? "whole" : "whole, body \(arrival.bodyBytes) B"
        case .cut(let received): body = "head, then \(received) B of body"
        case .stoppedByServer(let received): body = "stopped at \(received) B"
        case .notRead: body = "not read"
        }
        return "c\(arrival.connection)#\(arrival.index) \(arrival.method.isEmpty ? "" : arrival.method + " ")\(body)"
    }.joined(separator: ", ")
}

/// Runs one cell in a child; kills it after its timeout plus 5 s (a hang).
private func runCell(_ row: FaultLabRow, reused: Bool, kind: FaultLabKind, style: FaultLabStyle, warmUpSame: Bool) -> LabCellOutcome {
    guard let server = try? LoopbackServer() else { return LabCellOutcome(text: "no server", server: "") }
    defer { server.stop() }
    installLabRoutes(on: server)
    server.connectionPolicy = row.policy(reused: reused)
    let timeout = row.waitsForTimeout ? 1 : 4
    let errors = FileManager.default.temporaryDirectory.appendingPathComponent("fault-lab-\(getpid())-\(UUID().uuidString).stderr")
    // The child's temporary directory, removed with all it left (its body file, Foundation's download files), even
    // after a crash.
    let temporary = FileManager.default.temporaryDirectory.appendingPathComponent("fault-lab-\(getpid())-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
    defer {
        try? FileManager.default.removeItem(at: errors)
        try? FileManager.default.removeItem(at: temporary)
    }
    let output = Pipe()
    _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
    let process = Process()
    process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = [
        "--fault-lab-cell", kind.argument, style.argument, server.baseURL.absoluteString, String(timeout), reused ? (warmUpSame ? "2" : "1") : "0",
        String(reused ? row.idleMilliseconds ?? 0 : 0),
    ]
    var environment = ProcessInfo.processInfo.environment
    environment["TMPDIR"] = temporary.path
    process.environment = environment
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = output
    process.standardError = (try? FileHandle(forWritingTo: errors)) ?? FileHandle.nullDevice
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    let start = Date()
    do { try process.run() } catch { return LabCellOutcome(text: "could not start: \(error)", server: "") }
    var hung = false
    if exited.wait(timeout: .now() + .seconds(timeout + 5)) == .timedOut {
        hung = true
        kill(process.processIdentifier, SIGKILL)
        exited.wait()
    }
    let wall = Date().timeIntervalSince(start)
    let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    let seen = describeArrivals(server.arrivals, path: kind.path)
    if hung { return LabCellOutcome(text: String(format: "hang (killed after %.1f s)", wall), server: seen) }
    if process.terminationReason == .uncaughtSignal {
        let log = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
        let fatal = log.split(separator: "\n").first { $0.contains("Fatal error") }.map { " " + String($0.suffix(90)) } ?? ""
        return LabCellOutcome(text: "**crash** (signal \(process.terminationStatus))\(fatal)", server: seen)
    }
    guard let line = printed.split(separator: "\n").first(where: { $0.hasPrefix("RESULT ") }) else {
        return LabCellOutcome(text: "exit \(process.terminationStatus), no result", server: seen)
    }
    let parts = line.split(separator: " ")
    let outcome = parts.count > 1 ? parts[1].replacingOccurrences(of: "_", with: " ") : "?"
    let seconds = parts.count > 2 ? String(parts[2]) : "?"
    return LabCellOutcome(text: "\(outcome), \(seconds) s", server: seen)
}

func runFaultLab(_ arguments: [String]) -> Never {
    var styles = FaultLabStyle.allCases
    var rows = FaultLabRow.all
    var kinds = FaultLabKind.allCases
    var parallel = 6
    var warmUpSame = false
    var remaining = arguments[...]
    while let argument = remaining.popFirst() {
        let value = remaining.popFirst() ?? ""
        switch argument {
        case "--styles": styles = value.split(separator: ",").compactMap { FaultLabStyle.named(String($0)) }
        case "--rows": rows = rows.filter { value.split(separator: ",").map(String.init).contains($0.name) }
        case "--kinds": kinds = kinds.filter { value.split(separator: ",").map(String.init).contains($0.argument) }
        case "--parallel": parallel = max(1, Int(value) ?? parallel)
        case "--warm-up": warmUpSame = value == "same"
        default:
            print("usage: requests-bench --fault-lab [--styles plain,delegate,library] [--rows NAMES] [--kinds NAMES] [--parallel N] [--warm-up get|same]")
            exit(2)
        }
    }
    struct Cell {
        let row: FaultLabRow
        let reused: Bool
        let kind: FaultLabKind
        let style: FaultLabStyle
    }
    let cells = rows.flatMap { row in
        [false, true].flatMap { reused in kinds.flatMap { kind in styles.map { Cell(row: row, reused: reused, kind: kind, style: $0) } } }
    }
    let outcomes = LabOutcomes(count: cells.count)
    let sameWarmUp = warmUpSame
    let slots = DispatchSemaphore(value: parallel)
    let group = DispatchGroup()
    let start = Date()
    for (index, cell) in cells.enumerated() {
        slots.wait()
        group.enter()
        Thread.detachNewThread {
            outcomes.set(index, runCell(cell.row, reused: cell.reused, kind: cell.kind, style: cell.style, warmUpSame: sameWarmUp))
            slots.signal()
            group.leave()
        }
    }
    group.wait()
    print("fault lab: \(cells.count) cells in \(String(format: "%.1f", Date().timeIntervalSince(start))) s, \(parallel) at a time")
    print("")
    print("| Fault | Connection | Kind | " + styles.map(\.rawValue).joined(separator: " | ") + " |")
    print("|---|---|---|" + styles.map { _ in "---|" }.joined())
    for (index, cell) in cells.enumerated() where cell.style == styles.first {
        let line = styles.indices.map { offset -> String in
            let outcome = outcomes.get(index + offset)
            return outcome.server.isEmpty ? outcome.text : "\(outcome.text); server: \(outcome.server)"
        }
        print("| \(cell.row.name) | \(cell.reused ? "reused" : "fresh") | \(cell.kind.rawValue) | " + line.joined(separator: " | ") + " |")
    }
    exit(0)
}

private final class LabOutcomes: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [LabCellOutcome]
    init(count: Int) { values = Array(repeating: LabCellOutcome(text: "?", server: ""), count: count) }
    func set(_ index: Int, _ value: LabCellOutcome) { lock.withLock { values[index] = value } }
    func get(_ index: Int) -> LabCellOutcome { lock.withLock { values[index] } }
}
#endif
