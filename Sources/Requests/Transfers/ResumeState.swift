#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where an interrupted download stands: the bytes it kept on disk, and what proves they still belong to the
/// resource. Store it (it is `Codable`) and pass it to `addRequest(_:resumingFrom:…)` to fetch only the rest, in
/// this process or after a restart.
///
/// A download resumes with `Range: bytes=N-` and `If-Range: <validator>`: a server that still has the same
/// representation answers `206` with the missing bytes, which are appended; one whose resource changed (or that
/// ignores ranges) answers `200`, and the download starts again from zero, into a fresh file.
public struct ResumeState: Codable, Sendable, Hashable {
    /// What identifies the representation the bytes came from, sent back as `If-Range`.
    public enum Validator: Codable, Sendable, Hashable {
        /// A strong `ETag`, quotes included. A weak one (`W/"…"`) cannot be used in `If-Range`, so a download that
        /// only has a weak one cannot resume.
        case entityTag(String)
        /// `Last-Modified`, when the response had no strong `ETag`.
        case lastModified(String)

        /// The header value.
        public var headerValue: String {
            switch self {
            case let .entityTag(value), let .lastModified(value): return value
            }
        }
    }

    /// The URL the download was sent to. Informational: a resumed download goes to its request's URL (a fresh
    /// signed URL, say), and the ``validator`` is what ties the bytes to the resource.
    public let url: URL?
    /// What the server called this representation.
    public let validator: Validator
    /// How many bytes of it are in ``partialFile``.
    public let bytesReceived: Int64
    /// Its full length, when the server said.
    public let expectedLength: Int64?
    /// The file holding the first ``bytesReceived`` bytes, mode `0600`, in Requests' private folder
    /// (`Requests-<uid>`, mode `0700`, in the temporary directory). Requests owns it: resuming moves it to the
    /// destination or removes it; call ``discard()`` to give up on it. A stored state is untrusted input: only the
    /// file's *name* is taken from it, and Requests resumes (or discards) only a file of that name in its private
    /// folder (checked first: a real folder, not a link, of this user), if the name is one Requests gives
    /// (`Requests-download-` and a UUID) and the file is a regular file of this user, not a link, and if the counts
    /// make sense (``bytesReceived`` above zero, ``expectedLength`` not below it). Any other state starts the
    /// download from zero in a fresh file, touches no file, and is told to monitors as
    /// ``RequestNotice/resumeStateRefused(reason:)``. A file shorter than ``bytesReceived`` resumes from the bytes
    /// it still has.
    public let partialFile: URL
    /// Where the download was to go, if its request said.
    public let destination: URL?

    /// A state, for example one you stored yourself.
    public init(url: URL?, validator: Validator, bytesReceived: Int64, expectedLength: Int64?, partialFile: URL, destination: URL?) {
        self.url = url
        self.validator = validator
        self.bytesReceived = bytesReceived
        self.expectedLength = expectedLength
        self.partialFile = partialFile
        self.destination = destination
    }

    /// Removes the partial file, for a download you will not resume. Only a file Requests made for a download is
    /// removed (see ``partialFile``): a state edited to name another file or a folder removes nothing.
    public func discard() {
        if let own = PartialFile(trusting: self) { PrivateFolder.removeFile(at: own.file) }
    }
}

/// What a completed download must match: checked before the file goes to its destination.
public struct DownloadIntegrity: Sendable, Hashable {
    /// The exact length in bytes, or `nil`.
    public var length: Int64?
    /// The SHA-256 of the file as 64 hexadecimal digits (either case), or `nil`.
    public var sha256: String?

    /// Checks the length, the SHA-256, or both.
    public init(length: Int64? = nil, sha256: String? = nil) {
        self.length = length
        self.sha256 = sha256
    }

    /// Checks the SHA-256.
    public static func sha256(_ hexDigest: String) -> DownloadIntegrity {
        DownloadIntegrity(sha256: hexDigest)
    }

    /// Checks the length.
    public static func length(_ bytes: Int64) -> DownloadIntegrity {
        DownloadIntegrity(length: bytes)
    }
}

/// A download whose bytes cannot be trusted: nothing is written to the destination.
public enum DownloadError: Error, Equatable, CustomStringConvertible {
    /// The file's length is not the one expected: the request's ``DownloadIntegrity/length``, or the length the
    /// server announced for the whole representation.
    case lengthMismatch(expected: Int64, actual: Int64)
    /// The file's SHA-256 is not ``DownloadIntegrity/sha256``.
    case checksumMismatch(expected: String, actual: String)
    /// A resumed download's answer did not fit the bytes on disk: a `206` whose `Content-Range` (carried here,
    /// `nil` when missing) does not start where they end or names another length, a `206` to a request that
    /// asked for no range, a `206` with another `ETag`, or a `416`. The partial file is removed, and the download
    /// starts again from zero once; this error ends it if that happens again.
    case rangeMismatch(contentRange: String?, status: Int)

    /// Says what did not match.
    public var description: String {
        switch self {
        case let .lengthMismatch(expected, actual):
            return "The download has \(actual) bytes where \(expected) were expected."
        case let .checksumMismatch(expected, actual):
            return "The download's SHA-256 is \(actual), not \(expected)."
        case let .rangeMismatch(contentRange, status):
            return "The server's \(status) answer (Content-Range \(contentRange.map { "'\($0)'" } ?? "missing")) does not continue the bytes already downloaded."
        }
    }
}

