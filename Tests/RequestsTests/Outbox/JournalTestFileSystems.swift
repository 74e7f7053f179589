import Foundation
import Requests
@testable import RequestsOutbox
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A file system in memory with one folder, that knows what a crash keeps: file contents as of their last
/// `syncData`, names as of the last `syncDirectory`. `crash(_:)` forgets the rest (or keeps some of it), closes
/// every descriptor and releases the locks, as a power cut would.
final class MemoryFileSystem: JournalFileSystem, @unchecked Sendable {
    /// What a crash does to the bytes written since the last sync.
    enum CrashMode: CaseIterable {
        /// They are lost.
        case loseUnsynced
        /// They all reached the disk.
        case keepUnsynced
        /// The file has its new length, but the unsynced bytes at its end read as zeros.
        case zeroUnsyncedTail
        /// Half of the unsynced bytes at the end reached the disk.
        case keepHalfOfUnsyncedTail
    }

    private final class Inode {
        var current = Data()
        var durable = Data()
        var lockedBy: Int32?
    }

    private let mutex = NSLock()
    private var inodes: [Inode] = []
    private var names: [String: Int] = [:]
    private var durableNames: [String: Int] = [:]
    private var descriptors: [Int32: Int] = [:]
    private var nextDescriptor: Int32 = 100
    /// The folder's pretend descriptor.
    static let folder: Int32 = 3

    /// The current contents of file `name`.
    func contents(of name: String) -> Data? {
        mutex.withLock { names[name].map { inodes[$0].current } }
    }

    /// Replaces the contents of file `name` (creating it), durably: for tests that damage a journal.
    func setContents(of name: String, to data: Data) {
        mutex.withLock {
            let number = names[name] ?? inodes.count
            if number == inodes.count { inodes.append(Inode()) }
            names[name] = number
            durableNames[name] = number
            inodes[number].current = data
            inodes[number].durable = data
        }
    }

    /// The names in the folder.
    var fileNames: [String] { mutex.withLock { names.keys.sorted() } }

    /// Forgets what was not synced (see `CrashMode`), closes every descriptor and releases every lock.
    func crash(_ mode: CrashMode) {
        mutex.withLock {
            names = durableNames
            descriptors.removeAll()
            for inode in inodes {
                inode.lockedBy = nil
                let durable = inode.durable
                let current = inode.current
                let extendsDurable = current.count > durable.count && current.prefix(durable.count) == durable
                switch mode {
                case .loseUnsynced: inode.current = durable
                case .keepUnsynced: inode.current = current
                case .zeroUnsyncedTail:
                    inode.current = extendsDurable ? durable + Data(count: current.count - durable.count) : durable
                case .keepHalfOfUnsyncedTail:
                    inode.current = extendsDurable ? current.prefix(durable.count + (current.count - durable.count) / 2) : durable
                }
                inode.durable = inode.current
            }
        }
    }

    private func inode(_ descriptor: Int32) throws -> Inode {
        guard let number = descriptors[descriptor] else { throw JournalError.writeFailed(errno: EBADF, operation: "memory") }
        return inodes[number]
    }

    func openDirectory(_ url: URL) throws -> Int32 { Self.folder }

    func openFile(_ name: String, in directory: Int32, at url: URL, exclusive: Bool) throws -> Int32 {
        try mutex.withLock {
            if let number = names[name] {
                if exclusive { throw JournalError.writeFailed(errno: EEXIST, operation: "open") }
                descriptors[nextDescriptor] = number
            } else {
                inodes.append(Inode())
                names[name] = inodes.count - 1
                descriptors[nextDescriptor] = inodes.count - 1
            }
            nextDescriptor += 1
            return nextDescriptor - 1
        }
    }

    func lock(_ file: Int32) throws -> Bool {
        // The pretend folder is no inode: the lock file's lock stands for both.
        if file == Self.folder { return true }
        return try mutex.withLock {
            let inode = try inode(file)
            if let holder = inode.lockedBy, holder != file { return false }
            inode.lockedBy = file
            return true
        }
    }

    func size(of file: Int32) throws -> UInt64 { try mutex.withLock { UInt64(try inode(file).current.count) } }

    func read(_ file: Int32, at offset: UInt64, count: Int) throws -> Data {
        try mutex.withLock {
            let data = try inode(file).current
            let start = min(Int(offset), data.count)
            return Data(data[start..<min(start + count, data.count)])
        }
    }

