#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The callbacks of a stream's task. A response whose status the request accepts becomes a stream: its bytes go to
/// the operation as they arrive, under the limits. Any other response is an error, whose first 64 KiB are kept for
/// ``RequestQueueError/invalidStatusCode(statusCode:response:body:)``.
final class StreamSink: TransferSink, @unchecked Sendable {
    /// The most of an error body kept: where a server's error payload is.
    static let errorBodyLimit = 64 * 1024

    private weak var streamCallbacks: (any StreamCallbacks)?
    /// The attempt's ``StatusRule``: a response it accepts becomes the stream.
    private let statusRule: StatusRule
    // Guarded by `lock`.
    private var isStreaming = false
    private var streamed: Int64 = 0

    init(callbacks: any AttemptCallbacks, streamCallbacks: any StreamCallbacks, rules: TransferRules, statusRule: StatusRule) {
        self.streamCallbacks = streamCallbacks
        self.statusRule = statusRule
        super.init(callbacks: callbacks, rules: rules)
    }

    override func shouldAccept(_ response: URLResponse) -> Bool {
        guard super.shouldAccept(response) else { return false }
        // A stream's rule always names its codes (see `StreamRequestOperation.prepareTransfer`).
        guard let response = response as? HTTPURLResponse, statusRule.accepts(response.statusCode, requestCodes: []) else { return true }
        lock.withLock { isStreaming = true }
        streamCallbacks?.streamDidStart(response, transfer: self)
        return true
    }

    override func didReceive(_ data: Data) {
        _ = take(data, mayHold: false)
    }

    /// A transport that can pause (libcurl) offers each piece: the stream holds it back (`false`) rather than fail
    /// when the consumer is behind, and resumes the transport once the consumer has caught up (see `StreamPump`).
    override func offer(_ data: Data) -> Bool {
        take(data, mayHold: true)
    }

    /// Hands `data` on; returns `false` only when it is held back (`mayHold`), and then nothing of it is counted.
    private func take(_ data: Data, mayHold: Bool) -> Bool {
        let received = receiving { () -> (fullErrorBody: Data?, tooLarge: Bool, intake: StreamIntake)? in
            guard isStreaming else {
                let room = Self.errorBodyLimit - bufferedBody.count
                bufferedBody.append(data.prefix(room))
                return (data.count >= room ? bufferedBody : nil, false, .taken)
            }
            let tooLarge = rules.limits.maximumBodySize.map { streamed + Int64(data.count) > $0 } ?? false
            // Handed over under the lock, so that no chunk can follow the end of an attempt that a rule stopped from
            // another thread (the minimum-speed watchdog).
            let intake = tooLarge ? .refused : streamCallbacks?.streamDidReceive(data, from: self, mayHold: mayHold) ?? .refused
            if intake != .heldBack { streamed += Int64(data.count) }
            return (nil, tooLarge, intake)
        }
        guard let (fullErrorBody, tooLarge, intake) = received else {
            moved(Int64(data.count))
            return true
        }
        if intake == .heldBack {
            speedWindowWaits()
            return false
        }
        moved(Int64(data.count))
        if let fullErrorBody {
            // An error body that goes on and on is not waited for.
            stop(keeping: .data(fullErrorBody))
        } else if tooLarge, let limit = rules.limits.maximumBodySize {
            stop(with: TransferLimitError.responseTooLarge(limit: limit))
        } else if intake == .refused {
            // A stream that has its outcome wants no more. Its operation has cancelled the task; if Linux ignored that
            // cancel (one that comes too early), the bytes that keep coming cancel it again, so that it does not run
            // on for nobody.
            abandon()
        }
        return true
    }
}
