import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The journal's speed, printed, never asserted (a benchmark, not a timed test). Skipped unless
/// `REQUESTS_JOURNAL_BENCH=1`. Run it in a release build:
///
///     REQUESTS_JOURNAL_BENCH=1 swift test -c release -Xswiftc -enable-testing --filter JournalBenchmarkTests
///
/// `REQUESTS_JOURNAL_BENCH_DIR` chooses the folder (default: the temporary directory).
final class JournalBenchmarkTests: XCTestCase {
    private var parent: URL!

    override func setUpWithError() throws {
        guard ProcessInfo.processInfo.environment["REQUESTS_JOURNAL_BENCH"] == "1" else {
            throw XCTSkip("a benchmark: set REQUESTS_JOURNAL_BENCH=1 to run it")
        }
        let base =
            ProcessInfo.processInfo.environment["REQUESTS_JOURNAL_BENCH_DIR"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory
        parent = base.appendingPathComponent("journal-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
        let parent = parent!
        addTeardownBlock { try? FileManager.default.removeItem(at: parent) }
    }

    func testBenchmark() throws {
        var loadAverage = [Double](repeating: 0, count: 3)
        _ = getloadavg(&loadAverage, 3)
        report("journal benchmark in \(parent.deletingLastPathComponent().path); load average \(loadAverage.map { String(format: "%.2f", $0) })")
        try measureRawSync()
        for (threads, batch, calls) in [(1, 1, 3000), (8, 1, 2000), (1, 16, 1000), (8, 16, 500)] {
            try measureAppends(threads: threads, batch: batch, callsPerThread: calls)
        }
        try measureRecovery(records: 10_000)
        try measureMemory(records: 200_000)
        _ = getloadavg(&loadAverage, 3)
        report("load average at the end \(loadAverage.map { String(format: "%.2f", $0) })")
    }

    /// What one 256-byte write and `fdatasync` cost here, without the journal.
    private func measureRawSync() throws {
        let path = parent.appendingPathComponent("raw").path
        let file = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        XCTAssertGreaterThanOrEqual(file, 0)
        defer { close(file) }
        let bytes = [UInt8](repeating: 7, count: 256)
        var latencies: [Double] = []
        for _ in 0..<1000 {
            let start = DispatchTime.now().uptimeNanoseconds
            _ = bytes.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
            #if canImport(Darwin)
            _ = fsync(file)
            #else
            _ = fdatasync(file)
            #endif
            latencies.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
        }
        let sorted = latencies.sorted()
        report(String(format: "raw write(256 B) + fdatasync, 1000 times: mean %.3f ms, p50 %.3f ms, p99 %.3f ms", sorted.reduce(0, +) / 1000, sorted[500], sorted[990]))
    }

    private func measureAppends(threads: Int, batch: Int, callsPerThread: Int) throws {
        let folder = parent.appendingPathComponent("appends-\(threads)-\(batch)")
        let journal = try Journal(directory: folder)
        defer { journal.close() }
        let payloads = (0..<batch).map { _ in Data(repeating: 0x61, count: 256) }
        let latencies = Latencies()
        let go = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for _ in 0..<threads {
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                go.wait()
                var mine: [Double] = []
                mine.reserveCapacity(callsPerThread)
                for _ in 0..<callsPerThread {
                    let start = DispatchTime.now().uptimeNanoseconds
                    guard (try? journal.append(payloads)) != nil else { return }
                    mine.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
                }
                latencies.add(mine)
            }
        }
        let start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<threads { go.signal() }
        done.wait()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let all = latencies.sorted
        XCTAssertEqual(all.count, threads * callsPerThread)
        XCTAssertEqual(journal.liveCount, threads * callsPerThread * batch)
        let records = Double(threads * callsPerThread * batch)
        let groups = journal.groupCommits
        report(
            String(
                format:
                    "%d thread(s), %2d record(s) per call, 256 B each: %7.0f durable appends/s (%6.0f calls/s; %4.1f calls per sync), call latency p50 %.3f ms, p99 %.3f ms, max %.3f ms",
                threads, batch, records / seconds, Double(all.count) / seconds, Double(groups.calls) / Double(max(groups.groups, 1)),
                all[all.count / 2], all[all.count * 99 / 100], all[all.count - 1]))
    }

    private func measureRecovery(records: Int) throws {
        let folder = parent.appendingPathComponent("recovery")
        let journal = try Journal(directory: folder)
        for _ in 0..<records / 100 {
            try journal.append((0..<100).map { _ in Data(repeating: 0x62, count: 256) })
        }
        journal.close()
        let start = DispatchTime.now().uptimeNanoseconds
        let reopened = try Journal(directory: folder)
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        XCTAssertEqual(reopened.recovered.count, records)
        report(String(format: "recovery of %d live records of 256 B (a %d-byte file): %.1f ms", records, records * 284 + 32, seconds * 1000))
    }

    /// The journal's resident memory per live record once `recovered` is released: the index only. Payloads of 8
    /// bytes, which `Data` keeps inline, so that only the journal's own structures count.
    private func measureMemory(records: Int) throws {
        let folder = parent.appendingPathComponent("memory")
        let journal = try Journal(directory: folder)
        for _ in 0..<records / 1000 {
            try journal.append((0..<1000).map { _ in Data(repeating: 0x63, count: 8) })
        }
        journal.close()
        let before = residentBytes()
        let reopened = try Journal(directory: folder)
        reopened.releaseRecovered()
        let after = residentBytes()
        XCTAssertEqual(reopened.liveCount, records)
        report(String(format: "resident memory per live record (index only, recovered released): %.1f bytes over %d records", Double(after - before) / Double(records), records))
    }

    private func residentBytes() -> Int {
        #if os(Linux)
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = statm.split(separator: " ")
        return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
        #else
        return 0  // Measured on Linux only.
        #endif
    }

    private func report(_ line: String) {
        print("[journal-bench] " + line)
        fflush(nil)
    }
}

/// The latencies of all threads.
private final class Latencies: @unchecked Sendable {
    private let lock = NSLock()
    private var all: [Double] = []
    func add(_ some: [Double]) { lock.withLock { all += some } }
    var sorted: [Double] { lock.withLock { all.sorted() } }
}
