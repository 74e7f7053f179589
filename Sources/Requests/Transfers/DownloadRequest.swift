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
/// and a cancellation leave the destination as it was, and no file behind (see `PartialDownloads` for the one
/// case Requests cannot always resolve).
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

/// Runs a ``DownloadRequest`` with a download task whose callbacks Requests receives (see `TransferSession`).
///
/// A download task, because it keeps memory flat: a data task's chunks each wait as an operation on the delegate
/// queue, with no back-pressure (`suspend()` does not stop them), and a 1 GiB download from loopback peaked at
/// 100–1,100 MiB that way, against about 50 MiB. But Foundation on Linux never deletes a download task's
/// temporary file, not even after a failure or a cancellation, and does not name it until the download has
/// succeeded; this operation takes the file at once when it is complete, and otherwise finds it (see
/// `PartialDownloads`) so that it can remove it.
public final class DownloadRequestOperation<R: DownloadRequest>: DataRequestOperation<R>, @unchecked Sendable {
    override func makeTask(for urlRequest: URLRequest, rules: TransferRules, receiver: any AttemptReceiver) throws -> URLSessionTask {
        let transfer = DownloadTransfer(receiver: receiver, rules: rules, existingFiles: PartialDownloads.existingFiles())
        return TransferSession.task(on: session, handler: transfer) { $0.downloadTask(with: urlRequest) }
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

/// The callbacks of one download task. It owns the task's files until it hands the finished one to the
/// operation, and removes them on every other path, also after the operation is gone. Its body limit is
/// ``TransferLimits/maximumDownloadSize``.
final class DownloadTransfer: AttemptTransfer, @unchecked Sendable {
    private weak var progressReceiver: (any AttemptReceiver)?
    /// Foundation's partial files that existed before this download started, so cannot be its own.
    private let existingFiles: Set<String>
    // Touched only by the callbacks, which come one at a time (see `CallbackQueue`).
    private var staged: URL?
    private var partial: String?
    private var written: Int64 = 0
    private var reported: Int64 = 0
    /// When the temporary directory was last searched: a search lists it, so it is done at most every 50 ms.
    private var lastSearch: DispatchTime?

    private var isSettled = false

    init(receiver: any AttemptReceiver, rules: TransferRules, existingFiles: Set<String>) {
        self.progressReceiver = receiver
        self.existingFiles = existingFiles
        super.init(receiver: receiver, rules: rules)
        PartialDownloads.beginSearch()
    }

    /// The file is known, taken or given up on: this download no longer makes others' files ambiguous.
    private func settle() {
        guard !isSettled else { return }
        isSettled = true
        PartialDownloads.endSearch()
    }

    override func didWrite(total: Int64, expected: Int64) {
        guard !hasEnded else {
            receivedAfterStop()
            return
        }
        moved(total - written)
        written = total
        if let limit = rules.limits.maximumDownloadSize, total > limit || expected > limit {
            // The task is cancelled; its partial file is removed when it completes.
            stop(with: TransferLimitError.responseTooLarge(limit: limit))
            return
        }
        if partial == nil, lastSearch.map({ DispatchTime.now() > $0 + 0.05 }) ?? true {
            lastSearch = .now()
            partial = PartialDownloads.claim(written: total, excluding: existingFiles)
            if partial != nil { settle() }
        }
        // Reported every 256 KiB: each report updates a Progress, and callbacks queue up while they run.
        if total - reported >= 256 * 1024 || total == expected {
            reported = total
            progressReceiver?.transferred(completed: total, expected: expected)
        }
    }

    /// Foundation leaves the file where it is forever, so it is moved to a name of ours at once.
    override func didFinishDownloading(to location: URL) {
        let staged = FileManager.default.temporaryDirectory.appendingPathComponent("Requests-download-\(UUID().uuidString)")
        do {
            try FileManager.default.moveItem(at: location, to: staged)
            self.staged = staged
        } catch {
            try? FileManager.default.removeItem(at: location)
        }
        PartialDownloads.release(partial)
        partial = nil
        settle()
    }

    override func didComplete(response: URLResponse?, error: Error?) {
        settle()
        if error != nil, staged == nil {
            PartialDownloads.remove(partial, orFind: written, excluding: existingFiles)
        } else {
            PartialDownloads.release(partial)
        }
        partial = nil
        switch (error, staged) {
        case let (error?, staged):
            staged.map { try? FileManager.default.removeItem(at: $0) } ?? ()
            finish(body: .data(Data()), response: response, error: error)
        case let (nil, staged?):
            finish(body: .file(staged), response: response, error: nil)
        case (nil, nil):
            finish(body: .data(Data()), response: response, error: URLError(.cannotWriteToFile))
        }
    }
}

/// Finds the file Foundation writes a download task to, which on Linux it neither removes after a failure or a
/// cancellation nor names: `<UUID>.tmp` in the temporary directory. A download's own file always exists and holds
/// at least what it has written when it is told its progress; so among the files of that form that did not exist
/// when it started, that are not claimed by another download and that are at least that large, a single one must
/// be its own, and only then is it claimed. While there are several (downloads side by side, or another program's
/// download), it tries again, at most every 50 ms. A download that fails before it could claim its file leaves a
/// pending search, tried again whenever another download claims or lets go of a file; failed downloads that
/// still cannot be told apart are resolved together once no download is looking for its file and their
/// candidates are exactly as many as they are. A file that stays ambiguous (another program's download appearing
/// at the same time) is left on disk rather than risk removing someone else's.
enum PartialDownloads {
    private struct Pending {
        let existing: Set<String>
        let written: Int64
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var claimed: Set<String> = []
    nonisolated(unsafe) private static var pending: [Pending] = []
    /// Downloads whose file is not known yet: while there are any, a new file may be theirs.
    nonisolated(unsafe) private static var searching = 0

    static func beginSearch() {
        locked { searching += 1 }
    }

    static func endSearch() {
        locked { searching -= 1 }
        resolvePending()
    }

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

    /// The download's own file, if it can be told apart now; claimed until released.
    static func claim(written: Int64, excluding existing: Set<String>) -> String? {
        let candidates = existingFiles().subtracting(existing)
        let path: String? = locked { unique(among: candidates, written: written) }
        if path != nil { resolvePending() }
        return path
    }

    /// Lets go of a claimed file (it was taken, or removed).
    static func release(_ path: String?) {
        guard let path else { return }
        locked { _ = claimed.remove(path) }
        resolvePending()
    }

    /// After a failure: removes the claimed file, or the one that can be told apart now, or leaves a pending search.
    static func remove(_ path: String?, orFind written: Int64, excluding existing: Set<String>) {
        if let path {
            unlink(path)
            release(path)
            return
        }
        if let found = claim(written: written, excluding: existing) {
            unlink(found)
            release(found)
        } else if written > 0 {
            locked { pending.append(Pending(existing: existing, written: written)) }
            resolvePending()
        }
    }

    /// Removes the files of failed downloads that can now be told apart.
    private static func resolvePending() {
        guard locked({ !pending.isEmpty }) else { return }
        let files = existingFiles()
        let resolved: [String] = locked {
            var found: [String] = []
            pending.removeAll { item in
                guard let path = unique(among: files.subtracting(item.existing), written: item.written) else {
                    return files.subtracting(item.existing).isEmpty // nothing left to find
                }
                found.append(path)
                return true
            }
            return found
        }
        for path in resolved {
            unlink(path)
            locked { _ = claimed.remove(path) }
        }
        removeWhenAccountedFor(files)
    }

    /// Failed downloads side by side that could not be told apart: when no download is still looking for its file
    /// and the new, unclaimed files that could be theirs are exactly as many as they are, those files are theirs.
    /// (One more file, such as another program's download, and nothing is removed.)
    private static func removeWhenAccountedFor(_ files: Set<String>) {
        let theirs: Set<String>? = locked {
            guard searching == 0, !pending.isEmpty else { return nil }
            var union: Set<String> = []
            for item in pending {
                union.formUnion(files.subtracting(item.existing).subtracting(claimed).filter { path in
                    (((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0) >= item.written
                })
            }
            guard union.count == pending.count else { return nil }
            pending.removeAll()
            return union
        }
        theirs?.forEach { unlink($0) }
    }

    /// Must be called under the lock: the single unclaimed candidate at least `written` long, claimed.
    private static func unique(among candidates: Set<String>, written: Int64) -> String? {
        let unclaimed = candidates.subtracting(claimed).filter { path in
            (((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0) >= written
        }
        guard unclaimed.count == 1, let path = unclaimed.first else { return nil }
        claimed.insert(path)
        return path
    }

    private static func locked<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }

    private static func isPartialFileName(_ name: String) -> Bool {
        name.hasSuffix(".tmp") && UUID(uuidString: String(name.dropLast(4))) != nil
    }
}
