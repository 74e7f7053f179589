#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The callbacks of a download's data task: each chunk is written to a file in the callback, as it arrives (they run
/// one at a time; a queue to a writer grew to 279 MiB when the disk was slower than loopback). Its body limit is
/// ``TransferLimits/maximumDownloadSize``, counted over the whole representation when it resumes.
///
/// When the attempt continues bytes an earlier one left (`resuming`, sent as `Range: bytes=N-`), the headers decide
/// where the body goes: a `206` whose `Content-Range` starts at N is appended to that file; any other 2xx replaces
/// it with a fresh file; any other status goes to a fresh file and leaves it alone. A `206` that does not fit, and
/// a `416`, end the attempt with ``DownloadError/rangeMismatch(contentRange:status:)``.
///
/// A fresh file is created `0600`, exclusively and without following a link (`PrivateFolder.createFile(at:)`), in
/// Requests' private folder.
///
/// The file is handed to the operation with a complete body. Otherwise the operation calls ``detach()``, which
/// stops the writes and says what is left on disk to resume from, removing what is of no use.
final class FileSink: TransferSink, @unchecked Sendable {
    private weak var progressCallbacks: (any AttemptCallbacks)?
    private let resuming: PartialFile?
    private let freshFile: URL
    // Guarded by `lock`: a rule or the operation may stop the transfer from another thread while a chunk is written.
    private var handle: FileHandle?
    /// The file this attempt writes, chosen when the headers arrive.
    private var target: URL?
    /// Bytes of the representation in `target`.
    private var written: Int64 = 0
    private var reported: Int64 = 0
    /// The representation's full length, or -1.
    private var expected: Int64 = -1
    /// The validator of the body being written, when it can be resumed.
    private var validator: ResumeState.Validator?
    /// Whether `resuming` still holds the download's bytes (a 2xx other than the `206` replaces them).
    private var keepsResumed = true
    private var isStopped = false
    private var isDetached = false
    private var isHandedOver = false

    init(callbacks: any AttemptCallbacks, rules: TransferRules, freshFile: URL, resuming: PartialFile?) {
        self.progressCallbacks = callbacks
        self.freshFile = freshFile
        self.resuming = resuming
        super.init(callbacks: callbacks, rules: rules)
    }

    deinit {
        // Never detached (the operation always detaches; this is a safety net): the attempt's own file goes.
        if !isDetached, !isHandedOver, let target, target != resuming?.file {
            PrivateFolder.removeFile(at: target)
        }
    }

    override var bodyLimit: Int64? {
        rules.limits.maximumDownloadSize
    }

    override func shouldAccept(_ response: URLResponse) -> Bool {
        guard super.shouldAccept(response) else { return false }
        let http = response as? HTTPURLResponse
        let status = http?.statusCode ?? 200
        let contentRangeHeader = http?.value(forHTTPHeaderField: "Content-Range")
        let range = ContentRange(contentRangeHeader)
        let mismatch = DownloadError.rangeMismatch(contentRange: contentRangeHeader, status: status)
        var file = freshFile
        var offset: Int64 = 0
        var total = ResponseBodyRule.expectedLength(of: response, method: rules.method)
        var validator = http.flatMap(PartialFile.validator(of:))
        if status == 206 {
            if let resuming {
                let etag = http?.value(forHTTPHeaderField: "ETag")?.trimmingCharacters(in: .whitespaces)
                let sameTag = if case .entityTag = resuming.validator { etag == nil || etag == resuming.validator.headerValue } else { true }
                let sameLength = range?.length == nil || resuming.expectedLength == nil || range?.length == resuming.expectedLength
                guard let range, range.first == resuming.bytes, sameLength, sameTag else { return refuse(mismatch) }
                (file, offset, validator) = (resuming.file, resuming.bytes, resuming.validator)
                total = range.length ?? resuming.expectedLength ?? -1
            } else {
                // Asked for everything: only a range that is everything will do.
                guard let range, range.first == 0, let length = range.length, range.last == length - 1 else { return refuse(mismatch) }
                total = length
            }
        } else if status == 416, resuming != nil {
            return refuse(mismatch)
        }
        if let limit = bodyLimit, total > limit {
            return refuse(TransferLimitError.responseTooLarge(limit: limit))
        }
        let replacesResumed = (200..<300).contains(status) && file != resuming?.file && resuming != nil
        var opened: FileHandle?
        if offset > 0 {
            do {
                let handle = try PrivateFolder.openOwnFile(forWriting: file)
                try handle.truncate(atOffset: UInt64(offset))
                try handle.seekToEnd()
                opened = handle
            } catch {
                return refuse(error)
            }
        }
        lock.withLock {
            (target, written, reported, expected, handle) = (file, offset, offset, total, opened)
            self.validator = (200..<300).contains(status) ? validator : nil
            if replacesResumed { keepsResumed = false }
        }
        if replacesResumed, let resuming {
            PrivateFolder.removeFile(at: resuming.file)
        }
        if offset > 0 {
            progressCallbacks?.transferred(completed: offset, expected: total)
        }
        return true
    }

