import Foundation
import Requests
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The outbox's attachments: the folder `files` beside the journal (mode `0700`), one private file (`0600`) per
/// attachment, named at random, with the bytes held by the files of live entries counted against the limit. Every
/// file is opened relative to the folder's descriptor without following a link, so nothing put in the folder (a
/// link out of it, a FIFO) is followed or read. See docs/outbox-journal.md, "Attachments".
final class OutboxFileStore: @unchecked Sendable {
    static let folderName = "files"
    let url: URL
    /// The folder, opened when the outbox opens if it exists, else created by the first file stored.
    private var opened: Int32?
    private let fileSystem = PosixJournalFileSystem()
    private let lock = NSLock()
    /// Bytes of the files of live entries, and of copies under way.
    private var held: Int64 = 0
    private static let chunkSize = 1 << 20

    /// Why a file could not be stored, for ``OutboxError``.
    enum Failure: Error {
        case tooLarge(size: Int64, limit: Int64)
        case full(size: Int64, held: Int64, limit: Int64)
        case unreadable(URL, String)
        case writeFailed(String)
    }

    /// Opens the folder in the outbox's `directory`, which the journal has opened and locked, if it exists: a link
    /// or another user's folder in its place is refused.
    init(outboxDirectory: URL) throws {
        url = outboxDirectory.appendingPathComponent(Self.folderName, isDirectory: true)
        var info = stat()
        if lstat(url.path, &info) == 0 || errno != ENOENT { opened = try fileSystem.openDirectory(url) }
    }

    deinit { opened.map(fileSystem.close) }

    /// The folder's descriptor, the folder created (`0700`) if it is missing.
    private func directory() throws -> Int32 {
        try lock.withLock {
            if let opened { return opened }
            let created = try fileSystem.openDirectory(url)
            opened = created
            return created
        }
    }

    /// The file's URL, for the upload's body.
    func url(of name: String) -> URL { url.appendingPathComponent(name, isDirectory: false) }

    /// Counts `bytes` as held by the files found on open.
    func hold(_ bytes: Int64) { lock.withLock { held += bytes } }

