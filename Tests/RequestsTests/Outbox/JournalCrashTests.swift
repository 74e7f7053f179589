import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

/// A crash at every file-system call of a scenario that opens, appends, updates, removes and compacts: the process
/// dies at call N (that call and every later one fail), the in-memory disk then keeps only what was synced (or more,
/// in each of `MemoryFileSystem.CrashMode`'s ways), and the journal is opened again. Nothing acknowledged may be
/// lost, nothing unacknowledged may be half there, and no id acknowledged may be given again.
final class JournalCrashTests: XCTestCase {
    private let folder = URL(fileURLWithPath: "/memory/journal")

    /// What the calls acknowledged, and the call that was running when the process died.
    private struct Model {
        var live: [UInt64: Data] = [:]
        var highestID: UInt64 = 0
        var inFlight: Step?
        var compactions = 0
    }

    private enum Step {
        case append([Data])
        case update(UInt64, Data)
        case remove([UInt64])
    }

    private static let steps: [Step] = [
        .append([samplePayload(1)]),
        .append([samplePayload(2), samplePayload(3), samplePayload(4)]),
        .update(2, samplePayload(20)),
        .remove([1, 3]),
        .append([samplePayload(5, size: 60)]),
        .update(4, samplePayload(40)),
        .remove([2, 4]),
        .append([samplePayload(6), samplePayload(7)]),
        .remove([5, 6, 7]),
        .append([samplePayload(8)]),
    ]

    /// Runs the scenario; the process dies at call `dyingAt` (never if `nil`). Returns the model and the number of
    /// file-system calls made.
    private func run(on memory: MemoryFileSystem, dyingAt: Int?) -> (Model, Int) {
        let fileSystem = FaultyFileSystem(memory)
        if let dyingAt { fileSystem.setFault { _, _, overall in overall == dyingAt ? .die : nil } }
        var model = Model()
        var options = Journal.Options()
        options.compactionMinimum = 100
        let log = JournalEventLog()
        guard let journal = try? Journal(directory: folder, options: options, fileSystem: fileSystem, events: log.handler) else {
            return (model, fileSystem.count())
        }
        defer { journal.close() }
        for step in Self.steps {
            model.inFlight = step
            do {
                switch step {
                case let .append(payloads):
                    for (id, payload) in zip(try journal.append(payloads), payloads) {
                        model.live[id] = payload
                        model.highestID = max(model.highestID, id)
                    }
                case let .update(id, payload):
                    try journal.update(id, payload: payload)
                    model.live[id] = payload
                case let .remove(ids):
                    try journal.remove(ids)
                    for id in ids { model.live[id] = nil }
                }
            } catch {
                break
            }
            model.inFlight = nil
        }
        model.compactions = log.events.filter { if case .compacted = $0 { return true } else { return false } }.count
        return (model, fileSystem.count())
    }

    func testACrashAtAnyCallLosesNothingAcknowledgedAndKeepsNoHalfCall() throws {
        let (complete, total) = run(on: MemoryFileSystem(), dyingAt: nil)
        XCTAssertGreaterThanOrEqual(complete.compactions, 2, "the scenario compacts")
        XCTAssertEqual(complete.live, [8: samplePayload(8)])
        var checked = 0
        for dyingAt in 1...total + 1 {
            for mode in MemoryFileSystem.CrashMode.allCases {
                let memory = MemoryFileSystem()
                let (model, _) = run(on: memory, dyingAt: dyingAt)
                memory.crash(mode)
                let context = "death at call \(dyingAt) of \(total), \(mode), during \(model.inFlight.map { "\($0)" } ?? "nothing")"
                let log = JournalEventLog()
                let journal = try Journal(directory: folder, fileSystem: memory, events: log.handler)
                let recovered = Dictionary(uniqueKeysWithValues: journal.recovered.map { ($0.id, $0.payload) })
                XCTAssertTrue(Self.acceptable(recovered, model), "\(context): recovered \(recovered), acknowledged \(model.live)")
                // The checkpoint never takes a crash for a loss: no call, compactions included, leaves it ahead of
                // the journal.
                XCTAssertEqual(log.events.filter(\.isLoss), [], context)
                let next = try journal.append([Data("after".utf8)])[0]
                XCTAssertGreaterThan(next, model.highestID, "\(context): an acknowledged id is given again")
                XCTAssertEqual(memory.fileNames, ["journal", "journal.lock", "journal.state"], "\(context): a leftover file")
                checked += 1
            }
        }
        XCTAssertEqual(checked, (total + 1) * MemoryFileSystem.CrashMode.allCases.count)
        print("crash points: \(total + 1) calls, \(checked) crashes, \(complete.compactions) compactions")
    }

    func testACrashWhileOpeningADamagedJournalLosesNothing() throws {
        // A journal whose third record is damaged: opening it skips the record and rewrites the file.
        let original = MemoryFileSystem()
        let writer = try Journal(directory: folder, fileSystem: original)
        for number in 1...5 { try writer.append([samplePayload(number)]) }
        writer.close()
        var bytes = try XCTUnwrap(original.contents(of: "journal"))
        let third = JournalFormat.fileHeaderSize + (1...2).map { JournalFormat.recordHeaderSize + samplePayload($0).count }.reduce(0, +)
        bytes[third + JournalFormat.recordHeaderSize] ^= 1
        let expected = [1, 2, 4, 5].map { JournalRecord(id: UInt64($0), payload: samplePayload($0)) }

        let counting = FaultyFileSystem(MemoryFileSystem())
        (counting.inner as? MemoryFileSystem)?.setContents(of: "journal", to: bytes)
        XCTAssertEqual(try Journal(directory: folder, fileSystem: counting).recovered, expected)
        let total = counting.count()
        for dyingAt in 1...total {
            for mode in MemoryFileSystem.CrashMode.allCases {
                let memory = MemoryFileSystem()
                memory.setContents(of: "journal", to: bytes)
                let fileSystem = FaultyFileSystem(memory)
                fileSystem.setFault { _, _, overall in overall == dyingAt ? .die : nil }
                try? Journal(directory: folder, fileSystem: fileSystem).close()
                memory.crash(mode)
                let log = JournalEventLog()
                XCTAssertEqual(try Journal(directory: folder, fileSystem: memory, events: log.handler).recovered, expected, "death at call \(dyingAt) of \(total), \(mode)")
                XCTAssertEqual(log.events.filter(\.isLoss), [], "death at call \(dyingAt) of \(total), \(mode)")
            }
        }
    }

    /// Whether `recovered` is the acknowledged state, or that state with the call in flight applied whole.
    private static func acceptable(_ recovered: [UInt64: Data], _ model: Model) -> Bool {
        if recovered == model.live { return true }
        var applied = model.live
        switch model.inFlight {
        case nil: return false
        case let .append(payloads):
            // Its ids were never returned: they are the next ones after every acknowledged id, in order.
            let added = recovered.filter { model.live[$0.key] == nil }.sorted { $0.key < $1.key }
            guard added.map(\.value) == payloads, added.allSatisfy({ $0.key > model.highestID }) else { return false }
            for (id, payload) in added { applied[id] = payload }
        case let .update(id, payload):
            applied[id] = payload
        case let .remove(ids):
            for id in ids { applied[id] = nil }
        }
        return recovered == applied
    }
}
