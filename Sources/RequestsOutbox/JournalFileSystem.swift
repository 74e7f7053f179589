import Foundation
import Requests
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Every file-system call the journal makes, so that a test can fail any of them (a full disk at the Nth write)
/// or simulate a crash (an in-memory file system that forgets what was not synced). Descriptors are plain `Int32`.
/// Each call throws a ``JournalError``, `.writeFailed(errno:operation:)` for a failed system call.
protocol JournalFileSystem: Sendable {
    /// Opens the folder `url`, creating it (mode `0700`) if it is missing: refuses a symbolic link, something
    /// other than a folder, or a folder of another user; sets the mode of an existing one to `0700`.
    func openDirectory(_ url: URL) throws -> Int32
    /// Opens the regular file `name` of the folder for reading and writing, creating it with mode `0600` if it is
    /// missing (and only then if `exclusive`: a file of that name is an error). Refuses a symbolic link, a file
    /// of another user, or anything but a regular file.
    func openFile(_ name: String, in directory: Int32, at url: URL, exclusive: Bool) throws -> Int32
    /// Takes an exclusive lock on the open file or folder without waiting; `false` if someone else holds one.
    func lock(_ file: Int32) throws -> Bool
    func size(of file: Int32) throws -> UInt64
    /// Reads exactly `count` bytes at `offset` (fewer only at the end of the file).
    func read(_ file: Int32, at offset: UInt64, count: Int) throws -> Data
    /// Writes all of `data` at `offset`. If it throws, any part of `data` may have been written.
    func write(_ file: Int32, _ data: Data, at offset: UInt64) throws
    func truncate(_ file: Int32, to length: UInt64) throws
    /// Makes the file's contents durable, as `mode` asks (see ``JournalSync``).
    func syncData(_ file: Int32, mode: JournalSync) throws
    /// Makes the folder's entries (created, renamed and removed names) durable.
    func syncDirectory(_ directory: Int32) throws
    /// Renames `name` to `newName` in the folder, atomically replacing any file of that name.
    func rename(_ name: String, to newName: String, in directory: Int32) throws
    /// Removes the file `name` of the folder if there is one.
    func removeFile(_ name: String, in directory: Int32) throws
    func close(_ descriptor: Int32)
}

extension JournalFileSystem {
    /// The strongest sync (`.full`), for what is rare and must hold whatever the journal's mode: what opening
    /// recovered or repaired, and the cut-off of a failed group.
    func syncData(_ file: Int32) throws {
        try syncData(file, mode: .full)
    }
}

/// How a journal's group commits (and compactions) make their records durable. The two differ on Apple systems
/// only, where `fsync` leaves the data in the drive's volatile cache; on Linux both are `fdatasync`, which flushes
/// the drive's cache too.
enum JournalSync: Sendable, Equatable {
    /// The data is on stable storage before a call succeeds: it survives a crash of the process or of the system,
    /// and a power loss. Apple systems: `fcntl(F_FULLFSYNC)`, which flushes the drive's cache; measurements quoted
    /// publicly put it at about 5–20 ms per call on Apple SSDs.
    case full
    /// The writes are ordered: every write before the sync reaches the disk before any write after it. A call
    /// that succeeded survives a crash of the process or of the system, and the journal keeps its order, but a
    /// power loss may lose the last synced writes (a suffix of the calls that succeeded, never a middle, never
    /// part of a call). Apple systems: `fcntl(F_BARRIERFSYNC)`, much cheaper than `F_FULLFSYNC`.
    case barrier
}

