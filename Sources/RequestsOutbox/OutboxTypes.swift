#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// A request an ``Outbox`` can keep on disk and send again after the app restarts: a `DataRequest` that is
/// `Codable`.
///
/// At enqueue, the outbox calls the request's `makeURLRequest` once and stores what it made (method, URL, header
/// fields, body) with the request's JSON and ``outboxName``; every attempt sends those bytes. The request value's
/// policies (its adapters, validations, status codes, body rules) judge each attempt: the value enqueued, while the
/// process lives, and after a restart the one decoded from its JSON with the type given to
/// ``Outbox/init(directory:queue:session:requestTypes:options:)`` under that name, so keep what they read in its
/// `Codable` form. The queue's adapters and authenticator run on each attempt, so a token is the one current when
/// sending.
public protocol OutboxRequest: DataRequest, Codable, Sendable {
    /// The name stored with each entry, which finds the type again after a restart. Keep it stable across app
    /// versions. Default: the type's name.
    static var outboxName: String { get }
}

extension OutboxRequest {
    /// The type's name, as `String(describing:)` writes it.
    public static var outboxName: String { String(describing: Self.self) }
}

/// One request kept by an ``Outbox`` until the server gives a definitive answer.
public struct OutboxEntry: Sendable, Hashable, Identifiable {
    /// Identifies the entry in its outbox, across restarts. Entries enqueued later have larger identifiers.
    public let id: UInt64
    /// The entry's idempotency key: a random UUID in lower case, chosen when the entry was enqueued, and sent with
    /// every attempt of this entry, in this process and after a restart. On the wire it is a structured-field string,
    /// as the IETF httpapi draft says, so in double quotes: `Idempotency-Key: "<idempotencyKey>"`. A server that
    /// compares keys should strip the quotes.
    public let idempotencyKey: String
    /// Entries with the same lane run one at a time, in the order they were enqueued; `nil`: no order.
    public let lane: String?
    /// The ``OutboxRequest/outboxName`` of the request's type.
    public let requestType: String
    /// When the entry was enqueued.
    public let enqueuedAt: Date
    /// When the entry is dropped if it has not been sent by then; `nil`: never.
    public let expiresAt: Date?
    /// Attempts made in this process (the count starts again at 0 after a restart).
    public internal(set) var attempts: Int
    /// Why the entry was parked, for an entry in ``Outbox/deadLetters``; `nil` for a pending entry.
    public internal(set) var deadLetter: OutboxDeadLetter?
    /// The request, as it was encoded: JSON with sorted keys, which `JSONDecoder` decodes.
    public let encodedRequest: Data
    /// What every attempt sends, fixed at enqueue (see ``urlRequest``); `nil` for an entry stored by a version of
    /// Requests before 3.0, which makes its request on each attempt.
    var frozen: FrozenRequest?
    /// The key under which a later `enqueue(…, replacing:)` replaces this entry while it waits (the latest draft
    /// wins); `nil` for an entry enqueued without one.
    public internal(set) var coalescingKey: String?
    /// The entry's files, as stored in the outbox's folder, and how they are sent.
    var files: OutboxStoredFiles?

    /// The files the entry carries, in the order given at enqueue (see ``OutboxFiles``).
    public var attachments: [OutboxStoredFile] { files?.files ?? [] }

    /// The request every attempt of this entry sends, as the request's `makeURLRequest` made it at enqueue: method,
    /// URL, the request's own header fields, body and timeout. Each attempt adds the queue's adapters, the
    /// authenticator's credential and the `Idempotency-Key` to it. `nil` for an entry stored by an older version.
    public var urlRequest: URLRequest? { frozen?.urlRequest }

    /// The request, decoded as `type`, or `nil` when it is of another type or cannot be decoded.
    public func request<R: OutboxRequest>(as type: R.Type) -> R? {
        guard requestType == R.outboxName else { return nil }
        return try? JSONDecoder().decode(R.self, from: encodedRequest)
    }
}

/// Why an entry was parked in the dead-letter list, and what the server said.
public struct OutboxDeadLetter: Sendable, Hashable {
    /// What made the entry permanent.
    public enum Reason: Sendable, Hashable {
        /// The server answered with a status that retrying cannot fix (a 4xx other than 408 and 429, or a status
        /// outside the request's valid codes that is not a 5xx).
        case rejected(statusCode: Int)
        /// The request failed before or after reaching the server in a way that retrying cannot fix (its
        /// `makeURLRequest`, a precondition, a validation, a limit): the error's description.
        case failed(String)
        /// The stored request's type was not among the outbox's `requestTypes`, or its stored form could not be
        /// decoded as that type.
        case cannotDecode(requestType: String)
    }
    /// What made the entry permanent.
    public let reason: Reason
    /// The server's answer, when there was one (its body cut at 64 KiB).
    public let response: OutboxResponse?
    /// When the entry was parked.
    public let parkedAt: Date
}

