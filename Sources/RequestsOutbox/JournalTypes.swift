import Foundation
import Requests
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A live record of a ``Journal``: its id (given by the journal, growing, never reused) and its payload.
struct JournalRecord: Sendable, Equatable {
    let id: UInt64
    let payload: Data
}

/// Something a ``Journal`` found or did that its owner may want to report.
enum JournalEvent: Sendable, Equatable {
    /// A damaged record (or stretch of bytes) in the middle of `file`, at `offset`, was skipped; recovery went on
    /// with the next intact record. Offset 0 is the file header. Also sent when compaction finds a live record
    /// damaged, which it then drops.
    case skippedCorruptRecord(file: String, offset: UInt64)
    /// The end of `file` from `offset` on held no whole call's records (a crash in the middle of a write) and was
    /// cut off.
    case discardedTornTail(file: String, offset: UInt64)
    /// The file was rewritten with its live records only.
    case compacted(bytesBefore: UInt64, bytesAfter: UInt64)
    /// Opening found less than the checkpoint (`journal.state`) says the journal durably held: `file` (the journal
    /// file, or the checkpoint file for `.checkpointDamaged`) was missing, emptied, replaced or shortened, or the
    /// checkpoint itself is unreadable. `recordsAtCheckpoint` is the number of live records the checkpoint counted
    /// (`nil` when there is no readable checkpoint), `recordsFound` the number recovered. Sent once: the journal goes
    /// on with what it found, and its next checkpoint describes that.
    case lost(file: String, kind: JournalLossKind, recordsAtCheckpoint: Int?, recordsFound: Int)
}

/// What ``JournalEvent/lost(file:kind:recordsAtCheckpoint:recordsFound:)`` found.
enum JournalLossKind: Sendable, Equatable {
    /// The journal file was gone, while the checkpoint says one existed.
    case missing
    /// The journal file was empty (0 bytes).
    case emptied
    /// The file is not the journal file the checkpoint names: an intact header of another file, or bytes that are no
    /// journal at all (also reported without a checkpoint).
    case replaced
    /// The journal file's content ends before the length the checkpoint knows durable, or its ids stop below the
    /// checkpoint's highest.
    case shortened
    /// The checkpoint file exists but neither slot is valid: how far the journal got is unknown, so a loss cannot be
    /// ruled out.
    case checkpointDamaged
}

/// Why a ``Journal`` could not open or do what it was asked.
enum JournalError: Error, Equatable, CustomStringConvertible {
    /// Another journal holds the folder's lock (`journal.lock`), in this process or another.
    case lockedByAnotherProcess(URL)
    /// The path is not a folder.
    case notADirectory(URL)
    /// The folder, or a file in it, belongs to another user.
    case notOwnedByUser(URL)
    /// The folder, or a file in it, is a symbolic link, which the journal never follows.
    case isSymbolicLink(URL)
    /// A payload is larger than the journal accepts.
    case recordTooLarge(size: Int, limit: Int)
    /// A system call failed (`ENOSPC` for a full disk); nothing of the failed call remains in the journal.
    case writeFailed(errno: Int32, operation: String)
    /// The journal was closed.
    case closed
    /// The journal file was written by a newer version of this code, in a format this one cannot read; it was not
    /// touched.
    case unsupportedVersion(URL, version: UInt32)
    /// `update` named an id that is not live (never given, or removed).
    case unknownRecord(UInt64)

    var description: String {
        switch self {
        case let .lockedByAnotherProcess(url):
            return "The journal in \(url.path) is open elsewhere (its lock file is held by this or another process)"
        case let .notADirectory(url): return "\(url.path) is not a folder"
        case let .notOwnedByUser(url): return "\(url.path) belongs to another user than this process's (\(getuid()))"
        case let .isSymbolicLink(url): return "\(url.path) is a symbolic link, which the journal does not follow"
        case let .recordTooLarge(size, limit): return "A record of \(size) bytes is larger than the journal's limit of \(limit) bytes"
        case let .writeFailed(code, operation):
            return "The journal's \(operation) failed: \(String(cString: strerror(code))) (errno \(code)); nothing of the call was kept"
        case .closed: return "The journal is closed"
        case let .unsupportedVersion(url, version):
            return "\(url.path) has format version \(version), which this version of Requests cannot read; it was left untouched"
        case let .unknownRecord(id): return "The journal has no live record \(id)"
        }
    }
}

extension JournalError {
    /// `error` if it is a `JournalError`, else a failed call that names it.
    init(_ error: Error) {
        self = error as? JournalError ?? .writeFailed(errno: EIO, operation: String(describing: error))
    }
}

extension Journal {
    /// Limits, which tests make small, and how to sync.
    struct Options: Sendable {
        /// The largest payload accepted.
        var maximumPayloadSize = JournalFormat.maximumPayloadSize
        /// Compaction runs when the file's dead bytes exceed its live bytes and this many bytes.
        var compactionMinimum: UInt64 = 1 << 20
        /// The file grows in steps of this many bytes, written as zeros ahead of the records (0: exactly as records
        /// are appended).
        var preallocation: UInt64 = 256 << 10
        /// With `preallocation`, calls that add records fail unless this many bytes of zeros follow them, kept for
        /// removals: on a full disk, entries can still leave.
        var reserve: UInt64 = 64 << 10
        /// How group commits and compactions sync (see ``JournalSync``): `.full` (the default) survives a power
        /// loss; `.barrier` keeps order and survives a crash but a power loss may lose the last calls. The same on
        /// Linux. Opening and the cut-off of a failed group always sync fully.
        var sync = JournalSync.full
        init() {}
    }

    static let journalName = "journal"
    static let lockName = "journal.lock"
}
