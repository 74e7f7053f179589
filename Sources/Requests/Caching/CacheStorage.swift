import Foundation

/// Bytes by key, in memory and on disk, each bounded by size with least-recently-used eviction.
///
/// The storage layer of the response cache: it knows nothing of HTTP, only that a key maps to some bytes. Memory is
/// checked first; the disk keeps what memory had to drop and what a previous run of the process wrote, so a disk hit
/// is copied back into memory.
///
/// On disk each key is one file in ``directory``, named by the SHA-256 of the key, in the format of
/// ``encode(_:key:)``. A file is written under a temporary `.tmp-<UUID>` name and renamed over the final name, so a
/// reader sees the old file or the new one, never half of one; a file that does not decode is a miss and is removed.
///
/// Disk trouble (a directory that can't be created, is read-only or vanishes) never reaches the caller: the disk
/// operation quietly does nothing and the memory layer keeps working, because a cache that fails should only make
/// things slower, never wrong. Nothing here throws or traps.
///
/// Thread-safe: one lock guards all the bookkeeping. Large file reads and writes happen outside it, and what they
/// find or make is published under it (the rename of a finished file, the promotion of a read one), so no thread
/// waits on another's disk I/O and memory and disk never disagree about which value is newest.
final class CacheStorage: @unchecked Sendable {
    /// The prefix of files being written; any found when the directory is first used are a crash's leftovers.
    static let temporaryPrefix = ".tmp-"

    /// The most bytes kept in memory.
    let memoryCapacity: Int
    /// The most bytes kept on disk, headers included, as the files' sizes add up.
    let diskCapacity: Int
    /// Where the files live; nil when the disk layer is off (no directory given, or a disk capacity of 0).
    let directory: URL?
    /// Whether an existing ``directory`` is made `0700` (the default directory, which Requests names): a folder the
    /// caller chose keeps its mode (the files in it are `0600` either way); one Requests creates is `0700`.
    let tightensDirectory: Bool

    /// Guards every stored property below; never held while a large file is read or written.
    private let lock = NSLock()

    /// The values in memory.
    private var memory: [String: Data] = [:]
    /// Their use order, least recent first, for eviction.
    private var memoryOrder = LRUOrder()
    /// The sum of the sizes of the values in `memory`.
    private var memoryBytes = 0

    /// What is known of a file on disk, by file name.
    private struct DiskEntry {
        /// The file's size in bytes, header included.
        var size: Int
        /// Which write made the file: a read done outside the lock compares it afterwards, so it never promotes or
        /// removes a file that was replaced or removed meanwhile.
        var stamp: UInt64
    }

    /// The files on disk, by file name; built from the directory listing on first use, then kept up to date here
    /// (the listing isn't read again unless the directory turns out to have vanished).
    private var disk: [String: DiskEntry] = [:]
    /// Their use order, least recent first, for eviction.
    private var diskOrder = LRUOrder()
    /// The sum of the sizes in `disk`.
    private var diskBytes = 0
    /// Whether `disk` has been built from the directory listing yet.
    private var diskIndexLoaded = false
    /// Whether the directory turned out not to be a private folder of this user (see `PrivateFolder`): the disk
    /// layer then neither reads, writes nor removes anything in it.
    private var directoryRefused = false
    /// The last stamp handed out; see ``DiskEntry/stamp``.
    private var lastStamp: UInt64 = 0
    /// See ``keyedDigest``; its key read or made on first use.
    private var loadedKeyedDigest: KeyedDigest?

    /// A storage holding up to `memoryCapacity` bytes in memory and `diskCapacity` bytes in files in `directory`.
    ///
    /// Nothing touches the disk here: the directory is listed when first used and created when first written, so
    /// making a storage is cheap and can't fail. With `directory` nil or `diskCapacity` 0 the storage is memory
    /// only. Negative capacities count as 0.
    init(memoryCapacity: Int, diskCapacity: Int, directory: URL?, tightensDirectory: Bool = false) {
        self.memoryCapacity = max(0, memoryCapacity)
        self.diskCapacity = max(0, diskCapacity)
        self.directory = diskCapacity > 0 ? directory?.standardizedFileURL : nil
        self.tightensDirectory = tightensDirectory
    }

    // MARK: - Public operations

