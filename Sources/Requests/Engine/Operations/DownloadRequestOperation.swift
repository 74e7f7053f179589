#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs a ``DownloadRequest`` with a data task whose body Requests writes to a file of its own as it arrives, so that
/// memory stays flat and the file is always Requests' to keep, move, append to or remove.
///
/// Not a download task: on Linux Foundation never deletes a download task's temporary file, not even after a
/// failure or a cancellation, gives no resume data, and does not name the file until the download has succeeded.
///
/// **Resuming.** Each attempt asks for `Accept-Encoding: identity` (unless the request sets its own), so that the
/// bytes on disk are the ones a range counts. When an attempt fails after some of the body arrived and the
/// response had a strong `ETag` or a `Last-Modified`, the next attempt (a retry) sends `Range: bytes=N-` and
/// `If-Range`, and appends the `206` it gets; a `200` starts again into a fresh file. A download added with
/// `addRequest(_:resumingFrom:…)` also keeps its bytes when it fails, and when it is cancelled with
/// ``cancel(producingResumeState:)``, and describes them in ``resumeState``.
public final class DownloadRequestOperation<R: DownloadRequest>: DataRequestOperation<R>, @unchecked Sendable {
    // All guarded by the lock of `AsyncOperation`.
    /// The bytes earlier attempts (or a ``ResumeState``) left, between attempts.
    private var partial: PartialFile?
    /// The current attempt's transfer, until it is detached.
    private var transfer: FileSink?
    private var keepsPartialFile = false
    private var keepsPartialFileOnCancel = false
    private var resumeDestination: URL?
    private var storedResumeState: ResumeState?
    /// Why the ``ResumeState`` the operation was given was refused, until the first attempt tells monitors.
    private var refusal: PartialFile.Refusal?
    /// The partial file of the state it continues, which no other download may continue meanwhile, until the outcome.
    private var claimed: URL?

    /// Where the download stands, once it has failed or been cancelled with its bytes kept (see
    /// `addRequest(_:resumingFrom:…)` and ``cancel(producingResumeState:)``); `nil` otherwise, and when nothing
    /// that can be resumed arrived. Set before the completion handler runs.
    public var resumeState: ResumeState? {
        withLock { storedResumeState }
    }

    /// Cancels the download; with `producingResumeState`, its bytes are kept and described in ``resumeState``.
    public func cancel(producingResumeState: Bool) {
        if producingResumeState {
            withLock { keepsPartialFileOnCancel = true }
        }
        cancel()
    }

    /// Makes the operation continue `state` (if any) and keep its bytes when it fails. Call before it starts. A
    /// state that fails a check (`PartialFile.trusting(_:)`) is not used: the download starts from zero, and the
    /// first attempt tells monitors why.
    func resume(from state: ResumeState?) {
        var trusted = state.map(PartialFile.trusting)
        if case let .success(file)? = trusted, !PartialFile.claim(file.file) {
            trusted = .failure(.inUse)
        }
        withLock {
            keepsPartialFile = true
            switch trusted {
            case let .success(file)?: (partial, claimed) = (file, file.file)
            case let .failure(refused)?: refusal = refused
            case nil: break
            }
        }
    }

    deinit {
        // Released when the outcome is delivered; here too, for an operation that never ran.
        if let claimed { PartialFile.release(claimed) }
    }

    // MARK: - Each attempt

    /// Asks for the bytes as they are on disk (`Accept-Encoding: identity`, unless the request sets its own) and, when
    /// earlier bytes can be continued, for the rest (`Range`, `If-Range`); a `206` then stands for the `200`.
    override func prepareTransfer(_ urlRequest: inout URLRequest) -> StatusRule? {
        // The request's own code, read outside the lock.
        let destination = currentRequest?.destination
        if urlRequest.value(forHTTPHeaderField: "Accept-Encoding") == nil {
            urlRequest.setValue("identity", forHTTPHeaderField: "Accept-Encoding")
        }
        let request = urlRequest
        let resumable = withLock { partial }.flatMap { Self.resumable($0, for: request) }
        if let resumable {
            urlRequest.setValue("bytes=\(resumable.bytes)-", forHTTPHeaderField: "Range")
            urlRequest.setValue(resumable.validator.headerValue, forHTTPHeaderField: "If-Range")
        }
        let sent = urlRequest
        let prepared = ifNotCompleted { () -> (StatusRule, PartialFile.Refusal?, RequestAttempt) in
            if let partial, partial.file != resumable?.file {
                PrivateFolder.removeFile(at: partial.file)
            }
            (partial, resumeDestination) = (resumable, destination)
            return (StatusRule(partialContinuesWhole: resumable != nil), refusal.take(), currentAttempt(sending: sent))
        }
        guard let (rule, refused, attempt) = prepared else { return nil }
        if let refused {
            emit(.notice(attempt, .resumeStateRefused(reason: refused.reason)))
        }
        return rule
    }

    /// `partial` as the next attempt can continue it: cut to the bytes that are really on disk (someone may have
    /// truncated the file), one byte short of a complete file (a range from its end would be a `416`); `nil` when
    /// there is nothing to continue, or the request already asks for a range of its own.
    private static func resumable(_ partial: PartialFile, for urlRequest: URLRequest) -> PartialFile? {
        guard (urlRequest.httpMethod ?? "GET").uppercased() == "GET", urlRequest.value(forHTTPHeaderField: "Range") == nil else { return nil }
        var bytes = min(FileSink.size(of: partial.file), partial.bytes)
        if let length = partial.expectedLength, bytes >= length { bytes = length - 1 }
        guard bytes > 0 else { return nil }
        do {
            let handle = try PrivateFolder.openOwnFile(forWriting: partial.file)
            defer { try? handle.close() }
            try handle.truncate(atOffset: UInt64(bytes))
        } catch {
            return nil
        }
        var resumable = partial
        resumable.bytes = bytes
        return resumable
    }

