import Foundation
@testable import Requests
import XCTest

final class CacheStorageTests: XCTestCase {
    /// A fresh temporary folder per test; the cache directory is inside it, so tests can also remove or block it.
    private var root: URL!
    /// The cache directory, not created in advance: the storage makes it on first write.
    private var directory: URL!

    override func setUp() {
        super.setUp()
        root = FileManager.default.temporaryDirectory.appendingPathComponent("cache-storage-\(UUID().uuidString)")
        directory = root.appendingPathComponent("nested/cache", isDirectory: true)
    }

    override func tearDown() {
        // A read-only test may have left the directory without write permission, which would stop the removal.
        _ = chmod(directory.path, 0o700)
        try? FileManager.default.removeItem(at: root)
        super.tearDown()
    }

    // MARK: - Helpers

    /// A storage on the test directory; memory off by default, so reads come from disk.
    private func storage(memory: Int = 0, disk: Int = 1 << 20) -> CacheStorage {
        CacheStorage(memoryCapacity: memory, diskCapacity: disk, directory: directory)
    }

    /// `count` bytes of `byte`.
    private func bytes(_ count: Int, _ byte: UInt8 = 0x41) -> Data {
        Data(repeating: byte, count: count)
    }

    /// Where the storage keeps `key`.
    private func fileURL(_ key: String) -> URL {
        directory.appendingPathComponent(CacheStorage.fileName(forKey: key))
    }

    /// The size on disk of an entry of `count` bytes under `key`.
    private func fileSize(key: String, count: Int) -> Int {
        CacheStorage.encode(bytes(count), key: key).count
    }