/// An HTTP answer an outbox kept: the status, the headers and the body.
public struct OutboxResponse: Sendable, Hashable {
    /// The status code.
    public let statusCode: Int
    /// The header fields, as the server sent them.
    public let headers: [String: String]
    /// The body.
    public let body: Data

    /// Creates a response.
    public init(statusCode: Int, headers: [String: String], body: Data) {
        self.statusCode = statusCode
        self.headers = headers
        self.body = body
    }
}

/// Something that happened in an ``Outbox``, with the counts after it, so that an app can show "3 changes waiting
/// to sync" from the latest change alone.
public struct OutboxChange: Sendable {
    /// What happened.
    public enum Kind: Sendable, Equatable {
        /// The entry was stored (``Outbox/enqueue(_:lane:expiresAt:)-a7f9`` returned).
        case enqueued
        /// The server answered with one of the request's valid status codes; the entry left the journal.
        case sent(OutboxResponse)
        /// An attempt failed with a transient error (transport, 408, 429, 5xx); the next one starts after `delay`
        /// seconds, or as soon as connectivity returns.
        case willRetry(delay: TimeInterval, error: String)
        /// An attempt found no connectivity: the outbox sends nothing else until one probe gets an answer.
        case waitingForConnectivity
        /// The entry was parked in the dead-letter list (see ``OutboxEntry/deadLetter``).
        case parked
        /// A parked entry was made pending again by ``Outbox/retry(_:)``.
        case requeued
        /// The entry left the journal without a definitive answer.
        case dropped(OutboxDropReason)
    }
    /// What happened.
    public let kind: Kind
    /// The entry it happened to.
    public let entry: OutboxEntry
    /// Entries waiting to be sent, after this change.
    public let pendingCount: Int
    /// Entries in the dead-letter list, after this change.
    public let deadLetterCount: Int
}

/// Why an entry left an outbox without being sent.
public enum OutboxDropReason: Sendable, Hashable {
    /// Its ``OutboxEntry/expiresAt`` passed before the server answered.
    case expired
    /// ``Outbox/drop(_:)`` removed it.
    case byApp
    /// A later entry with the same coalescing key replaced it before it was sent (the latest draft wins): the entry
    /// with this identifier.
    case replaced(by: UInt64)
}

/// How an ``Outbox`` sends its entries.
public struct OutboxOptions: Sendable {
    /// At most this many entries have an attempt in flight at once (lanes further limit it to one per lane).
    /// Default: 4.
    public var maximumConcurrentEntries: Int = 4
    /// The wait after an entry's first transient failure; it doubles with each further failure. Default: 1 s.
    public var baseDelay: TimeInterval = 1
    /// The longest wait between two attempts of an entry, and between two connectivity probes. A `Retry-After`
    /// longer than this is shortened to it. Default: 300 s.
    public var maxDelay: TimeInterval = 300
    /// The delay varies by up to this fraction either way, so that clients do not retry in step. Default: 0.2.
    public var jitter: Double = 0.2
    /// How long an entry is kept before it is dropped unsent, when ``Outbox/enqueue(_:lane:expiresAt:)-a7f9`` names no
    /// date. Default: `nil`, kept until sent.
    public var expiresAfter: TimeInterval?
    /// The longest one attempt may take, from the moment the queue starts its operation to its outcome: preparing the
    /// request (`makeURLRequest`, the adapters, the authenticator's credential), sending it and reading the answer.
    /// Time spent waiting in the queue before that does not count.
    ///
    /// An attempt still running then is cancelled and counts as a transient failure: its place (and its lane) go to
    /// the next attempt, the entry is sent again after a backoff with the same `Idempotency-Key` (the server may
    /// have received the cancelled one), and ``OutboxChange/Kind/willRetry(delay:error:)`` names the timeout. So a
    /// request whose `makeURLRequest` or adapter never calls its completion holds up nothing for longer than this.
    /// The request's own `TransferLimits.deadline`, when shorter, applies as usual.
    ///
    /// Default: 120 s, twice URLSession's idle timeout, so that an answer that is slow but moving is not cut; raise
    /// it for entries that upload more than a few megabytes. A value that is not a positive number is taken as the
    /// default; `.infinity` sets no limit.
    public var attemptTimeout: TimeInterval = 120

    /// How each write reaches the disk on Apple platforms (on Linux both choices are `fdatasync`, which is
    /// ``OutboxDurability/full``). Default: ``OutboxDurability/full``.
    public var durability: OutboxDurability = .full

    /// The longest a settled entry's removal waits for others to share its sync (tests make it infinite, so that only
    /// the group size and idleness write removals).
    var removalDelay: TimeInterval = 0.1

    /// The largest file an entry may carry, in bytes; a larger one makes `enqueue` throw
    /// ``OutboxError/attachmentTooLarge(size:limit:)``. Default: 1 GiB.
    public var maximumAttachmentSize: Int64 = 1 << 30
    /// The most the outbox's files may hold together, in bytes; an `enqueue` whose files would pass it throws
    /// ``OutboxError/attachmentsFull(size:limit:)``. Default: 4 GiB.
    public var maximumAttachmentsSize: Int64 = 4 << 30

