#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A request whose response body is written to a file; it succeeds with the file's final location.
///
/// It runs as a ``DownloadRequestOperation``: with every policy and the status check of other requests, byte
/// counts in ``RequestOperation/progress``, and flat memory. A response that fails the status check, a failure,
/// and a cancellation leave the destination as it was, and no file behind.
public protocol DownloadRequest: DataRequest where Success == URL {
    /// Where the file goes. Default: `nil`, a new folder in the temporary directory holding the file under the
    /// response's suggested name (or the URL's last path component); move it from there if you keep it.
    var destination: URL? { get }
    /// What to do about the destination's folder and an existing file. Default: `.createIntermediateDirectories`.
    var downloadOptions: DownloadOptions { get }
}

/// What a download may do at its destination.
public struct DownloadOptions: OptionSet, Sendable {
    /// The raw bits.
    public let rawValue: Int

    /// Options from raw bits.
    public init(rawValue: Int) {
        self.rawValue = rawValue
    }

    /// Create the destination's folder and its parents when they are missing.
    public static let createIntermediateDirectories = DownloadOptions(rawValue: 1 << 0)
    /// Replace a file already at the destination; without it, the download fails with the file manager's
    /// `CocoaError(.fileWriteFileExists)` and the existing file is kept.
    public static let replaceExistingFile = DownloadOptions(rawValue: 1 << 1)
}

extension DownloadRequest {
    /// `nil`: a new folder in the temporary directory.
    public var destination: URL? { nil }
    /// `.createIntermediateDirectories`.
    public var downloadOptions: DownloadOptions { .createIntermediateDirectories }

    /// Not used: a download's body is a file, which ``DownloadRequestOperation`` moves into place.
    public func processData(_ data: Data) throws -> URL {
        throw RequestQueueError.misuse("a download's body is a file, not data")
    }

    /// Creates a ``DownloadRequestOperation``.
    public func makeOperation(
        session: URLSession,
        completionQueue: DispatchQueue?,
        completion: CompletionType?
    ) -> RequestOperation<URL, Failure> {
        DownloadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion)
    }
}

/// Runs a ``DownloadRequest`` with a data task whose body Requests writes to a file of its own as it arrives (see
/// `FileTransfer`), so that memory stays flat and the file is always Requests' to keep, move or remove.
///
/// Not a download task: on Linux Foundation never deletes a download task's temporary file, not even after a
/// failure or a cancellation, and does not name it until the download has succeeded; and a download task cannot
/// append to a file, which resuming needs. Measured (docs/reliability.md): writing each chunk in the session's
/// callback ran at 414–444 MiB/s with a flat 36 MB peak for 1 GiB, a download task at 220–328 MiB/s.
public final class DownloadRequestOperation<R: DownloadRequest>: DataRequestOperation<R>, @unchecked Sendable {
    override func makeTask(for urlRequest: URLRequest, rules: TransferRules, receiver: any AttemptReceiver) throws -> URLSessionTask {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("Requests-download-\(UUID().uuidString)")
        let transfer = FileTransfer(receiver: receiver, rules: rules, file: file)
        return TransferSession.task(on: session, handler: transfer) { $0.dataTask(with: urlRequest) }
    }