extension PartialFile {
    /// The prefix of the files Requests writes a download into, in its private folder, before a UUID.
    static let namePrefix = "Requests-download-"

    /// A fresh name for a download's body, of Requests' own naming, in its private folder (see
    /// `PrivateFolder.requestsFolder()`, made if missing); the file is made `0600` by the first write.
    static func freshFile() throws -> URL {
        try PrivateFolder.requestsFolder().appendingPathComponent(namePrefix + UUID().uuidString)
    }

    /// Why a ``ResumeState`` was not trusted: the reason told to monitors
    /// (``RequestNotice/resumeStateRefused(reason:)``).
    struct Refusal: Error, Equatable {
        let reason: String

        static let counts = Refusal(reason: "counts make no sense")
        static let notOurs = Refusal(reason: "not a partial file of this user made by Requests")
        static let gone = Refusal(reason: "the partial file is gone")
        static let inUse = Refusal(reason: "another download is continuing the same partial file")
    }

    private static let claimsLock = NSLock()
    nonisolated(unsafe) private static var claims: Set<String> = []

    /// Claims `file` for one download until ``release(_:)``: `false` if another download of this process holds it
    /// (two resumes of one state would write into one file).
    static func claim(_ file: URL) -> Bool {
        claimsLock.withLock { claims.insert(file.lastPathComponent).inserted }
    }

    /// Lets another download continue `file`.
    static func release(_ file: URL) {
        _ = claimsLock.withLock { claims.remove(file.lastPathComponent) }
    }

    /// The bytes `state` describes, if they may be continued; `nil` for a state that fails a check (see
    /// ``ResumeState/partialFile``).
    init?(trusting state: ResumeState) {
        guard case let .success(partial) = Self.trusting(state) else { return nil }
        self = partial
    }

    /// The bytes `state` describes, or why they may not be continued. Only the file's name is taken from the
    /// state, and only if it is one Requests gives: the file is looked for in Requests' private folder (checked
    /// as it is before any use), so no state can point elsewhere.
    static func trusting(_ state: ResumeState) -> Result<PartialFile, Refusal> {
        guard state.bytesReceived > 0, (state.expectedLength ?? .max) >= state.bytesReceived else { return .failure(.counts) }
        let name = state.partialFile.lastPathComponent
        guard state.partialFile.isFileURL, name.hasPrefix(Self.namePrefix), UUID(uuidString: String(name.dropFirst(Self.namePrefix.count))) != nil,
            let folder = try? PrivateFolder.requestsFolder()
        else { return .failure(.notOurs) }
        let file = folder.appendingPathComponent(name)
        var info = stat()
        guard lstat(file.path, &info) == 0 else { return .failure(.gone) }
        // A regular file (not a link, a folder or a device) of this process's user.
        // A regular file with one name (a hard link would make another file's bytes ours to write) of this user.
        guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), info.st_nlink == 1, info.st_uid == getuid() else { return .failure(.notOurs) }
        return .success(PartialFile(file: file, bytes: state.bytesReceived, validator: state.validator, expectedLength: state.expectedLength))
    }
}

/// The bytes a download holds on disk between its attempts: the internal form of a ``ResumeState``.
struct PartialFile: Sendable, Equatable {
    var file: URL
    var bytes: Int64
    var validator: ResumeState.Validator
    var expectedLength: Int64?

    /// The validator of `response`, if a download of it can be resumed: a strong `ETag`, else `Last-Modified`;
    /// none for a body with a `Content-Encoding` (Foundation decodes it, so the bytes on disk are not the
    /// representation a range counts in) or a value that could not be sent back as a header.
    static func validator(of response: HTTPURLResponse) -> ResumeState.Validator? {
        let encoding = response.value(forHTTPHeaderField: "Content-Encoding")?.trimmingCharacters(in: .whitespaces).lowercased()
        guard encoding == nil || encoding == "" || encoding == "identity" else { return nil }
        let validator: ResumeState.Validator
        if let tag = response.value(forHTTPHeaderField: "ETag")?.trimmingCharacters(in: .whitespaces), tag.hasPrefix("\""), tag.count >= 2, tag.hasSuffix("\"") {
            validator = .entityTag(tag)
        } else if let date = response.value(forHTTPHeaderField: "Last-Modified")?.trimmingCharacters(in: .whitespaces), !date.isEmpty {
            validator = .lastModified(date)
        } else {
            return nil
        }
        guard (try? HeaderSafety.check(name: "If-Range", value: validator.headerValue)) != nil else { return nil }
        return validator
    }
}

/// A `Content-Range: bytes first-last/length` value (`length` may be `*`).
struct ContentRange: Equatable {
    let first: Int64
    let last: Int64
    let length: Int64?

    init?(_ value: String?) {
        guard let value else { return nil }
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, last >= first else { return nil }
        (self.first, self.last) = (first, last)
        if parts[1] == "*" {
            length = nil
        } else {
            guard let total = Int64(parts[1]), total > last else { return nil }
            length = total
        }
    }
}
