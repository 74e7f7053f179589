#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A running `outbox-child` and what it has written so far, read line by line on a thread of its own.
final class OutboxChildRun: @unchecked Sendable {
    /// What the child has said.
    struct State {
        /// Pending entries the outbox found when it opened; `nil` until then.
        var openedWith: Int?
        var acks: [Int] = []
        var enqueued = false
        var drained = false
        /// Its standard output is closed: it exited or was killed.
        var ended = false
        var otherLines: [String] = []
    }

    /// Where the child was when it was killed.
    enum Phase: String, CaseIterable {
        case starting = "starting or opening"
        case enqueueing = "enqueueing (and sending)"
        case draining = "sending the rest"
    }

    let process: Process
    private let condition = NSCondition()
    private var current = State()

    /// Starts `executable mode arguments…` (`outbox-child` by default); standard error is appended to `errors`.
    init(mode: String = "outbox-child", arguments: [String], errors: FileHandle) throws {
        process = Process()
        process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = [mode] + arguments
        process.standardInput = FileHandle.nullDevice
        process.standardError = errors
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let reader = Thread { [self] in read(pipe.fileHandleForReading) }
        reader.start()
    }

    var state: State { condition.withLock { current } }

    /// Waits until `predicate` holds or the child's output ends, at most until `deadline` (``ResourceUsage/now()``);
    /// returns whether `predicate` holds.
    @discardableResult
    func wait(until deadline: Double, for predicate: (State) -> Bool) -> Bool {
        condition.withLock {
            while !predicate(current), !current.ended {
                let remaining = deadline - ResourceUsage.now()
                guard remaining > 0 else { break }
                _ = condition.wait(until: Date(timeIntervalSinceNow: remaining))
            }
            return predicate(current)
        }
    }

    /// Where the child is now.
    var phase: Phase {
        let now = state
        if now.openedWith == nil { return .starting }
        return now.enqueued ? .draining : .enqueueing
    }

    /// SIGKILLs the child, then waits for its output to end (so that every `ack` it wrote is counted) and for it to
    /// exit. Returns whether it was still running (had not finished, nor closed its output).
    @discardableResult
    func kill() -> Bool {
        let running = condition.withLock { !current.ended && !current.drained }
        sendSignal(process.processIdentifier, SIGKILL)
        wait(until: ResourceUsage.now() + 30) { _ in false }
        process.waitUntilExit()
        return running
    }

    /// Waits for the child to exit by itself; kills it after `timeout` seconds. Returns its exit status, or `nil` when
    /// it had to be killed.
    func waitForExit(timeout: Double) -> Int32? {
        wait(until: ResourceUsage.now() + timeout) { _ in false }
        guard state.ended else {
            kill()
            return nil
        }
        process.waitUntilExit()
        return process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus
    }

    private func read(_ handle: FileHandle) {
        var buffer = Data()
        while true {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            buffer.append(chunk)
            var lines: [String] = []
            while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                buffer.removeSubrange(buffer.startIndex...newline)
            }
            guard !lines.isEmpty else { continue }
            condition.withLock {
                lines.forEach(record)
                condition.broadcast()
            }
        }
        try? handle.close()
        condition.withLock {
            current.ended = true
            condition.broadcast()
        }
    }

    /// Call with the condition's lock held.
    private func record(_ line: String) {
        let words = line.split(separator: " ")
        switch words.first {
        case "ack":
            if words.count == 2, let seq = Int(words[1]) { current.acks.append(seq) } else { current.otherLines.append(line) }
        case "open": current.openedWith = words.count > 1 ? Int(words[1]) ?? 0 : 0
        case "enqueued": current.enqueued = true
        case "drained": current.drained = true
        default: current.otherLines.append(line)
        }
    }
}

/// `kill(2)`, out of reach of ``OutboxChildRun/kill()``'s name.
private func sendSignal(_ pid: pid_t, _ number: Int32) {
    _ = kill(pid, number)
}
#endif