    func write(_ file: Int32, _ data: Data, at offset: UInt64) throws {
        try mutex.withLock {
            let inode = try inode(file)
            let end = Int(offset) + data.count
            if inode.current.count < end { inode.current.append(Data(count: end - inode.current.count)) }
            inode.current.replaceSubrange(Int(offset)..<end, with: data)
        }
    }

    func truncate(_ file: Int32, to length: UInt64) throws {
        try mutex.withLock {
            let inode = try inode(file)
            if inode.current.count > Int(length) {
                inode.current = inode.current.prefix(Int(length))
            } else {
                inode.current.append(Data(count: Int(length) - inode.current.count))
            }
        }
    }

    func syncData(_ file: Int32, mode: JournalSync) throws {
        try mutex.withLock {
            let inode = try inode(file)
            inode.durable = inode.current
        }
    }

    func syncDirectory(_ directory: Int32) throws { mutex.withLock { durableNames = names } }

    func rename(_ name: String, to newName: String, in directory: Int32) throws {
        try mutex.withLock {
            guard let number = names.removeValue(forKey: name) else { throw JournalError.writeFailed(errno: ENOENT, operation: "rename") }
            names[newName] = number
        }
    }

    func removeFile(_ name: String, in directory: Int32) throws { _ = mutex.withLock { names.removeValue(forKey: name) } }

    func close(_ descriptor: Int32) {
        mutex.withLock {
            if let number = descriptors.removeValue(forKey: descriptor), inodes[number].lockedBy == descriptor {
                inodes[number].lockedBy = nil
            }
        }
    }
}

/// Wraps a file system and counts its calls; `fault` decides, call by call, to fail one (a full disk), to write
/// only part of the data first, or to block (so that other calls queue meanwhile).
///
/// Every call on the checkpoint file (`journal.state`) once it is open is of kind `.checkpoint`, whatever it does:
/// the counts and faults of the other kinds are those of the journal file and the folder, as the tests name them.
/// The calls' overall numbers count them all.
final class FaultyFileSystem: JournalFileSystem, @unchecked Sendable {
    enum Call: String, CaseIterable {
        case openDirectory, openFile, lock, size, read, write, truncate, syncData, syncDirectory, rename, removeFile
        /// Any call on the open checkpoint file.
        case checkpoint
    }

    /// What to do instead of a call.
    enum Fault {
        /// Fail with `errno`, after writing `writtenFirst` bytes of the data (for a write).
        case fail(errno: Int32, writtenFirst: Int)
        /// Fail this call and every later one with `EIO`: the process died here.
        case die
    }

    let inner: JournalFileSystem
    private let mutex = NSLock()
    private var counts: [Call: Int] = [:]
    private var total = 0
    private var dead = false
    /// The checkpoint file's open descriptors.
    private var checkpointFiles: Set<Int32> = []
    private var modes: [JournalSync] = []
    private var faultHandler: (@Sendable (_ call: Call, _ number: Int, _ overall: Int) -> Fault?)?

    init(_ inner: JournalFileSystem) { self.inner = inner }

    /// Called before each call with its kind, its number among calls of its kind (from 1) and among all calls
    /// (from 1); may block. Returns the fault to inject, or `nil` to make the call.
    func setFault(_ handler: (@Sendable (_ call: Call, _ number: Int, _ overall: Int) -> Fault?)?) {
        mutex.withLock { faultHandler = handler }
    }

    /// The modes of the `syncData` calls made so far, in order.
    /// The modes of the journal file's syncs, in order.
    var syncModes: [JournalSync] { mutex.withLock { modes } }

    /// The number of calls made so far, of one kind or of all.
    func count(_ call: Call? = nil) -> Int { mutex.withLock { call.map { counts[$0, default: 0] } ?? total } }

    private func check(_ made: Call, data: Data? = nil, file: Int32 = -1, offset: UInt64 = 0) throws {
        let (handler, call, number, overall, isDead) = mutex.withLock { () -> ((@Sendable (Call, Int, Int) -> Fault?)?, Call, Int, Int, Bool) in
            let call = checkpointFiles.contains(file) ? Call.checkpoint : made
            counts[call, default: 0] += 1
            total += 1
            return (faultHandler, call, counts[call, default: 0], total, dead)
        }
        if isDead { throw JournalError.writeFailed(errno: EIO, operation: "dead") }
        switch handler?(call, number, overall) {
        case nil: return
        case let .fail(code, writtenFirst)?:
            if let data, writtenFirst > 0 { try inner.write(file, data.prefix(writtenFirst), at: offset) }
            throw JournalError.writeFailed(errno: code, operation: call.rawValue)
        case .die?:
            mutex.withLock { dead = true }
            throw JournalError.writeFailed(errno: EIO, operation: "dead")
        }
    }

