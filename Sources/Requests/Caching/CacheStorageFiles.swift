import Foundation

/// The storage's files: written under a temporary name and renamed, in a folder only this user can read (see
/// `PrivateFolder`), and the key of the cache's digests. No lock is needed here.
extension CacheStorage {
    /// The 32 bytes of `directory`'s `partition-key` file, made (0600) if missing; `nil` when it cannot be read or made.
    /// A damaged one (a crash between its creation and its write, another size, a link) is replaced.
    static func readOrMakePartitionKey(in directory: URL, tightening: Bool) -> [UInt8]? {
        let url = directory.appendingPathComponent("partition-key", isDirectory: false)
        if let key = try? PrivateFolder.readOwnFile(url, expectedSize: 32) { return Array(key) }
        let key = (0..<32).map { _ in UInt8.random(in: .min ... .max) }
        guard (try? Self.ensure(directory, tightening: tightening)) != nil else { return nil }
        if (try? PrivateFolder.write(Data(key), to: url)) != nil { return key }
        // Another process may have made it meanwhile; else what is there is damaged, and replaced whole.
        if let made = try? PrivateFolder.readOwnFile(url, expectedSize: 32) { return Array(made) }
        let temporary = directory.appendingPathComponent(temporaryPrefix + UUID().uuidString, isDirectory: false)
        guard (try? PrivateFolder.write(Data(key), to: temporary)) != nil, moveFile(temporary, to: url) else {
            removeFile(temporary)
            return nil
        }
        return key
    }

    /// What ``writeTemporaryFile(_:in:)`` made.
    struct TemporaryFile {
        /// The finished temporary file, or nil if it couldn't be written.
        var url: URL?
        /// Whether the directory had to be created: the index then no longer matches it.
        var directoryWasMissing: Bool
    }

    /// Writes `contents` to a new temporary file in `directory`, creating the directory if the first attempt fails.
    ///
    /// Creation is tried on every write that fails, so a directory that was missing or blocked for a while is used
    /// again as soon as it can be made.
    func writeTemporaryFile(_ contents: Data, in directory: URL) -> TemporaryFile? {
        let url = directory.appendingPathComponent(Self.temporaryPrefix + UUID().uuidString, isDirectory: false)
        if (try? PrivateFolder.write(contents, to: url)) != nil {
            return TemporaryFile(url: url, directoryWasMissing: false)
        }
        var isDirectory: ObjCBool = false
        let existed = FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory)
        if existed, isDirectory.boolValue {
            // The directory is there but won't take the file (read-only, full): nothing to fix here.
            Self.removeFile(url)
            return nil
        }
        guard (try? Self.ensure(directory, tightening: tightensDirectory)) != nil else {
            // Still reported as missing, so the index drops the files that went with the directory.
            return TemporaryFile(url: nil, directoryWasMissing: true)
        }
        guard (try? PrivateFolder.write(contents, to: url)) != nil else {
            Self.removeFile(url)
            return TemporaryFile(url: nil, directoryWasMissing: true)
        }
        return TemporaryFile(url: url, directoryWasMissing: true)
    }

    /// Makes `directory` a private folder (see `PrivateFolder`), its missing parents with the default mode.
    static func ensure(_ directory: URL, tightening: Bool) throws {
        let parent = directory.deletingLastPathComponent()
        if !FileManager.default.fileExists(atPath: parent.path) {
            try? FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
        }
        try PrivateFolder.ensure(directory, tightening: tightening)
    }

    /// Moves `source` over `destination` with rename(2): atomic within one directory, replacing any old file.
    static func moveFile(_ source: URL, to destination: URL) -> Bool {
        source.withUnsafeFileSystemRepresentation { from in
            destination.withUnsafeFileSystemRepresentation { to in
                guard let from, let to else { return false }
                return rename(from, to) == 0
            }
        }
    }

    /// Removes the file at `url`, ignoring failure: a file that is already gone or can't be removed is no error
    /// for a cache.
    static func removeFile(_ url: URL) {
        url.withUnsafeFileSystemRepresentation { path in
            if let path { _ = unlink(path) }
        }
    }
}