    /// The bytes stored for `key`, or nil.
    ///
    /// Memory first; otherwise the key's file is read (outside the lock), its header checked, and the bytes copied
    /// into memory. A file that can't be read or decoded is a miss and is removed, so it costs one failed read only.
    func data(forKey key: String) -> Data? {
        let fileName = Self.fileName(forKey: key)

        let (cached, stamp): (Data?, UInt64?) = lock.withLock {
            if let value = memory[key] {
                memoryOrder.touch(key)
                // A value used from memory is in use on disk too, so that the disk evicts it last.
                if disk[fileName] != nil { diskOrder.touch(fileName) }
                return (value, nil)
            }
            guard let directory else { return (nil, nil) }
            loadDiskIndexIfNeeded(in: directory)
            return (nil, disk[fileName]?.stamp)
        }
        if let cached { return cached }
        guard let directory, let stamp else { return nil }

        let fileURL = directory.appendingPathComponent(fileName, isDirectory: false)
        // Only a file of this user, not a link: a folder swapped under the cache holds nothing it will read.
        let value = (try? PrivateFolder.readOwnFile(fileURL)).flatMap { Self.decode($0, expectedKey: key) }

        let unchanged = lock.withLock {
            // Only a file that is still the one looked up may be removed or promoted: if a write or removal came in
            // meanwhile, it already put memory and disk in order, and its result must not be overwritten.
            guard disk[fileName]?.stamp == stamp else { return false }
            if let value {
                diskOrder.touch(fileName)
                storeInMemory(value, forKey: key)
            } else {
                removeDiskEntry(fileName, in: directory)
            }
            return true
        }

        if value != nil, unchanged {
            // Keeps the use order across a restart, when the index is rebuilt from modification dates. Harmless if
            // it fails or lands on a newer file of the same key.
            try? FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: fileURL.path)
        }
        return value
    }

    /// Stores `data` for `key`, in memory and on disk, replacing what was there.
    ///
    /// The file is written under a temporary name outside the lock; the rename over the final name and the memory
    /// update are made together under it, so the newest value wins in both layers. If the file can't be written,
    /// the key's old file is dropped, so the disk never answers with a value older than memory's.
    func setData(_ data: Data, forKey key: String) {
        guard let directory else {
            lock.withLock { storeInMemory(data, forKey: key) }
            return
        }
        let fileName = Self.fileName(forKey: key)
        let contents = Self.encode(data, key: key)
        // Loaded before the temporary file is written, so that the removal of a crash's leftovers, on first use,
        // can't take a file this process is writing.
        let refused = lock.withLock {
            loadDiskIndexIfNeeded(in: directory)
            return directoryRefused
        }

        // A file larger than the whole disk capacity would only evict everything and then itself.
        let written = contents.count <= diskCapacity && !refused ? writeTemporaryFile(contents, in: directory) : nil

        lock.lock()
        defer { lock.unlock() }
        if written?.directoryWasMissing == true {
            // The directory vanished and was made again: the files the index knows are gone.
            reloadDiskIndex(in: directory, removingTemporaryFiles: false)
        }
        let fileURL = directory.appendingPathComponent(fileName, isDirectory: false)
        if let temporaryURL = written?.url, Self.moveFile(temporaryURL, to: fileURL) {
            if let old = disk[fileName] { diskBytes -= old.size }
            lastStamp += 1
            disk[fileName] = DiskEntry(size: contents.count, stamp: lastStamp)
            diskBytes += contents.count
            diskOrder.touch(fileName)
            evictDisk(in: directory)
        } else {
            if let temporaryURL = written?.url { Self.removeFile(temporaryURL) }
            removeDiskEntry(fileName, in: directory)
        }
        storeInMemory(data, forKey: key)
    }

    /// Removes what is stored for `key`, from memory and disk.
    func removeData(forKey key: String) {
        lock.lock()
        defer { lock.unlock() }
        removeFromMemory(key)
        guard let directory else { return }
        loadDiskIndexIfNeeded(in: directory)
        guard !directoryRefused else { return }
        let fileName = Self.fileName(forKey: key)
        // Removed even when the index doesn't know it: it may have been written by another process since.
        if disk[fileName] == nil {
            Self.removeFile(directory.appendingPathComponent(fileName, isDirectory: false))
        } else {
            removeDiskEntry(fileName, in: directory)
        }
    }

    /// Removes everything, from memory and disk.
    ///
    /// Files that look like entries are removed whether the index knows them or not; temporary files are left to
    /// the writes that own them, and foreign files are left alone.
    func removeAll() {
        lock.lock()
        defer { lock.unlock() }
        memory.removeAll()
        memoryOrder.removeAll()
        memoryBytes = 0
        guard let directory else { return }
        // Loaded first so that a crash's temporary files go too, as on any first use.
        loadDiskIndexIfNeeded(in: directory)
        guard !directoryRefused else { return }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in names where Self.isEntryFileName(name) {
            Self.removeFile(directory.appendingPathComponent(name, isDirectory: false))
        }
        disk.removeAll()
        diskOrder.removeAll()
        diskBytes = 0
    }

    /// The bytes held in memory now (for tests).
    var memorySize: Int {
        lock.withLock { memoryBytes }
    }

    /// The bytes on disk, headers included, as the index counts them (for tests); lists the directory on first use.
    var diskSize: Int {
        lock.withLock {
            guard let directory else { return 0 }
            loadDiskIndexIfNeeded(in: directory)
            return diskBytes
        }
    }

    // MARK: - Memory (lock held)

    /// Puts `value` in memory as the most recent entry, then evicts the least recent ones down to capacity.
    ///
    /// A value larger than the whole capacity isn't kept (it would evict everything and then itself), and the old
    /// value for the key is dropped, so memory never answers with a stale value.
    private func storeInMemory(_ value: Data, forKey key: String) {
        removeFromMemory(key)
        guard value.count <= memoryCapacity else { return }
        memory[key] = value
        memoryBytes += value.count
        memoryOrder.touch(key)
        while memoryBytes > memoryCapacity, let victim = memoryOrder.leastRecent {
            removeFromMemory(victim)
        }
    }

    /// Drops `key` from memory, if there.
    private func removeFromMemory(_ key: String) {
        guard let old = memory.removeValue(forKey: key) else { return }
        memoryBytes -= old.count
        memoryOrder.remove(key)
    }

    // MARK: - Disk index (lock held)

    /// Builds the index from the directory listing the first time the disk is used.
    ///
    /// Done under the lock and only once, so every operation sees the same index; temporary files left by a crash
    /// are removed then, before this process has written any of its own.
    private func loadDiskIndexIfNeeded(in directory: URL) {
        guard !diskIndexLoaded else { return }
        reloadDiskIndex(in: directory, removingTemporaryFiles: true)
    }

    /// Replaces the index with what the directory holds: entry files by modification date, oldest as least recent.
    ///
    /// A directory that is missing or unreadable gives an empty index; that is the truth as far as reads can tell.
    private func reloadDiskIndex(in directory: URL, removingTemporaryFiles: Bool) {
        diskIndexLoaded = true
        disk.removeAll()
        diskOrder.removeAll()
        diskBytes = 0
        // Made private here if missing; a folder that is not this user's (or a link) is never used.
        do {
            try Self.ensure(directory, tightening: tightensDirectory)
        } catch PrivateFolder.Refusal.failed {
            // Missing and not makeable now (a read-only parent): an empty index, as before; writes try again.
        } catch {
            // A link, a file, or another user's folder.
            directoryRefused = true
            return
        }

        let keys: [URLResourceKey] = [.isRegularFileKey, .fileSizeKey, .contentModificationDateKey]
        let urls =
            (try? FileManager.default.contentsOfDirectory(
                at: directory, includingPropertiesForKeys: keys, options: []
            )) ?? []
        var found: [(name: String, size: Int, date: Date)] = []
        for url in urls {
            let name = url.lastPathComponent
            if name.hasPrefix(Self.temporaryPrefix) {
                // Only a name this storage gives (the prefix and a UUID): a caller's own dot-file is left alone.
                if removingTemporaryFiles, UUID(uuidString: String(name.dropFirst(Self.temporaryPrefix.count))) != nil { Self.removeFile(url) }
                continue
            }
            guard Self.isEntryFileName(name),
                let values = try? url.resourceValues(forKeys: Set(keys)),
                values.isRegularFile == true,
                let size = values.fileSize
            else { continue }
            found.append((name, size, values.contentModificationDate ?? .distantPast))
        }
        // By date, then by name so that equal dates (coarse file systems) still give one fixed order.
        found.sort { ($0.date, $0.name) < ($1.date, $1.name) }
        for file in found {
            lastStamp += 1
            disk[file.name] = DiskEntry(size: file.size, stamp: lastStamp)
            diskBytes += file.size
            diskOrder.touch(file.name)
        }
        // The directory may have been filled with a larger capacity in an earlier run.
        evictDisk(in: directory)
    }

    /// Removes the least recently used files until the total is within ``diskCapacity``.
    private func evictDisk(in directory: URL) {
        while diskBytes > diskCapacity, let victim = diskOrder.leastRecent {
            removeDiskEntry(victim, in: directory)
        }
    }

    /// Removes `fileName` from the index and from the directory.
    ///
    /// The index entry goes even when the file can't be removed (a read-only directory): the index is what reads
    /// consult, so the file is gone as far as this storage is concerned.
    private func removeDiskEntry(_ fileName: String, in directory: URL) {
        Self.removeFile(directory.appendingPathComponent(fileName, isDirectory: false))
        if let old = disk.removeValue(forKey: fileName) {
            diskBytes -= old.size
        }
        diskOrder.remove(fileName)
    }

    /// The key of the response cache's digests: 32 random bytes, kept in the directory's `partition-key` file (mode
    /// 0600, a regular file of this user) so that entries written by an earlier run still match; in memory only when
    /// there is no directory or that file cannot be used (entries on disk then never match, and are replaced).
    var keyedDigest: KeyedDigest {
        lock.withLock {
            if let loadedKeyedDigest { return loadedKeyedDigest }
            let key = directory.flatMap { Self.readOrMakePartitionKey(in: $0, tightening: tightensDirectory) } ?? (0..<32).map { _ in UInt8.random(in: .min ... .max) }
            let digest = KeyedDigest(key: key)
            loadedKeyedDigest = digest
            return digest
        }
    }
}