    func openDirectory(_ url: URL) throws -> Int32 {
        try check(.openDirectory)
        return try inner.openDirectory(url)
    }
    func openFile(_ name: String, in directory: Int32, at url: URL, exclusive: Bool) throws -> Int32 {
        try check(.openFile)
        let descriptor = try inner.openFile(name, in: directory, at: url, exclusive: exclusive)
        if name == JournalCheckpoint.name { mutex.withLock { _ = checkpointFiles.insert(descriptor) } }
        return descriptor
    }
    func lock(_ file: Int32) throws -> Bool {
        try check(.lock, file: file)
        return try inner.lock(file)
    }
    func size(of file: Int32) throws -> UInt64 {
        try check(.size, file: file)
        return try inner.size(of: file)
    }
    func read(_ file: Int32, at offset: UInt64, count: Int) throws -> Data {
        try check(.read, file: file)
        return try inner.read(file, at: offset, count: count)
    }
    func write(_ file: Int32, _ data: Data, at offset: UInt64) throws {
        try check(.write, data: data, file: file, offset: offset)
        try inner.write(file, data, at: offset)
    }
    func truncate(_ file: Int32, to length: UInt64) throws {
        try check(.truncate, file: file)
        try inner.truncate(file, to: length)
    }
    func syncData(_ file: Int32, mode: JournalSync) throws {
        try check(.syncData, file: file)
        // The journal file's syncs only: the checkpoint's (at open and compaction) are always full.
        mutex.withLock { if !checkpointFiles.contains(file) { modes.append(mode) } }
        try inner.syncData(file, mode: mode)
    }
    func syncDirectory(_ directory: Int32) throws {
        try check(.syncDirectory)
        try inner.syncDirectory(directory)
    }
    func rename(_ name: String, to newName: String, in directory: Int32) throws {
        try check(.rename)
        try inner.rename(name, to: newName, in: directory)
    }
    func removeFile(_ name: String, in directory: Int32) throws {
        try check(.removeFile)
        try inner.removeFile(name, in: directory)
    }
    func close(_ descriptor: Int32) {
        mutex.withLock { _ = checkpointFiles.remove(descriptor) }
        inner.close(descriptor)
    }
}

/// A fresh folder path under the temporary directory (not created), removed at the end of the test.
func makeJournalFolder(_ test: XCTestCase, _ name: String = "journal") -> URL {
    let parent = FileManager.default.temporaryDirectory.appendingPathComponent("journal-tests-\(UUID().uuidString)")
    test.addTeardownBlock { try? FileManager.default.removeItem(at: parent) }
    return parent.appendingPathComponent(name)
}

/// Payload number `number`: distinct bytes of a length that varies.
func samplePayload(_ number: Int, size: Int? = nil) -> Data {
    Data("payload \(number) ".utf8) + Data(repeating: UInt8(truncatingIfNeeded: number), count: size ?? (number % 7) * 5)
}

/// Collects a journal's events.
final class JournalEventLog: @unchecked Sendable {
    private let mutex = NSLock()
    private var stored: [JournalEvent] = []
    var events: [JournalEvent] { mutex.withLock { stored } }
    var handler: @Sendable (JournalEvent) -> Void { { [self] event in mutex.withLock { stored.append(event) } } }
}

extension Journal.Options {
    /// No zeros written ahead: the file's size is its content's, for tests that read or cut it.
    static var exactSize: Journal.Options {
        var options = Journal.Options()
        options.preallocation = 0
        return options
    }
}

/// A copy of a journal folder's file in a new folder beside it, taken while its journal is open: the file as a crash
/// would leave it (never closed), zeros written ahead included.
func crashCopy(ofJournalIn folder: URL) throws -> URL {
    let copy = folder.deletingLastPathComponent().appendingPathComponent("crash-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
    try FileManager.default.copyItem(at: folder.appendingPathComponent("journal"), to: copy.appendingPathComponent("journal"))
    return copy
}

extension JournalEvent {
    /// Whether the event reports a lost journal or an unreadable checkpoint.
    var isLoss: Bool { if case .lost = self { return true } else { return false } }
}
