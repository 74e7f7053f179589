import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Folders and files only this process's user can read: folders `0700`, files `0600`. The temporary directory is
/// shared on Linux (`/tmp`), where any local user may create a folder, a file or a link under a name Requests uses
/// before Requests does; so an existing folder is used only if it is a real folder (not a link) owned by this user,
/// and a file is only ever created, never opened if it exists.
///
/// Internal, for every part of the library that keeps files: downloads' partial files, and the response cache.
enum PrivateFolder {
    /// Why a folder was not used.
    enum Refusal: Error, Equatable, CustomStringConvertible {
        /// The name is taken by something that is not a folder: a file, a device or a symbolic link.
        case notAFolder(path: String)
        /// The folder belongs to another user (`owner`).
        case notOwned(path: String, owner: UInt32)
        /// A system call failed with `errno`.
        case failed(call: String, path: String, errno: Int32)

        var description: String {
            switch self {
            case let .notAFolder(path): return "\(path) is not a folder (a file or a link has its name)"
            case let .notOwned(path, owner): return "\(path) belongs to user \(owner), not to this process's user \(getuid())"
            case let .failed(call, path, code): return "\(call) \(path): \(String(cString: strerror(code)))"
            }
        }
    }

    /// Makes `url` a folder of this user with mode `0700`, and returns it: creates it `0700` if it is missing;
    /// uses an existing one only if it is a real folder (a link, even to a folder, is refused) owned by
    /// `getuid()`, and sets its mode to exactly `0700` if it was anything else (it is this user's), unless
    /// `tightening` is `false` (a folder the caller chose, whose mode is the caller's). Throws a ``Refusal``
    /// otherwise, having changed nothing.
    @discardableResult
    static func ensure(_ url: URL, tightening: Bool = true) throws -> URL {
        let path = url.path
        var info = stat()
        // The common case, one call: the folder is there and as it must be.
        let found = lstat(path, &info) == 0
        if found, isPrivate(info) { return url }
        if !found {
            let code = errno
            guard code == ENOENT else { throw Refusal.failed(call: "lstat", path: path, errno: code) }
            if mkdir(path, 0o700) != 0, errno != EEXIST { throw Refusal.failed(call: "mkdir", path: path, errno: errno) }
        }
        // Checked (and tightened) through a descriptor of the folder itself, so that a link put in its place
        // meanwhile is refused rather than followed.
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ELOOP || code == ENOTDIR { throw Refusal.notAFolder(path: path) }
            throw Refusal.failed(call: "open", path: path, errno: code)
        }
        defer { close(descriptor) }
        guard fstat(descriptor, &info) == 0 else { throw Refusal.failed(call: "fstat", path: path, errno: errno) }
        guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR) else { throw Refusal.notAFolder(path: path) }
        guard info.st_uid == getuid() else { throw Refusal.notOwned(path: path, owner: UInt32(info.st_uid)) }
        if tightening, info.st_mode & 0o7777 != 0o700, fchmod(descriptor, 0o700) != 0 {
            throw Refusal.failed(call: "chmod", path: path, errno: errno)
        }
        return url
    }

    /// Creates the file `url` with mode `0600` and opens it for writing. Fails (`EEXIST`) if anything has that
    /// name, a link included, rather than open or follow it.
    static func createFile(at url: URL) throws -> FileHandle {
        let path = url.path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO, userInfo: [NSFilePathErrorKey: path]) }
        // The umask may have taken bits away; the mode is exactly 0600 either way.
        _ = fchmod(descriptor, 0o600)
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    /// Removes the file `url` (`unlink`): never a folder, and a link is removed, not followed.
    static func removeFile(at url: URL) {
        _ = unlink(url.path)
    }

    /// Requests' own folder in the temporary directory: `Requests-<uid>`, if it is this user's or can be made so
    /// (see ``ensure(_:)``). If the name is taken by something else (another user's folder, a link, a file), a
    /// fresh folder made with `mkdtemp` for this process, `Requests-<uid>-` and six random characters, is used instead; the taken
    /// name is left alone. Checked at each call, so that a folder removed meanwhile is made again.
    static func requestsFolder() throws -> URL {
        let temporary = FileManager.default.temporaryDirectory
        let shared = temporary.appendingPathComponent("Requests-\(getuid())", isDirectory: true)
        if let folder = try? ensure(shared) { return folder }
        return try fallback(in: temporary)
    }

    private static let lock = NSLock()
    /// The `mkdtemp` folder of this process, per temporary directory. Guarded by `lock`.
    nonisolated(unsafe) private static var fallbacks: [String: URL] = [:]

    /// This process's own folder in `temporary`, made by `mkdtemp` (mode `0700`) the first time, and again if it
    /// was removed or replaced.
    private static func fallback(in temporary: URL) throws -> URL {
        try lock.withLock {
            if let folder = fallbacks[temporary.path], (try? ensure(folder)) != nil { return folder }
            // mkdtemp's template: six capitals X that it replaces.
            let name = "Requests-\(getuid())-" + String(repeating: "X", count: 6)
            var template = Array(temporary.appendingPathComponent(name).path.utf8CString)
            let made = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.map { mkdtemp($0) != nil } ?? false }
            guard made else { throw Refusal.failed(call: "mkdtemp", path: temporary.path, errno: errno) }
            let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let folder = try ensure(URL(fileURLWithPath: path, isDirectory: true))
            fallbacks[temporary.path] = folder
            return folder
        }
    }

    /// Whether `info` is a folder of this user with mode `0700`.
    private static func isPrivate(_ info: stat) -> Bool {
        info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR) && info.st_uid == getuid() && info.st_mode & 0o7777 == 0o700
    }

    /// Creates the file `url` (see ``createFile(at:)``) holding `bytes`; a file that could not be written whole is
    /// removed.
    static func write(_ bytes: Data, to url: URL) throws {
        let handle = try createFile(at: url)
        do {
            try handle.write(contentsOf: bytes)
            try handle.close()
        } catch {
            try? handle.close()
            removeFile(at: url)
            throw error
        }
    }

    /// Opens the existing file `url` for writing, only if it is a regular file of this user with one name: opened
    /// without following a link, and checked on the open descriptor, so that nothing put in its place after an
    /// earlier check is written to.
    static func openOwnFile(forWriting url: URL) throws -> FileHandle {
        let descriptor = open(url.path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw Refusal.failed(call: "open", path: url.path, errno: errno) }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw Refusal.failed(call: "fstat", path: url.path, errno: errno) }
        guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), info.st_nlink == 1 else { throw Refusal.notAFolder(path: url.path) }
        guard info.st_uid == getuid() else { throw Refusal.notOwned(path: url.path, owner: UInt32(info.st_uid)) }
        return handle
    }

    /// The contents of `url` if it is a regular file of this user (opened without following a link) with one name
    /// (not a hard link to another file), of exactly `expectedSize` bytes if given; else throws.
    static func readOwnFile(_ url: URL, expectedSize: Int? = nil) throws -> Data {
        let descriptor = open(url.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw Refusal.failed(call: "open", path: url.path, errno: errno) }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw Refusal.failed(call: "fstat", path: url.path, errno: errno) }
        let size = Int(info.st_size)
        guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), info.st_nlink == 1, size == (expectedSize ?? size) else {
            throw Refusal.notAFolder(path: url.path)
        }
        guard info.st_uid == getuid() else { throw Refusal.notOwned(path: url.path, owner: UInt32(info.st_uid)) }
        let data = size == 0 ? Data() : try handle.read(upToCount: size) ?? Data()
        guard data.count == size else { throw Refusal.failed(call: "read", path: url.path, errno: EIO) }
        return data
    }
}