    override func makeTask(for urlRequest: URLRequest, rules: TransferRules, callbacks: any AttemptCallbacks) throws -> any TransportTask {
        let resuming = withLock { run.statusRule.partialContinuesWhole ? partial : nil }
        let file = try PartialFile.freshFile()
        let transfer = FileSink(callbacks: callbacks, rules: rules, freshFile: file, resuming: resuming)
        withLock { self.transfer = transfer }
        return Transport.dataTask(for: urlRequest, on: session, sink: transfer)
    }

    override func transferEnded(body: ResponseBody, response: URLResponse?, error: Error?) -> Bool {
        // What the attempt left on disk becomes the next attempt's to continue. Under the lock, so that a
        // cancellation deciding about those bytes (`willDeliver`) sees them either here or in the transfer.
        _ = ifNotCompleted {
            if let transfer = transfer.take() { partial = transfer.detach() }
        }
        return true
    }

    /// What this attempt left on disk to resume from, for a recording monitor (see `transferEnded`, which runs before).
    override func bytesKept(afterBreaking response: HTTPURLResponse) -> URL? {
        withLock { partial?.file }
    }

    /// Bytes on disk that the server's range does not fit cannot be continued: they go, and the download starts again
    /// from zero (once; see ``ReattemptReason/rangeRestart``).
    override func transferVerdict(after failure: Error?) -> TransferVerdict<URL> {
        guard case .rangeMismatch? = failure as? DownloadError else { return .policies }
        withLock {
            if let partial { PrivateFolder.removeFile(at: partial.file) }
            partial = nil
        }
        return .again(.rangeRestart, delay: 0)
    }

    override func willDeliver(_ error: Error?, then runCompletion: @escaping @Sendable () -> Void) {
        if let claimed = withLock({ claimed.take() }) { PartialFile.release(claimed) }
        let discarded: URL? = withLock {
            let left = transfer.take().map { $0.detach() } ?? partial
            partial = nil
            guard let left else { return nil }
            let isCancellation = if case .cancelled? = error as? RequestQueueError { true } else { (error as? URLError)?.code == .cancelled }
            let keeps = error != nil && !(error is DownloadError) && (isCancellation ? keepsPartialFileOnCancel : keepsPartialFile)
            guard keeps else { return left.file }
            storedResumeState = ResumeState(
                url: run.sentRequest?.url,
                validator: left.validator,
                bytesReceived: left.bytes,
                expectedLength: left.expectedLength,
                partialFile: left.file,
                destination: resumeDestination
            )
            return nil
        }
        if let discarded { PrivateFolder.removeFile(at: discarded) }
        super.willDeliver(error, then: runCompletion)
    }
}

extension OperationQueue {
    /// Runs a download that can be resumed: it continues `state` (when given) with `Range` and `If-Range`, and if it
    /// fails, or is cancelled with ``DownloadRequestOperation/cancel(producingResumeState:)``, it keeps the bytes that
    /// arrived and hands `completion` the ``ResumeState`` to continue from later (`nil` on success, and when nothing
    /// that can be resumed arrived). Store it to resume after a restart.
    ///
    /// The operation is a ``DownloadRequestOperation`` (the request's own `makeOperation` is not used), with the
    /// queue's policies: a retry after a dropped connection resumes too.
    @discardableResult
    public func addRequest<T: DownloadRequest>(
        _ request: T,
        resumingFrom state: ResumeState?,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: @escaping (Result<URL, T.Failure>, ResumeState?) -> Void
    ) -> DownloadRequestOperation<T> {
        let owner = WeakOperation<T>()
        let operation = DownloadRequestOperation(
            request: request,
            session: session,
            completionQueue: completionQueue ?? underlyingQueue
        ) { result in
            completion(result, owner.operation?.resumeState)
        }
        owner.operation = operation
        operation.resume(from: state)
        register(operation, for: request)
        addOperation(operation)
        return operation
    }
}

extension OperationQueue {
    /// The `async` form of ``addRequest(_:resumingFrom:session:completionQueue:completion:)``: the result, and the
    /// state to resume from after a failure. Cancelling the calling `Task` cancels the download *keeping its bytes*
    /// (``DownloadRequestOperation/cancel(producingResumeState:)``), so the cancellation comes back with a state.
    ///
    /// ```swift
    /// let (result, resumeState) = await queue.download(DownloadVideo(id: "42"), resumingFrom: saved)
    /// ```
    public func download<T: DownloadRequest & Sendable>(
        _ request: T,
        resumingFrom state: ResumeState?,
        session: URLSession = .shared
    ) async -> (result: Result<URL, T.Failure>, resumeState: ResumeState?) {
        let cancellation = OperationCancellation()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let operation = addRequest(request, resumingFrom: state, session: session) { result, resumeState in
                    continuation.resume(returning: (result, resumeState))
                }
                cancellation.attach(operation) { $0.cancel(producingResumeState: true) }
            }
        } onCancel: {
            cancellation.cancel()
        }
    }
}

/// Lets a completion handler read its own operation without keeping it alive.
private final class WeakOperation<R: DownloadRequest> {
    weak var operation: DownloadRequestOperation<R>?
}
