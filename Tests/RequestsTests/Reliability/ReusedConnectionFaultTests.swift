#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// The fault lab on reused connections (issue 46): every connection fault of the loopback server (OkHttp
/// MockWebServer's socket policies, and a server that closes kept-alive connections after a request or an idle time)
/// against every request kind, on a fresh connection and on a kept-alive one (the fault hits the request after a
/// warm-up). Each cell runs on a server and a session of its own, so the cells of a row run side by side.
///
/// Each cell checks the contract, not today's behaviour: exactly one completion; the operation finishes and is
/// released; it ends within the fault's own time plus one second (a server that never answers ends at its 1 s
/// timeout; every other fault at once); with the typed error the docs name, or with a success from a safe automatic
/// re-send; the server never saw a head whose body did not follow (a re-send with headers and no body); a POST is
/// not applied twice; an outbox entry's attempts all carry its key. The table is in docs/faults.md.
final class ReusedConnectionFaultTests: XCTestCase {
    override class func tearDown() {
        try? FileManager.default.removeItem(at: LabRoutes.uploadFile)
        super.tearDown()
    }

    /// Runs the cells of one row side by side, then reports each problem and a line per cell.
    private func runRow(_ row: LabRow, file: StaticString = #filePath, line: UInt = #line) {
        let before = transferLeftovers()
        let cells = LabColumn.allCases.flatMap { column in LabKind.allCases.map { (column, $0) } }
        let results = Recorder<LabCellResult>()
        let group = DispatchGroup()
        let start = Date()
        for (column, kind) in cells {
            group.enter()
            let thread = Thread {
                results.append(LabCellRunner.run(row, column, kind))
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        // Every cell ends by its own hard cap (20 s); this one only keeps a broken run from hanging the suite.
        XCTAssertEqual(group.wait(timeout: .now() + 120), .success, "\(row.rawValue): every cell ended", file: file, line: line)
        let wall = Date().timeIntervalSince(start)
        var lines: [String] = []
        for result in results.values.sorted(by: { ($0.column.rawValue, $0.kind.rawValue) < ($1.column.rawValue, $1.kind.rawValue) }) {
            for problem in result.problems {
                XCTFail("\(result.name): \(problem) [server saw: \(result.arrivals)]", file: file, line: line)
            }
            let mark = result.problems.isEmpty ? "" : " FAIL"
            lines.append(
                "  \(result.column.rawValue) | \(result.kind.rawValue) | \(result.outcome) | \(String(format: "%.2f", result.elapsed)) s | \(result.arrivals)\(mark)")
        }
        waitUntil("\(row.rawValue): no temporary file is left") { transferLeftovers().subtracting(before).isEmpty }
        reportProgress("fault lab: \(row.rawValue), \(cells.count) cells in \(String(format: "%.1f", wall)) s\n" + lines.joined(separator: "\n"))
    }

    func testDisconnectAtStart() { runRow(.disconnectAtStart) }
    func testDisconnectAfterRequest() { runRow(.disconnectAfterRequest) }
    func testDisconnectDuringRequestBody() { runRow(.disconnectDuringRequestBody) }
    func testDisconnectDuringResponseBody() { runRow(.disconnectDuringResponseBody) }
    func testNoResponse() { runRow(.noResponse) }
    func testStallAtStart() { runRow(.stallAtStart) }
    func testShutdownInputAtEnd() { runRow(.shutdownInputAtEnd) }
    func testShutdownOutputAtEnd() { runRow(.shutdownOutputAtEnd) }
    func testReset() { runRow(.reset) }
    func testCloseAfterOneRequest() { runRow(.closeAfterRequests) }
    func testCloseAfterIdleRacingTheNextRequest() { runRow(.closeAfterIdle) }
}
