#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The body interpreter of a ``DownloadRequest`` (see `BodyInterpreter.download`): the file the `FileSink` wrote
/// is checked, then committed to the request's destination atomically, or removed.
enum DownloadPlacement {
    /// Checks a download's file (``DownloadRequest/integrity``, a resumed download's announced length) and moves it next
    /// to its destination; the returned value's `commit` renames it into place in the step that claims the outcome.
    static func place<D: DownloadRequest>(_ body: ResponseBody, response: HTTPURLResponse, for request: D) throws -> Processed<URL> {
        guard case let .file(file) = body else {
            throw RequestQueueError.misuse("a download received no file")
        }
        try Self.verify(file, response: response, integrity: request.integrity)
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
                // rename(2) replaces an existing file atomically; link(2) fails if the destination exists, atomically,
                // so that two downloads cannot both win. The sibling goes unless it was renamed.
                let failed = (replace ? rename(sibling.path, destination.path) : link(sibling.path, destination.path)) != 0
                let code = errno
                if failed || !replace { unlink(sibling.path) }
                if failed, !replace, code == EEXIST {
                    throw CocoaError(.fileWriteFileExists, userInfo: [NSFilePathErrorKey: destination.path])
                }
                if failed { throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO) }
            },
            abandon: { try? fileManager.removeItem(at: sibling) }
        )
    }

    /// Checks the file against `integrity`, and a resumed download against the whole length its server announced.
    private static func verify(_ file: URL, response: HTTPURLResponse, integrity: DownloadIntegrity?) throws {
        let size = FileSink.size(of: file)
        let announced = response.statusCode == 206 ? ContentRange(response.value(forHTTPHeaderField: "Content-Range"))?.length : nil
        for expected in [announced, integrity?.length].compactMap({ $0 }) where expected != size {
            throw DownloadError.lengthMismatch(expected: expected, actual: size)
        }
        if let sha256 = integrity?.sha256 {
            let actual = try SHA256.hexDigest(ofFileAt: file)
            guard actual == sha256.lowercased() else {
                throw DownloadError.checksumMismatch(expected: sha256.lowercased(), actual: actual)
            }
        }
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
