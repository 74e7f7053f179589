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
        let options = request.downloadOptions
        let destination: URL
        if let given = request.destination {
            destination = given
            if options.contains(.createIntermediateDirectories) {
                try fileManager.createDirectory(at: given.deletingLastPathComponent(), withIntermediateDirectories: true)
            }
        } else {
            destination = try Self.defaultDestination(for: response)
        }
        let folder = destination.deletingLastPathComponent()
        // Moved next to the destination first (a copy, across file systems), and renamed into place only in the
        // step that claims the outcome, so that a cancellation that wins leaves the destination as it was.
        let sibling = folder.appendingPathComponent(".Requests-download-\(UUID().uuidString)")
        try Self.move(file, to: sibling)
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
            abandon: { PrivateFolder.removeFile(at: sibling) }
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

    /// A new folder of this user, mode `0700`, in the temporary directory, and in it the response's suggested name.
    private static func defaultDestination(for response: HTTPURLResponse) throws -> URL {
        // Linux answers "Unknown" when the response suggests no name.
        let suggested = response.suggestedFilename.flatMap { $0.isEmpty || $0 == "Unknown" ? nil : $0 }
        let name = suggested ?? response.url?.lastPathComponent.nonEmpty ?? "download"
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("Requests-Downloads-\(UUID().uuidString)", isDirectory: true)
        return try PrivateFolder.ensure(folder).appendingPathComponent((name as NSString).lastPathComponent)
    }

    /// Moves the download's file (`0600`, Requests') to `sibling`, a new name: renamed, so its mode goes with it;
    /// across file systems, copied into a file created `0600` (`PrivateFolder.createFile(at:)`), then removed.
    private static func move(_ file: URL, to sibling: URL) throws {
        guard rename(file.path, sibling.path) != 0 else { return }
        let code = errno
        guard code == EXDEV else { throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO, userInfo: [NSFilePathErrorKey: sibling.path]) }
        let output = try PrivateFolder.createFile(at: sibling)
        do {
            defer { try? output.close() }
            let input = try FileHandle(forReadingFrom: file)
            defer { try? input.close() }
            while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
                try output.write(contentsOf: chunk)
            }
        } catch {
            unlink(sibling.path)
            throw error
        }
        unlink(file.path)
    }
}

extension String {
    fileprivate var nonEmpty: String? { isEmpty || self == "/" ? nil : self }
}