    /// Whether the outbox opens suspended (see ``Outbox/isSuspended``), so that a reader of ``Outbox/changes``
    /// can subscribe before the resumed entries are sent. Default: `false`.
    public var startsSuspended = false

    /// The defaults.
    public init() {}
}

/// How an ``Outbox`` makes an enqueue (and every other change of its journal) durable before it returns. The two
/// differ on Apple platforms only, where `fsync` leaves the data in the drive's cache; on Linux both are
/// `fdatasync`, which flushes it.
public enum OutboxDurability: Sendable, Equatable {
    /// The entry is on stable storage when `enqueue` returns: it survives the app's end, a crash of the system and a
    /// power loss. Apple platforms: `fcntl(F_FULLFSYNC)`, measured publicly at about 5–20 ms a sync on Apple SSDs
    /// (about 46 a second on an M1), shared by the enqueues of the same moment.
    case full
    /// The writes reach the disk in order: an entry survives the app's end and a crash of the system, and entries
    /// are never kept out of order or in part, but a power loss (or a battery that runs out) may lose the last
    /// entries enqueued before it. Apple platforms: `fcntl(F_BARRIERFSYNC)`, several times cheaper. Opening and
    /// the journal's compaction still sync fully.
    case barrier
}

/// Why an ``Outbox`` could not be opened, or could not store or find an entry.
public enum OutboxError: Error, Equatable, Sendable {
    /// Another outbox, in this process or another, has the folder open.
    case folderInUse(URL)
    /// The folder cannot be used: it is a symbolic link, not a folder, or another user's, or it could not be
    /// created or read. The string says which.
    case unusableFolder(URL, String)
    /// The request could not be encoded; nothing was stored.
    case cannotEncode(requestType: String, String)
    /// The request's type is not among the outbox's `requestTypes`, so it could not be sent again after a restart;
    /// nothing was stored.
    case unregisteredType(String)
    /// The encoded entry is larger than the journal accepts; nothing was stored.
    case tooLarge(size: Int, limit: Int)
    /// Writing to the disk failed (a full disk, an I/O error); nothing was stored or changed.
    case writeFailed(String)
    /// No pending or parked entry has this identifier.
    case noSuchEntry(UInt64)
    /// The outbox was closed.
    case closed
    /// A file is larger than ``OutboxOptions/maximumAttachmentSize``; nothing was stored.
    case attachmentTooLarge(size: Int64, limit: Int64)
    /// The files would make the outbox's folder hold more than ``OutboxOptions/maximumAttachmentsSize``: `size`
    /// bytes more were asked for; nothing was stored.
    case attachmentsFull(size: Int64, limit: Int64)
    /// A file cannot be read (missing, not a regular file, changed while it was copied), or the files cannot be
    /// sent as asked (a body of its own beside a file sent as the body); the string says which. Nothing was stored.
    case unusableAttachment(URL, String)
}

/// A `RequestEventMonitor` of the queue an ``Outbox`` sends on that also hears what the outbox found when it opened.
/// Put it in the queue's `requestPolicies.monitors`, like any monitor.
public protocol OutboxMonitor: RequestEventMonitor {
    /// An ``Outbox`` whose attempts run on this queue opened its folder: the entries it resumed, and the damaged
    /// records it skipped, the incomplete last record it cut off, or the journal it found lost (see
    /// ``OutboxOpeningReport``). Called once, from the outbox's initializer, before it sends anything.
    func outboxDidOpen(_ directory: URL, report: OutboxOpeningReport)
}

extension OutboxError: LocalizedError {
    /// What went wrong, in a sentence a user can be shown.
    public var errorDescription: String? {
        switch self {
        case let .folderInUse(url):
            return "The outbox folder \(url.path) is open in another outbox, in this process or another."
        case let .unusableFolder(url, reason):
            return "The outbox folder \(url.path) cannot be used: \(reason)."
        case let .cannotEncode(type, reason):
            return "The request \(type) could not be stored: \(reason). Nothing was stored."
        case let .unregisteredType(type):
            return "The request type \(type) is not among the outbox's requestTypes, so it could not be sent after a restart. Nothing was stored."
        case let .tooLarge(size, limit):
            return "The entry has \(size) bytes, more than the outbox's limit of \(limit) bytes. Nothing was stored."
        case let .writeFailed(reason):
            return "The outbox could not write to the disk: \(reason). Nothing was stored or changed."
        case let .noSuchEntry(id):
            return "The outbox has no pending or parked entry \(id)."
        case .closed:
            return "The outbox is closed."
        case let .attachmentTooLarge(size, limit):
            return "The file has \(size) bytes, more than the outbox's limit of \(limit) bytes per file. Nothing was stored."
        case let .attachmentsFull(size, limit):
            return "The outbox's files would pass its limit of \(limit) bytes with \(size) bytes more. Nothing was stored."
        case let .unusableAttachment(url, reason):
            return "The file \(url.lastPathComponent) cannot be attached: \(reason). Nothing was stored."
        }
    }
}
