#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request whose response body is written to a file; it succeeds with the file's final location.
///
/// It runs as a ``DownloadRequestOperation``: with every policy and the status check of other requests, byte
/// counts in ``RequestOperation/progress``, and flat memory. A response that fails the status check, a failure,
/// and a cancellation leave the destination as it was, and no file behind.
///
/// A download that the ``RetryPolicy`` sends again after its connection dropped resumes where it stopped
/// (`Range` and `If-Range`), when the server gave a validator. Add it with `addRequest(_:resumingFrom:…)` to also
/// keep its bytes after a failure, and resume it later from a ``ResumeState``.
public protocol DownloadRequest: DataRequest where Success == URL {
    /// Where the file goes. Default: `nil`, a new folder in the temporary directory (`Requests-Downloads-<UUID>`,
    /// mode `0700`) holding the file under the response's suggested name (or the URL's last path component); move
    /// it from there if you keep it.
    ///
    /// The finished file is mode `0600` (readable by this user only) wherever it goes, since it may hold an
    /// authenticated response: `chmod` it yourself if others must read it. Requests changes the mode of nothing
    /// it did not create, and removes nothing but its own files (with ``DownloadOptions/replaceExistingFile``, the
    /// file it replaces). Folders made by ``DownloadOptions/createIntermediateDirectories`` get the usual mode
    /// (`0777` less the umask).
    var destination: URL? { get }
    /// What to do about the destination's folder and an existing file. Default: `.createIntermediateDirectories`.
    var downloadOptions: DownloadOptions { get }
    /// What the finished file must match (a length, a SHA-256), checked before it goes to the destination; a
    /// mismatch fails with ``DownloadError`` and leaves no file. Default: `nil`, no check beyond the length the
    /// server announced for a resumed download.
    var integrity: DownloadIntegrity? { get }
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
    /// `nil`: a new folder of this user (mode `0700`) in the temporary directory.
    public var destination: URL? { nil }
    /// `.createIntermediateDirectories`.
    public var downloadOptions: DownloadOptions { .createIntermediateDirectories }
    /// `nil`: no check.
    public var integrity: DownloadIntegrity? { nil }

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
        DownloadRequestOperation(request: self, session: session, completionQueue: completionQueue, completion: completion, kind: RequestKind(isDownload: true))
    }
}