    /// The names in the directory, sorted.
    private func listing() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
    }

    // MARK: - Round trips

    func testMemoryOnlyRoundTrip() {
        let cache = CacheStorage(memoryCapacity: 1000, diskCapacity: 1000, directory: nil)
        cache.setData(Data("one".utf8), forKey: "a")
        XCTAssertEqual(cache.data(forKey: "a"), Data("one".utf8))
        XCTAssertEqual(cache.memorySize, 3)
        XCTAssertEqual(cache.diskSize, 0)
        cache.setData(Data("three".utf8), forKey: "a")
        XCTAssertEqual(cache.data(forKey: "a"), Data("three".utf8))
        XCTAssertEqual(cache.memorySize, 5)
        cache.removeData(forKey: "a")
        XCTAssertNil(cache.data(forKey: "a"))
        XCTAssertEqual(cache.memorySize, 0)
        XCTAssertNil(cache.data(forKey: "never"))

        // A disk capacity of 0 means memory only, even with a directory.
        let noDisk = CacheStorage(memoryCapacity: 1000, diskCapacity: 0, directory: directory)
        noDisk.setData(Data("x".utf8), forKey: "a")
        XCTAssertEqual(noDisk.data(forKey: "a"), Data("x".utf8))
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory.path))
    }

    func testDiskRoundTripSurvivesRestart() {
        let first = storage(memory: 1000)
        let value = Data((0..<300).map { UInt8($0 % 251) })
        first.setData(value, forKey: "https://example.com/a?b=c")
        first.setData(Data(), forKey: "empty")
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.path), "directory created on first write")
        XCTAssertEqual(first.diskSize, fileSize(key: "https://example.com/a?b=c", count: 300) + fileSize(key: "empty", count: 0))

        let second = storage(memory: 1000)
        XCTAssertEqual(second.diskSize, first.diskSize, "the index is rebuilt from the listing")
        XCTAssertEqual(second.memorySize, 0)
        XCTAssertEqual(second.data(forKey: "https://example.com/a?b=c"), value)
        XCTAssertEqual(second.memorySize, 300, "a disk hit is promoted to memory")
        XCTAssertEqual(second.data(forKey: "empty"), Data())
        XCTAssertNil(second.data(forKey: "missing"))

        second.removeData(forKey: "empty")
        XCTAssertNil(storage().data(forKey: "empty"))
        XCTAssertEqual(listing(), [CacheStorage.fileName(forKey: "https://example.com/a?b=c")])
    }

    // MARK: - Eviction

    func testMemoryEvictsLeastRecentlyUsed() {
        let cache = CacheStorage(memoryCapacity: 30, diskCapacity: 0, directory: nil)
        cache.setData(bytes(10), forKey: "a")
        cache.setData(bytes(10), forKey: "b")
        cache.setData(bytes(10), forKey: "c")
        XCTAssertNotNil(cache.data(forKey: "a"))  // a is now more recent than b
        cache.setData(bytes(10), forKey: "d")
        XCTAssertNil(cache.data(forKey: "b"))
        XCTAssertNotNil(cache.data(forKey: "a"))
        XCTAssertNotNil(cache.data(forKey: "c"))
        XCTAssertNotNil(cache.data(forKey: "d"))
        XCTAssertEqual(cache.memorySize, 30)

        // Replacing a value with a larger one evicts by the new total.
        cache.setData(bytes(25), forKey: "d")
        XCTAssertEqual(cache.memorySize, 25)
        XCTAssertNotNil(cache.data(forKey: "d"))
    }

    func testDiskEvictsLeastRecentlyUsed() {
        let size = fileSize(key: "a", count: 100)
        let cache = storage(disk: 3 * size)
        for key in ["a", "b", "c"] { cache.setData(bytes(100), forKey: key) }
        XCTAssertNotNil(cache.data(forKey: "a"))  // a is now more recent than b
        cache.setData(bytes(100), forKey: "d")
        XCTAssertEqual(cache.diskSize, 3 * size)
        XCTAssertNil(cache.data(forKey: "b"))
        for key in ["a", "c", "d"] { XCTAssertEqual(cache.data(forKey: key), bytes(100), key) }
        XCTAssertEqual(listing().count, 3)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fileURL("b").path))
    }

    func testRebuiltIndexOrdersByModificationDate() throws {
        let size = fileSize(key: "a", count: 100)
        let first = storage(disk: 3 * size)
        for key in ["a", "b", "c"] { first.setData(bytes(100), forKey: key) }
        // b is the oldest by date, a the newest.
        let now = Date()
        for (key, age) in [("a", 10.0), ("b", 300.0), ("c", 100.0)] {
            try FileManager.default.setAttributes([.modificationDate: now.addingTimeInterval(-age)], ofItemAtPath: fileURL(key).path)
        }
        let second = storage(disk: 3 * size)
        second.setData(bytes(100), forKey: "d")
        XCTAssertNil(second.data(forKey: "b"))
        XCTAssertNotNil(second.data(forKey: "a"))
        XCTAssertNotNil(second.data(forKey: "c"))

        // A smaller capacity in a later run evicts at once, down to the newest files.
        let third = storage(disk: size)
        XCTAssertEqual(third.diskSize, size)
        XCTAssertEqual(listing().count, 1)
    }

    func testEntryAboveMemoryCapacityStaysOnDiskOnly() {
        let cache = storage(memory: 50)
        cache.setData(bytes(20, 1), forKey: "small")
        cache.setData(bytes(100, 2), forKey: "large")
        XCTAssertEqual(cache.memorySize, 20)
        XCTAssertEqual(cache.data(forKey: "large"), bytes(100, 2))
        XCTAssertEqual(cache.memorySize, 20, "not promoted either")
        XCTAssertEqual(cache.data(forKey: "small"), bytes(20, 1))

        // Replacing a value in memory with a too-large one drops the old value from memory.
        cache.setData(bytes(100, 3), forKey: "small")
        XCTAssertEqual(cache.memorySize, 0)
        XCTAssertEqual(cache.data(forKey: "small"), bytes(100, 3))

        // An entry above the disk capacity isn't written, and drops the key's old file.
        let tiny = storage(memory: 1000, disk: 60)
        tiny.setData(bytes(10), forKey: "k")
        XCTAssertEqual(storage().data(forKey: "k"), bytes(10))
        tiny.setData(bytes(500), forKey: "k")
        XCTAssertEqual(tiny.data(forKey: "k"), bytes(500), "kept in memory")
        XCTAssertNil(storage().data(forKey: "k"))
    }

    // MARK: - Corrupt and leftover files

    func testCorruptFilesAreMissesAndRemoved() throws {
        let writer = storage()
        for key in ["truncated", "garbage", "other", "stranger", "longer", "empty"] {
            writer.setData(Data(repeating: 7, count: 64), forKey: key)
        }
        let manager = FileManager.default
        let whole = try Data(contentsOf: fileURL("truncated"))
        try whole.prefix(whole.count - 1).write(to: fileURL("truncated"))
        try Data("not a cache file at all, just some text".utf8).write(to: fileURL("garbage"))
        // A whole, valid file, but written for another key.
        try manager.removeItem(at: fileURL("other"))
        try manager.copyItem(at: fileURL("stranger"), to: fileURL("other"))
        try (whole + Data([0])).write(to: fileURL("longer"))
        try Data().write(to: fileURL("empty"))

        let reader = storage(memory: 1000)
        for key in ["truncated", "garbage", "other", "longer", "empty"] {
            XCTAssertNil(reader.data(forKey: key), key)
            XCTAssertFalse(manager.fileExists(atPath: fileURL(key).path), key)
        }
        XCTAssertEqual(reader.data(forKey: "stranger"), Data(repeating: 7, count: 64))
        XCTAssertEqual(reader.diskSize, fileSize(key: "stranger", count: 64))
        XCTAssertEqual(listing(), [CacheStorage.fileName(forKey: "stranger")])
    }

    func testTemporaryLeftoverIsRemovedOnFirstUse() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let leftover = directory.appendingPathComponent(".tmp-\(UUID().uuidString)")
        try Data("half a file".utf8).write(to: leftover)
        let foreign = directory.appendingPathComponent("README.txt")
        try Data("not ours".utf8).write(to: foreign)

        let cache = storage()
        XCTAssertNil(cache.data(forKey: "anything"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: leftover.path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: foreign.path), "foreign files are left alone")
        XCTAssertEqual(cache.diskSize, 0, "and not counted")
        cache.removeAll()
        XCTAssertTrue(FileManager.default.fileExists(atPath: foreign.path))
    }

    // MARK: - Directory trouble

    func testDirectoryDeletedWhileInUse() throws {
        let cache = storage(memory: 1000)
        cache.setData(bytes(10, 1), forKey: "before")
        XCTAssertEqual(storage().data(forKey: "before"), bytes(10, 1))

        // Removed, and blocked: a file where the parent directory was, so the storage can't make it again.
        let parent = directory.deletingLastPathComponent()
        try FileManager.default.removeItem(at: parent)
        try Data("blocker".utf8).write(to: parent)

        cache.setData(bytes(10, 2), forKey: "during")
        XCTAssertEqual(cache.data(forKey: "during"), bytes(10, 2), "memory keeps working")
        XCTAssertEqual(cache.diskSize, 0, "the index forgot the vanished files")
        cache.removeData(forKey: "before")
        let diskOnly = storage()
        XCTAssertNil(diskOnly.data(forKey: "before"))
        XCTAssertNil(diskOnly.data(forKey: "during"))
        diskOnly.setData(bytes(10, 3), forKey: "during")
        XCTAssertNil(diskOnly.data(forKey: "during"))
        XCTAssertEqual(diskOnly.diskSize, 0)
        diskOnly.removeAll()

        // Unblocked: the next write makes the directory again.
        try FileManager.default.removeItem(at: parent)
        cache.setData(bytes(10, 4), forKey: "after")
        XCTAssertEqual(cache.diskSize, fileSize(key: "after", count: 10))
        XCTAssertEqual(storage().data(forKey: "after"), bytes(10, 4))
        diskOnly.setData(bytes(10, 5), forKey: "again")
        XCTAssertEqual(diskOnly.data(forKey: "again"), bytes(10, 5))
        XCTAssertEqual(storage().diskSize, fileSize(key: "after", count: 10) + fileSize(key: "again", count: 10))
    }

    func testDirectoryRemovedAfterIndexIsStaleOnReads() throws {
        let cache = storage()
        cache.setData(bytes(10), forKey: "a")
        try FileManager.default.removeItem(at: directory)
        XCTAssertNil(cache.data(forKey: "a"))
        XCTAssertEqual(cache.diskSize, 0)
        cache.setData(bytes(10), forKey: "b")
        XCTAssertEqual(cache.data(forKey: "b"), bytes(10))
    }

    func testReadOnlyDirectoryIsNoOp() throws {
        let cache = storage(memory: 1000)
        cache.setData(bytes(10, 1), forKey: "existing")
        XCTAssertEqual(chmod(directory.path, 0o500), 0)
        if access(directory.path, W_OK) == 0 {
            throw XCTSkip("the directory is still writable after chmod 0o500 (running as root)")
        }
        cache.setData(bytes(10, 2), forKey: "new")
        XCTAssertEqual(cache.data(forKey: "new"), bytes(10, 2), "memory keeps working")
        cache.setData(bytes(10, 3), forKey: "existing")
        XCTAssertEqual(cache.data(forKey: "existing"), bytes(10, 3))
        let reader = storage()
        XCTAssertNil(reader.data(forKey: "new"))
        XCTAssertEqual(reader.data(forKey: "existing"), bytes(10, 1), "the old file couldn't be removed")
        reader.removeData(forKey: "existing")
        reader.removeAll()
        XCTAssertEqual(listing().filter { $0.hasPrefix(".tmp-") }, [])
    }

    // MARK: - removeAll

    func testRemoveAll() {
        let cache = storage(memory: 1000)
        for index in 0..<5 { cache.setData(bytes(10 + index), forKey: "key\(index)") }
        XCTAssertGreaterThan(cache.memorySize, 0)
        XCTAssertGreaterThan(cache.diskSize, 0)
        cache.removeAll()
        XCTAssertEqual(cache.memorySize, 0)
        XCTAssertEqual(cache.diskSize, 0)
        XCTAssertEqual(listing(), [])
        for index in 0..<5 { XCTAssertNil(cache.data(forKey: "key\(index)")) }
        XCTAssertNil(storage().data(forKey: "key0"))

        cache.setData(bytes(3), forKey: "later")
        XCTAssertEqual(storage().data(forKey: "later"), bytes(3))
    }

    // MARK: - Concurrency

    /// The value of the `sequence`-th operation on `key`: the pair repeated, with a length that varies, so a torn or
    /// mixed-up value can't pass for a written one.
    private static func value(key: String, sequence: Int) -> Data {
        Data(String(repeating: "\(key)#\(sequence);", count: 20 + sequence % 150).utf8)
    }

    func testConcurrentMixedOperationsNeverTearValues() {
        let keys = (0..<10).map { "key\($0)" }
        let operations = 1000
        // Memory smaller than the data and disk a bit more, so evictions, promotions and disk reads all happen.
        let cache = storage(memory: 8_000, disk: 20_000)
        var written: [String: Set<Data>] = [:]
        for index in 0..<operations where index % 3 == 0 {
            written[keys[index % keys.count], default: []].insert(Self.value(key: keys[index % keys.count], sequence: index))
        }
        let allowed = written
        let problems = Recorder<String>()

        @Sendable func check(_ data: Data?, _ key: String, _ context: String) {
            if let data, allowed[key]?.contains(data) != true {
                problems.append("\(context): \(key) read \(data.count) bytes that were never written for it")
            }
        }

        DispatchQueue.concurrentPerform(iterations: operations) { index in
            let key = keys[index % keys.count]
            switch index % 3 {
            case 0: cache.setData(Self.value(key: key, sequence: index), forKey: key)
            case 1: check(cache.data(forKey: key), key, "during")
            default:
                if index % 5 == 0 { cache.removeData(forKey: key) } else { check(cache.data(forKey: key), key, "during") }
            }
        }

        for key in keys { check(cache.data(forKey: key), key, "after") }
        let restarted = storage(memory: 8_000, disk: 20_000)
        for key in keys { check(restarted.data(forKey: key), key, "after restart") }
        XCTAssertEqual(problems.values, [])

        XCTAssertLessThanOrEqual(cache.memorySize, 8_000)
        XCTAssertLessThanOrEqual(cache.diskSize, 20_000)
        let names = listing()
        XCTAssertEqual(names.filter { $0.hasPrefix(".tmp-") }, [], "no temporary file is left")
        let onDisk = names.reduce(0) { total, name in
            let size = (try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[.size]) as? Int
            return total + (size ?? 0)
        }
        XCTAssertEqual(restarted.diskSize, onDisk)
        XCTAssertEqual(cache.diskSize, onDisk, "the index matches the directory")
    }
}