    override func process(_ body: ResponseBody, response: HTTPURLResponse, of request: R) throws -> Processed<URL> {
        guard case let .file(file) = body else {
            throw RequestQueueError.misuse("a download received no file")
        }
        let fileManager = FileManager.default
        let destination = try request.destination ?? Self.defaultDestination(for: response)
        let options = request.downloadOptions
        let folder = destination.deletingLastPathComponent()
        if options.contains(.createIntermediateDirectories) {
            try fileManager.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        // Moved next to the destination first (a copy, across file systems), and renamed into place only in the
        // step that claims the outcome, so that a cancellation that wins leaves the destination as it was.
        let sibling = folder.appendingPathComponent(".Requests-download-\(UUID().uuidString)")
        try fileManager.moveItem(at: file, to: sibling)
        let replace = options.contains(.replaceExistingFile)
        return Processed(
            value: destination,
            commit: {
                do {
                    if replace {
                        // rename(2) replaces an existing file atomically.
                        guard rename(sibling.path, destination.path) == 0 else {
                            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                        }
                    } else {
                        // link(2) fails if the destination exists, atomically, so two downloads cannot both win.
                        guard link(sibling.path, destination.path) == 0 else {
                            if errno == EEXIST {
                                throw CocoaError(.fileWriteFileExists, userInfo: [NSFilePathErrorKey: destination.path])
                            }
                            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                        }
                        unlink(sibling.path)
                    }
                } catch {
                    unlink(sibling.path)
                    throw error
                }
            },
            abandon: { try? fileManager.removeItem(at: sibling) }
        )
    }

    private static func defaultDestination(for response: HTTPURLResponse) throws -> URL {
        // Linux answers "Unknown" when the response suggests no name.
        let suggested = response.suggestedFilename.flatMap { $0.isEmpty || $0 == "Unknown" ? nil : $0 }
        let name = suggested ?? response.url?.lastPathComponent.nonEmpty ?? "download"
        return FileManager.default.temporaryDirectory
            .appendingPathComponent("Requests-Downloads-\(UUID().uuidString)", isDirectory: true)
            .appendingPathComponent((name as NSString).lastPathComponent)
    }
}

extension String {
    fileprivate var nonEmpty: String? { isEmpty || self == "/" ? nil : self }
}

/// The callbacks of a download's data task: each chunk is written to `file` as it arrives, in the callback (the
/// session's callbacks run one at a time; the write keeps memory flat, where a queue between the session and a
/// writer grew to 279 MiB when the disk was slower than loopback). Its body limit is
/// ``TransferLimits/maximumDownloadSize``. It owns the file until it hands it to the operation, and removes it on
/// every other path.
final class FileTransfer: AttemptTransfer, @unchecked Sendable {
    private weak var progressReceiver: (any AttemptReceiver)?
    private let file: URL
    // Guarded by `lock`: a rule may stop the transfer from another thread while a chunk is written.
    private var handle: FileHandle?
    private var written: Int64 = 0
    private var reported: Int64 = 0
    private var expected: Int64 = -1
    private var isDropped = false

    init(receiver: any AttemptReceiver, rules: TransferRules, file: URL) {
        self.progressReceiver = receiver
        self.file = file
        super.init(receiver: receiver, rules: rules)
    }

    override var bodyLimit: Int64? {
        rules.limits.maximumDownloadSize
    }

    override func shouldAccept(_ response: URLResponse) -> Bool {
        lock.lock()
        expected = response.expectedContentLength
        lock.unlock()
        return super.shouldAccept(response)
    }

    override func didReceive(_ data: Data) {
        moved(Int64(data.count))
        lock.lock()
        guard !isOverUnderLock, !isDropped else {
            lock.unlock()
            receivedAfterStop()
            return
        }
        let outcome = Result { try write(data) }
        written += Int64(data.count)
        let total = written
        let expected = self.expected
        let report = total - reported >= 256 * 1024 || total == expected
        if report { reported = total }
        lock.unlock()
        if case let .failure(error) = outcome {
            stop(with: error)
        } else if let limit = bodyLimit, total > limit {
            stop(with: TransferLimitError.responseTooLarge(limit: limit))
        } else if report {
            // Every 256 KiB: each report updates a Progress.
            progressReceiver?.transferred(completed: total, expected: expected)
        }
    }

    /// Must be called under `lock`.
    private func write(_ data: Data) throws {
        if handle == nil {
            guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: file.path])
            }
            handle = try FileHandle(forWritingTo: file)
        }
        try handle?.write(contentsOf: data)
    }

    /// Closes the file; removes it too unless it is `kept`.
    private func closeFile(keeping kept: Bool) {
        lock.lock()
        let handle = self.handle
        self.handle = nil
        if !kept { isDropped = true }
        lock.unlock()
        try? handle?.close()
        if !kept { try? FileManager.default.removeItem(at: file) }
    }

    override func dropBody() {
        closeFile(keeping: false)
    }

    override func didComplete(response: URLResponse?, error: Error?) {
        lock.lock()
        let complete = error == nil && !isDropped
        lock.unlock()
        closeFile(keeping: complete)
        guard complete else {
            finish(body: .data(Data()), response: response, error: error)
            return
        }
        // An empty body never created the file.
        guard FileManager.default.fileExists(atPath: file.path) || FileManager.default.createFile(atPath: file.path, contents: nil) else {
            finish(body: .data(Data()), response: response, error: CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: file.path]))
            return
        }
        finish(body: .file(file), response: response, error: nil)
    }
}