    override func didReceive(_ data: Data) {
        moved(Int64(data.count))
        let wrote = receiving { () -> (Result<Void, Error>, total: Int64, expected: Int64, report: Bool)? in
            guard !isStopped, !isDetached else { return nil }
            let outcome = Result { try write(data) }
            written += Int64(data.count)
            let report = written - reported >= 256 * 1024 || written == expected
            if report { reported = written }
            return (outcome, written, expected, report)
        }
        guard let (outcome, total, expected, report) = wrote else { return }
        if case let .failure(error) = outcome {
            stop(with: error)
        } else if let limit = bodyLimit, total > limit {
            stop(with: TransferLimitError.responseTooLarge(limit: limit))
        } else if report {
            // Every 256 KiB: each report updates a Progress.
            progressCallbacks?.transferred(completed: total, expected: expected)
        }
    }

    /// Must be called under `lock`.
    private func write(_ data: Data) throws {
        if handle == nil {
            let file = target ?? freshFile
            // A file that could not be created is not this attempt's: nothing will remove it.
            target = nil
            handle = try PrivateFolder.createFile(at: file)
            target = file
        }
        try handle?.write(contentsOf: data)
    }

    override func dropBody() {
        let handle = lock.withLock {
            isStopped = true
            return self.handle.take()
        }
        try? handle?.close()
    }

    override func didComplete(response: URLResponse?, error: Error?) {
        lock.lock()
        let complete = error == nil && !isStopped && !isDetached
        if complete { isHandedOver = true }
        let handle = self.handle.take()
        let file = target ?? freshFile
        let cut = error.flatMap { Self.cutConnection($0, received: written, expected: expected) }
        lock.unlock()
        try? handle?.close()
        guard complete else {
            finish(body: .data(Data()), response: response, error: cut ?? error ?? URLError(.cancelled))
            return
        }
        // An empty body never created the file.
        if !FileManager.default.fileExists(atPath: file.path) {
            do {
                try PrivateFolder.createFile(at: file).close()
            } catch {
                finish(body: .data(Data()), response: response, error: error)
                return
            }
        }
        finish(body: .file(file), response: response, error: nil)
    }

    /// Stops the writes for good and returns what is left on disk to resume from: the bytes this attempt appended
    /// to, or the body it wrote if that can be resumed, or else the bytes it was to continue. Removes a file that
    /// cannot be resumed (an error body, a body without a validator). `nil` once the file has been handed over.
    func detach() -> PartialFile? {
        let state = lock.withLock { () -> (FileHandle?, URL?, ResumeState.Validator?, Int64, Bool, Bool)? in
            guard !isDetached else { return nil }
            isDetached = true
            return (handle.take(), target, validator, expected, isHandedOver, keepsResumed)
        }
        guard let (handle, target, validator, expected, isHandedOver, keepsResumed) = state else { return nil }
        try? handle?.close()
        var left = keepsResumed ? resuming : nil
        guard let target else { return left }
        if isHandedOver {
            return target == resuming?.file ? nil : left
        }
        let size = Self.size(of: target)
        if target == resuming?.file, let resuming {
            left = size > 0 ? PartialFile(file: target, bytes: size, validator: resuming.validator, expectedLength: expected > 0 ? expected : resuming.expectedLength) : nil
        } else if let validator, size > 0 {
            left = PartialFile(file: target, bytes: size, validator: validator, expectedLength: expected > 0 ? expected : nil)
        } else {
            PrivateFolder.removeFile(at: target)
            return left
        }
        if left == nil { PrivateFolder.removeFile(at: target) }
        return left
    }

    static func size(of file: URL) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: file.path))?[.size] as? NSNumber)?.int64Value ?? 0
    }
}
