#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request whose response body is written to a file; it succeeds with the file's final location.
///
/// It runs as a ``DownloadRequestOperation``: with every policy and the status check of other requests, byte
/// counts in ``RequestOperation/progress``, and flat memory. A response that fails the status check, a failure,
/// and a cancellation leave no file behind.
public protocol DownloadRequest: DataRequest where Success == URL {
    /// Where the file goes. Default: `nil`, a new folder in the temporary directory holding the file under the
    /// response's suggested name; move it from there if you keep it.
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

/// Runs a ``DownloadRequest`` with a download task on a ``TransferSession`` derived from its session.
///
/// Foundation on Linux never deletes a download's temporary file, not even after a failure or a
/// cancellation, and does not say where a failed one is; this operation takes the file as soon as it is
/// complete and, while it is being written, finds it (see `PartialDownloads`), so that it can remove it on
/// every path.
public final class DownloadRequestOperation<R: DownloadRequest>: DataRequestOperation<R>, @unchecked Sendable {
    override func makeTask(for urlRequest: URLRequest, receiver: any AttemptReceiver) throws -> URLSessionTask {
        let (transferSession, delegate) = TransferSession.session(for: session)
        let transfer = DownloadTransfer(receiver: receiver, existingFiles: PartialDownloads.existingFiles())
        let task = transferSession.downloadTask(with: urlRequest)
        delegate.register(transfer, for: task)
        return task
    }

    override func process(_ body: ResponseBody, response: HTTPURLResponse, of request: R) throws -> URL {
        guard case let .file(file) = body else {
            throw RequestQueueError.misuse("a download received no file")
        }
        let fileManager = FileManager.default
        let destination = try request.destination ?? Self.defaultDestination(for: response)
        let options = request.downloadOptions
        if options.contains(.createIntermediateDirectories) {
            try fileManager.createDirectory(at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
        }
        if options.contains(.replaceExistingFile), fileManager.fileExists(atPath: destination.path) {
            try fileManager.removeItem(at: destination)
        }
        try fileManager.moveItem(at: file, to: destination)
        return destination
    }

    override func discard(_ body: ResponseBody) {
        if case let .file(file) = body {
            try? FileManager.default.removeItem(at: file)
        }
    }

    private static func defaultDestination(for response: HTTPURLResponse) throws -> URL {
        let name = response.suggestedFilename.flatMap { $0.isEmpty ? nil : $0 } ?? "download"
        return FileManager.default.temporaryDirectory
            .appendingPathComponent("Requests-Downloads-\(UUID().uuidString)", isDirectory: true)
            .appendingPathComponent((name as NSString).lastPathComponent)
    }
}

/// The callbacks of one download task. It owns the task's files until it hands the finished one to the
/// operation, and removes them on every other path, also after the operation is gone.
final class DownloadTransfer: TransferHandler, @unchecked Sendable {
    private weak var receiver: (any AttemptReceiver)?
    /// Foundation's partial files that existed before this download started, so cannot be its own.
    private let existingFiles: Set<String>
    // Touched only on the transfer session's serial delegate queue.
    private var staged: URL?
    private var partial: String?

    init(receiver: any AttemptReceiver, existingFiles: Set<String>) {
        self.receiver = receiver
        self.existingFiles = existingFiles
    }

    func didWrite(total: Int64, expected: Int64) {
        if partial == nil {
            partial = PartialDownloads.claim(written: total, excluding: existingFiles)
        }
        receiver?.transferred(completed: total, expected: expected)
    }

    /// Foundation leaves the file where it is forever, so it is moved to a name of ours at once.
    func didFinishDownloading(to location: URL) {
        let staged = FileManager.default.temporaryDirectory.appendingPathComponent("Requests-download-\(UUID().uuidString)")
        do {
            try FileManager.default.moveItem(at: location, to: staged)
            self.staged = staged
        } catch {
            try? FileManager.default.removeItem(at: location)
        }
        PartialDownloads.release(partial)
        partial = nil
    }

    func didComplete(response: URLResponse?, error: Error?) {
        if let partial {
            unlink(partial)
            PartialDownloads.release(partial)
        }
        let receiver = self.receiver
        switch (error, staged) {
        case let (error?, staged):
            staged.map { try? FileManager.default.removeItem(at: $0) } ?? ()
            receiver?.receive(body: .data(Data()), response: response, error: error)
        case let (nil, staged?):
            if let receiver {
                receiver.receive(body: .file(staged), response: response, error: nil)
            } else {
                try? FileManager.default.removeItem(at: staged)
            }
        case (nil, nil):
            receiver?.receive(body: .data(Data()), response: response, error: URLError(.cannotWriteToFile))
        }
    }
}

/// Finds the file Foundation writes a download to, which on Linux it neither removes after a failure or a
/// cancellation nor names: `<UUID>.tmp` in the temporary directory. A download's own file always exists and holds
/// at least what it has written when it is told its progress; so among the files of that form that did not exist
/// when it started, that are not claimed by another download and that are at least that large, a single one must
/// be its own. While there are several (downloads running side by side), it tries again at its next progress.
enum PartialDownloads {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var claimed: Set<String> = []

    /// The partial files in the temporary directory now.
    static func existingFiles() -> Set<String> {
        #if canImport(FoundationNetworking)
        let directory = NSTemporaryDirectory()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return Set(names.filter(isPartialFileName).map { (directory as NSString).appendingPathComponent($0) })
        #else
        return []
        #endif
    }

    static func claim(written: Int64, excluding existing: Set<String>) -> String? {
        let candidates = existingFiles().subtracting(existing).filter { path in
            let size = ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
            return size >= written
        }
        lock.lock()
        defer { lock.unlock() }
        let unclaimed = candidates.subtracting(claimed)
        guard unclaimed.count == 1, let path = unclaimed.first else { return nil }
        claimed.insert(path)
        return path
    }

    static func release(_ path: String?) {
        guard let path else { return }
        lock.lock()
        defer { lock.unlock() }
        claimed.remove(path)
    }

    private static func isPartialFileName(_ name: String) -> Bool {
        name.hasSuffix(".tmp") && UUID(uuidString: String(name.dropLast(4))) != nil
    }
}
