import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a private folder or file could not be used.
enum PrivateFileError: Error {
    /// The path is a link, not a folder or regular file, or belongs to another user.
    case notOurs(URL)
    /// A system call failed with `errno`.
    case system(Int32, URL)
}

/// A folder only this user can read: mode 0700, owned by the user, not a link.
enum PrivateFolder {
    /// Makes `url` (and its missing parents, with the default mode) a private folder, or checks the one there: a real
    /// folder (not a link) of this user, its mode tightened to 0700. Throws when it is not ours: nothing is then
    /// written into it.
    @discardableResult
    static func ensure(_ url: URL) throws -> URL {
        let path = url.path
        var status = stat()
        if lstat(path, &status) != 0 {
            guard errno == ENOENT else { throw PrivateFileError.system(errno, url) }
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw PrivateFileError.system(errno, url) }
            guard lstat(path, &status) == 0 else { throw PrivateFileError.system(errno, url) }
        }
        guard status.st_mode & S_IFMT == S_IFDIR, status.st_uid == getuid() else { throw PrivateFileError.notOurs(url) }
        if status.st_mode & 0o777 != 0o700, chmod(path, 0o700) != 0 { throw PrivateFileError.system(errno, url) }
        return url
    }
}

/// Files only this user can read: created 0600 with `O_EXCL | O_NOFOLLOW`, read only when they are regular files of
/// this user.
enum PrivateFile {
    /// Creates `url`, which must not exist, with `bytes`, mode 0600.
    static func write(_ bytes: some DataProtocol & ContiguousBytes, to url: URL) throws {
        let descriptor = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw PrivateFileError.system(errno, url) }
        defer { close(descriptor) }
        let written = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw PrivateFileError.system(errno, url) }
    }

    /// The contents of `url` if it is a regular file of this user (not a link) of exactly `expectedSize` bytes.
    static func read(_ url: URL, expectedSize: Int) throws -> [UInt8] {
        let descriptor = open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw PrivateFileError.system(errno, url) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw PrivateFileError.system(errno, url) }
        guard status.st_mode & S_IFMT == S_IFREG, status.st_uid == getuid(), Int(status.st_size) == expectedSize else {
            throw PrivateFileError.notOurs(url)
        }
        var bytes = [UInt8](repeating: 0, count: expectedSize)
        let count = bytes.withUnsafeMutableBytes { Foundation.read(descriptor, $0.baseAddress, expectedSize) }
        guard count == expectedSize else { throw PrivateFileError.system(errno, url) }
        return bytes
    }
}
