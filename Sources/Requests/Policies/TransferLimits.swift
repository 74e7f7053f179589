#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// How much a response may send and how long a request may take. A server may send an endless body, a
/// body compressed 1,000:1, or one byte at a time forever; these limits end each of those with a
/// ``TransferLimitError``, with the task cancelled.
///
/// Set it for a queue with ``RequestPolicies/limits``; a request replaces it with its own
/// ``NetworkRequest/limits``.
public struct TransferLimits: Sendable, Equatable {
    /// 64 MiB: no JSON API answer comes near it, and it is far below what a device can hold.
    public static let defaultMaximumBodySize: Int64 = 64 * 1024 * 1024

    /// The most bytes of a response body held in memory, counted after decompression (a 1 MB gzip body that
    /// inflates to 1 GiB stops at this limit, not at its wire size). A `Content-Length` above it fails when the
    /// headers arrive, before any of the body is read (not for HEAD, 204 or 304, which send no body). Default:
    /// ``defaultMaximumBodySize`` (64 MiB); `nil` is unlimited.
    public var maximumBodySize: Int64?
    /// The most bytes a download writes to its file. Default: `nil`, unlimited.
    public var maximumDownloadSize: Int64?
    /// Seconds from the start of the request to its outcome, covering every attempt and every wait between
    /// attempts. Default: `nil`, none (a total deadline would cut a large download on a slow link; the
    /// ``minimumSpeed`` rule ends a response that trickles).
    public var deadline: TimeInterval?
    /// A transfer that moves fewer bytes than this in a window of time fails. URLSession's own timeout restarts
    /// with every byte, so it never ends a response that sends one byte every few seconds. Default:
    /// ``MinimumSpeed/default``, fewer than 1 KiB in 60 s; `nil` is none.
    public var minimumSpeed: MinimumSpeed?

    /// Limits with the given parts; each defaults to the documented default.
    public init(
        maximumBodySize: Int64? = TransferLimits.defaultMaximumBodySize,
        maximumDownloadSize: Int64? = nil,
        deadline: TimeInterval? = nil,
        minimumSpeed: MinimumSpeed? = .default
    ) {
        self.maximumBodySize = maximumBodySize
        self.maximumDownloadSize = maximumDownloadSize
        self.deadline = deadline
        self.minimumSpeed = minimumSpeed
    }

    /// The defaults: a 64 MiB body in memory, downloads unlimited, no deadline, at least 1 KiB per 60 s.
    public static let `default` = TransferLimits()
    /// No limit at all, as URLSession behaves by itself.
    public static let none = TransferLimits(maximumBodySize: nil, maximumDownloadSize: nil, deadline: nil, minimumSpeed: nil)
}

/// The slowest a transfer may go, like curl's `--speed-limit` and `--speed-time`: fewer than ``bytes`` in any
/// window of ``seconds`` fails with ``TransferLimitError/tooSlow(_:)``. Windows start when the first byte is sent,
/// pause once the request body has been sent, and start again when the response's headers arrive (a download's
/// first write); they are checked about once a second. A window that is not a positive number of seconds is no rule.
public struct MinimumSpeed: Sendable, Equatable {
    /// Bytes that must move, sent or received, in each window.
    public var bytes: Int64
    /// The window, in seconds.
    public var seconds: TimeInterval

    /// At least `bytes` every `seconds`.
    public init(bytes: Int64, seconds: TimeInterval) {
        self.bytes = bytes
        self.seconds = seconds
    }

    /// 1 KiB in 60 s: a link 1,000 times slower than a poor mobile connection still passes, and a response
    /// that sends a byte every two seconds ends within two minutes.
    public static let `default` = MinimumSpeed(bytes: 1024, seconds: 60)
}

/// Why Requests stopped a transfer. The task is cancelled when this is reported.
public enum TransferLimitError: Error, Equatable, CustomStringConvertible {
    /// The response body (after decompression), its `Content-Length`, or a download's file grew past `limit` bytes.
    case responseTooLarge(limit: Int64)
    /// The request's ``TransferLimits/deadline`` passed before it had an outcome.
    case deadlineExceeded(TimeInterval)
    /// Fewer than the ``MinimumSpeed`` bytes moved in one of its windows.
    case tooSlow(MinimumSpeed)

    /// Names the limit.
    public var description: String {
        switch self {
        case let .responseTooLarge(limit):
            return "The response is larger than the limit of \(limit) bytes."
        case let .deadlineExceeded(seconds):
            return "The request did not finish within its deadline of \(seconds) s."
        case let .tooSlow(speed):
            return "The transfer moved fewer than \(speed.bytes) bytes in \(speed.seconds) s."
        }
    }
}
