import Foundation
import Requests

/// The outbox's journal alone, for `requests-bench outbox-enqueue` (issue 47: enqueue throughput against the journal
/// alone, same threads, same disk): not part of the public API.
package final class BenchmarkJournal: @unchecked Sendable {
    private let journal: Journal

    /// Opens (or creates) a journal in `directory`, with the options an outbox uses.
    package init(directory: URL) throws {
        journal = try Journal(directory: directory)
    }

    /// Appends `payloads` durably (one group commit, shared with concurrent callers), as an enqueue stores its
    /// entries; returns their ids.
    @discardableResult
    package func append(_ payloads: [Data]) throws -> [UInt64] {
        try journal.append(payloads)
    }

    /// Group commits written since the journal opened, and the calls they held.
    package var groupCommits: (groups: Int, calls: Int) { journal.groupCommits }

    package func close() {
        journal.close()
    }

    /// The record an outbox stores for `request` enqueued in `lane`: its JSON (sorted keys), its frozen URL request
    /// and a new key, encoded as `enqueue` encodes it (`OutboxRecord.encode`).
    package static func sampleEntryRecord<R: OutboxRequest>(_ request: R, lane: String?) throws -> Data {
        let frozen = try FrozenRequest.make(request, bodyLimit: JournalFormat.maximumPayloadSize, wait: OutboxOptions().attemptTimeout)
        let entry = OutboxEntry(
            id: 0, idempotencyKey: OutboxRecord.newKey(), lane: lane, requestType: R.outboxName, enqueuedAt: Date(),
            expiresAt: nil, attempts: 0, deadLetter: nil, encodedRequest: try OutboxRecord.jsonEncoder.encode(request), frozen: frozen)
        return OutboxRecord.encode(entry)
    }
}