/// The real file system, through POSIX calls relative to the folder's descriptor, so that nothing put in its place
/// after it was checked is used.
struct PosixJournalFileSystem: JournalFileSystem {
    func openDirectory(_ url: URL) throws -> Int32 {
        let path = url.path
        var info = stat()
        if lstat(path, &info) != 0 {
            guard errno == ENOENT else { throw JournalError.writeFailed(errno: errno, operation: "lstat \(path)") }
            let parent = url.deletingLastPathComponent()
            // The parents are ordinary folders (the caller's); only the journal's own folder is private.
            try? FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
            if mkdir(path, 0o700) != 0, errno != EEXIST { throw JournalError.writeFailed(errno: errno, operation: "mkdir \(path)") }
        }
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if lstat(path, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFLNK) { throw JournalError.isSymbolicLink(url) }
            if code == ENOTDIR { throw JournalError.notADirectory(url) }
            throw JournalError.writeFailed(errno: code, operation: "open \(path)")
        }
        do {
            guard fstat(descriptor, &info) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "fstat \(path)") }
            guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFDIR) else { throw JournalError.notADirectory(url) }
            guard info.st_uid == getuid() else { throw JournalError.notOwnedByUser(url) }
            if info.st_mode & 0o7777 != 0o700, fchmod(descriptor, 0o700) != 0 {
                throw JournalError.writeFailed(errno: errno, operation: "chmod \(path)")
            }
        } catch {
            close(descriptor)
            throw error
        }
        return descriptor
    }

    func openFile(_ name: String, in directory: Int32, at url: URL, exclusive: Bool) throws -> Int32 {
        let flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (exclusive ? O_EXCL : 0)
        let descriptor = openat(directory, name, flags, 0o600)
        guard descriptor >= 0 else {
            let code = errno
            if code == ELOOP { throw JournalError.isSymbolicLink(url) }
            throw JournalError.writeFailed(errno: code, operation: "open \(url.path)")
        }
        var info = stat()
        do {
            guard fstat(descriptor, &info) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "fstat \(url.path)") }
            guard info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else { throw JournalError.writeFailed(errno: EINVAL, operation: "open \(url.path) (not a regular file)") }
            guard info.st_uid == getuid() else { throw JournalError.notOwnedByUser(url) }
            if info.st_mode & 0o7777 != 0o600, fchmod(descriptor, 0o600) != 0 {
                throw JournalError.writeFailed(errno: errno, operation: "chmod \(url.path)")
            }
            // Blocking again: O_NONBLOCK only kept a FIFO of that name from stalling the open.
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        } catch {
            close(descriptor)
            throw error
        }
        return descriptor
    }

    func lock(_ file: Int32) throws -> Bool {
        while flock(file, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK { return false }
            throw JournalError.writeFailed(errno: code, operation: "flock")
        }
        return true
    }

    func size(of file: Int32) throws -> UInt64 {
        var info = stat()
        guard fstat(file, &info) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "fstat") }
        return UInt64(info.st_size)
    }

    func read(_ file: Int32, at offset: UInt64, count: Int) throws -> Data {
        var data = Data(count: count)
        var done = 0
        try data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
            guard let base = buffer.baseAddress else { return }
            while done < count {
                let result = pread(file, base + done, count - done, off_t(offset) + off_t(done))
                if result < 0, errno == EINTR { continue }
                guard result >= 0 else { throw JournalError.writeFailed(errno: errno, operation: "read") }
                if result == 0 { break }
                done += result
            }
        }
        if done < count { data.removeSubrange(done..<count) }
        return data
    }

    func write(_ file: Int32, _ data: Data, at offset: UInt64) throws {
        try data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
            guard let base = buffer.baseAddress else { return }
            var done = 0
            while done < buffer.count {
                let result = pwrite(file, base + done, buffer.count - done, off_t(offset) + off_t(done))
                if result < 0, errno == EINTR { continue }
                guard result > 0 else { throw JournalError.writeFailed(errno: result == 0 ? EIO : errno, operation: "write") }
                done += result
            }
        }
    }

    func truncate(_ file: Int32, to length: UInt64) throws {
        while ftruncate(file, off_t(length)) != 0 {
            guard errno == EINTR else { throw JournalError.writeFailed(errno: errno, operation: "truncate") }
        }
    }

    func syncData(_ file: Int32, mode: JournalSync) throws {
        #if canImport(Darwin)
        // fsync on Apple systems leaves the data in the drive's cache: F_FULLFSYNC flushes it, F_BARRIERFSYNC orders
        // it. Only a file system that knows neither (ENOTSUP, EINVAL, ENOTTY) falls back to fsync; any other
        // error (EIO, ENOSPC) is the sync's failure and is thrown, never hidden behind a fallback that succeeds.
        let command = mode == .full ? F_FULLFSYNC : F_BARRIERFSYNC
        if fcntl(file, command) == 0 { return }
        let code = errno
        guard code == ENOTSUP || code == EINVAL || code == ENOTTY else {
            throw JournalError.writeFailed(errno: code, operation: mode == .full ? "fcntl(F_FULLFSYNC)" : "fcntl(F_BARRIERFSYNC)")
        }
        guard fsync(file) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "fsync") }
        #else
        guard fdatasync(file) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "fdatasync") }
        #endif
    }

    func syncDirectory(_ directory: Int32) throws {
        guard fsync(directory) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "fsync (folder)") }
    }

    func rename(_ name: String, to newName: String, in directory: Int32) throws {
        guard renameat(directory, name, directory, newName) == 0 else { throw JournalError.writeFailed(errno: errno, operation: "rename") }
    }

    func removeFile(_ name: String, in directory: Int32) throws {
        guard unlinkat(directory, name, 0) == 0 || errno == ENOENT else { throw JournalError.writeFailed(errno: errno, operation: "unlink") }
    }

    func close(_ descriptor: Int32) {
        #if canImport(Glibc)
        _ = Glibc.close(descriptor)
        #else
        _ = Darwin.close(descriptor)
        #endif
    }
}
