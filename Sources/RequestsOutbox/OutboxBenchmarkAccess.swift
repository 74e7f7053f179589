import Foundation

/// Read-only figures of an outbox's journal for `requests-bench` (issue 47's rows): not part of the public API.
extension Outbox {
    /// Group commits the journal has written since it opened (each one `fdatasync` of the journal file, besides those
    /// of opening and compaction), and the calls (appends, updates, removals) they held.
    package var journalGroupCommits: (groups: Int, calls: Int) { journal.groupCommits }

    /// The records live in the journal: pending and parked entries, and settled entries whose removal is not yet
    /// durable.
    package var journalLiveCount: Int { journal.liveCount }

    /// Removals written per group commit during a drain (`removalGroup`): the benchmark's goal is one sync per this
    /// many removals.
    package static var removalGroupForBenchmark: Int { removalGroup }
}