    /// Copies `source` into a new file of the folder and syncs it (not the folder: see ``syncFolder()``): a clone
    /// where the file system makes one, else a copy. Returns its name, size and SHA-256, read from the stored copy
    /// or while copying. The size is checked against `largest`, and the total against `total`, before any byte is
    /// written; on any failure nothing is left and nothing is held.
    func store(_ source: URL, largest: Int64, total: Int64) throws -> (name: String, size: Int64, sha256: [UInt8]) {
        let input = source.isFileURL ? open(source.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1
        guard input >= 0 else { throw Failure.unreadable(source, source.isFileURL ? Self.describe(errno) : "it is not a file URL") }
        defer { fileSystem.close(input) }
        var info = stat()
        guard fstat(input, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
            throw Failure.unreadable(source, "it is not a regular file")
        }
        let size = Int64(info.st_size)
        guard size <= largest else { throw Failure.tooLarge(size: size, limit: largest) }
        try lock.withLock {
            guard held + size <= total else { throw Failure.full(size: size, held: held, limit: total) }
            held += size
        }
        let name = OutboxRecord.newKey()
        var output: Int32 = -1
        var folder: Int32 = -1
        do {
            folder = try directory()
            let cloned = cloneOrCreate(input, in: folder, name: name)
            output = try fileSystem.openFile(name, in: folder, at: url(of: name), exclusive: !cloned)
            let sha256: [UInt8]
            if cloned || Self.reflink(input, to: output) {
                sha256 = try hash(output, expecting: size)
            } else {
                sha256 = try copy(input, to: output, size: size, source: source)
            }
            try fileSystem.syncData(output)
            fileSystem.close(output)
            return (name, size, sha256)
        } catch {
            if output >= 0 { fileSystem.close(output) }
            // The name is new and random: whatever is under it (a clone whose open failed, a partial copy) is ours.
            if folder >= 0 { try? fileSystem.removeFile(name, in: folder) }
            lock.withLock { held -= size }
            if let failure = error as? Failure { throw failure }
            throw Failure.writeFailed(OutboxVerdict.describe(error))
        }
    }

    /// Makes the names of the files stored since the last call durable.
    func syncFolder() throws {
        do {
            try fileSystem.syncDirectory(try directory())
        } catch {
            throw Failure.writeFailed(OutboxVerdict.describe(error))
        }
    }

    /// Gives back a file stored for an enqueue that failed, or that left with its entry.
    func remove(_ name: String, size: Int64) {
        if let folder = lock.withLock({ opened }) { try? fileSystem.removeFile(name, in: folder) }
        lock.withLock { held -= size }
    }

    /// What is wrong with the stored file `name`, which should have `size` bytes (and, with `sha256`, those bytes):
    /// `nil` if nothing. Reads the whole file only when `sha256` is given.
    func problem(with name: String, size: Int64, sha256: [UInt8]? = nil) -> String? {
        guard let folder = lock.withLock({ opened }) else { return "it is missing (so is the folder)" }
        let file = openat(folder, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard file >= 0 else { return errno == ENOENT ? "it is missing" : "it cannot be opened (\(Self.describe(errno)))" }
        defer { fileSystem.close(file) }
        var info = stat()
        guard fstat(file, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG), info.st_uid == getuid() else {
            return "it is not a regular file of this user"
        }
        guard Int64(info.st_size) == size else { return "it has \(info.st_size) bytes instead of \(size)" }
        guard let sha256 else { return nil }
        guard let found = try? hash(file, expecting: size) else { return "it cannot be read" }
        return found == sha256 ? nil : "its SHA-256 is not the one stored"
    }

    /// Removes every file of the folder whose name is not in `kept` (left by an enqueue that did not finish, or by
    /// an entry whose removal was written before its files were removed). Returns how many it removed.
    func removeFiles(notIn kept: Set<String>) -> Int {
        guard let directory = lock.withLock({ opened }) else { return 0 }
        let listing = dup(directory)
        guard listing >= 0, let folder = fdopendir(listing) else { return 0 }
        defer { closedir(folder) }
        var names: [String] = []
        while let entry = readdir(folder) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) { String(cString: $0) }
            }
            if name != ".", name != "..", !kept.contains(name) { names.append(name) }
        }
        return names.filter { unlinkat(directory, $0, 0) == 0 }.count
    }

    // MARK: - Copying

    /// Apple platforms: clones `input` as `name` (APFS shares the blocks), which `clonefile` creates; `false` where
    /// it cannot, and elsewhere.
    private func cloneOrCreate(_ input: Int32, in folder: Int32, name: String) -> Bool {
        #if canImport(Darwin)
        return fclonefileat(input, folder, name, 0) == 0
        #else
        return false
        #endif
    }

    /// Linux: makes the empty `output` share `input`'s blocks (the FICLONE ioctl, `_IOW(0x94, 9, int)`: btrfs, XFS
    /// and bcachefs do; other file systems refuse).
    private static func reflink(_ input: Int32, to output: Int32) -> Bool {
        #if canImport(Glibc)
        return ioctl(output, UInt(0x4004_9409), input) == 0
        #else
        return false
        #endif
    }

    /// Copies `input` to `output`, hashing it; fails if it does not have `size` bytes (it changed meanwhile).
    private func copy(_ input: Int32, to output: Int32, size: Int64, source: URL) throws -> [UInt8] {
        var hasher = SHA256()
        let copied = try Self.read(input, unreadable: { Failure.unreadable(source, $0) }) { chunk, offset in
            guard offset + Int64(chunk.count) <= size else { throw Failure.unreadable(source, "it grew while it was copied") }
            hasher.update(chunk)
            guard let base = chunk.baseAddress else { return }  // a read of 0 bytes ends the loop before
            try fileSystem.write(output, Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: chunk.count, deallocator: .none), at: UInt64(offset))
        }
        guard copied == size else { throw Failure.unreadable(source, "it shrank while it was copied") }
        return hasher.finalize()
    }

    /// The SHA-256 of `file`, read from its start; fails if it does not have `size` bytes.
    private func hash(_ file: Int32, expecting size: Int64) throws -> [UInt8] {
        var hasher = SHA256()
        let count = try Self.read(file, unreadable: { Failure.writeFailed("read: \($0)") }) { chunk, _ in hasher.update(chunk) }
        guard count == size else { throw Failure.writeFailed("the copy has \(count) bytes instead of \(size)") }
        return hasher.finalize()
    }

    /// Reads `file` from its start to its end, 1 MiB at a time, handing each chunk and its offset to `body`; returns
    /// the bytes read. A failed read throws `unreadable(description)`.
    private static func read(
        _ file: Int32, unreadable: (String) -> Failure, _ body: (UnsafeRawBufferPointer, Int64) throws -> Void
    ) throws -> Int64 {
        _ = fcntl(file, F_SETFL, fcntl(file, F_GETFL) & ~O_NONBLOCK)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while true {
            let count = pread(file, buffer.baseAddress, buffer.count, off_t(offset))
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw unreadable(describe(errno)) }
            if count == 0 { return offset }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), offset)
            offset += Int64(count)
        }
    }

    static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}
