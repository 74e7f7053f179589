import Foundation
import Requests

/// What an ``Outbox`` found lost when it opened: its journal (the file that holds the entries) was missing, emptied,
/// replaced or shortened since the last checkpoint, or the checkpoint itself was unreadable.
///
/// The outbox keeps a small checkpoint file beside its journal (`journal.state`) that records how far the journal
/// got: which file it is, how much of it is known to be on disk, how many entries it held, and the highest entry
/// identifier given. A journal that holds less than that when the outbox opens is reported here, in
/// ``OutboxOpeningReport/loss``, rather than taken for an empty outbox. The outbox then goes on with what it found
/// (and gives no identifier it gave before), so the loss is reported once.
public struct OutboxJournalLoss: Sendable, Equatable {
    /// How the journal was lost.
    public enum Kind: Sendable, Equatable {
        /// The journal file was gone, although the checkpoint says the outbox had written one.
        case journalMissing
        /// The journal file was empty (0 bytes).
        case journalEmptied
        /// The journal file was not the one the outbox wrote: another journal's file, or bytes that are no journal at
        /// all. Also reported for a file that is no journal when there is no checkpoint (a folder written by an
        /// earlier version): then ``OutboxJournalLoss/entriesAtLastCheckpoint`` is `nil`.
        case journalReplaced
        /// The journal file ends before the point the checkpoint knows was on disk, or its entries stop below the
        /// highest identifier the checkpoint recorded: entries at its end are gone.
        case journalShortened
        /// The checkpoint file exists but could not be read (neither of its two copies is intact), so how far the
        /// journal got is not known: a loss cannot be ruled out, nor measured.
        case checkpointDamaged
    }

    /// How the journal was lost.
    public let kind: Kind
    /// The entries (pending and parked) the journal held at the last checkpoint that was on disk; `nil` when no
    /// checkpoint could be read (``Kind/checkpointDamaged``, or a folder without a checkpoint).
    public let entriesAtLastCheckpoint: Int?
    /// The entries found in the journal, pending, parked or unreadable (those are counted in
    /// ``OutboxOpeningReport/skippedRecords`` too).
    public let entriesFound: Int

    /// `entriesAtLastCheckpoint − entriesFound`, at least 0 (0 when no checkpoint could be read): an estimate of the
    /// entries lost, not an exact count.
    ///
    /// The checkpoint is updated after every write that reaches the disk, without a sync of its own, so it is
    /// current unless the machine itself stopped (a power cut, a kernel panic) before it reached the disk; a process
    /// that crashes or is killed leaves it current. When it is not current, entries enqueued after it that were lost
    /// are not counted, and entries sent or dropped after it are counted as lost although they left normally. Even
    /// when it is current, a lost entry is not counted when another one that the checkpoint did not know is found
    /// in its place.
    public var entriesKnownLost: Int { max(0, (entriesAtLastCheckpoint ?? 0) - entriesFound) }
}

extension OutboxJournalLoss {
    /// The journal's event, as the outbox reports it.
    init(_ kind: JournalLossKind, recordsAtCheckpoint: Int?, recordsFound: Int) {
        switch kind {
        case .missing: self.kind = .journalMissing
        case .emptied: self.kind = .journalEmptied
        case .replaced: self.kind = .journalReplaced
        case .shortened: self.kind = .journalShortened
        case .checkpointDamaged: self.kind = .checkpointDamaged
        }
        entriesAtLastCheckpoint = recordsAtCheckpoint
        entriesFound = recordsFound
    }
}

extension OutboxOpeningReport {
    /// Whether opening found nothing wrong: no ``loss``, no ``skippedRecords``, no ``discardedIncompleteRecord``, no
    /// ``damagedAttachments``.
    /// A new folder is all clear, and so is one closed normally or left by a process that ended between writes. A
    /// crash in the middle of a write is not (``discardedIncompleteRecord``), although no entry whose `enqueue`
    /// returned is lost then.
    public var isAllClear: Bool { loss == nil && skippedRecords == 0 && !discardedIncompleteRecord && damagedAttachments.isEmpty }
}
