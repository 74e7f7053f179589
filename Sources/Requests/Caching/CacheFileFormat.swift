#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The file format of the cache's disk entries.
extension CacheStorage {
    /// Where a file's header starts: "RQCS", so a foreign file in the directory is never taken for an entry.
    static let magic: [UInt8] = [0x52, 0x51, 0x43, 0x53]
    /// The format of the header; bumped when it changes, so files from another version are misses, not garbage.
    static let formatVersion: UInt8 = 2
    /// Magic (4) + version (1) + key length (UInt32, 4) + body length (UInt64, 8), before the key's bytes.
    static let fixedHeaderLength = 4 + 1 + 4 + 8

    /// The file name for `key`: the hex SHA-256 of its UTF-8 bytes, so any key gives a safe, fixed-length name.
    static func fileName(forKey key: String) -> String {
        SHA256.hexDigest(Data(key.utf8))
    }

    /// Whether `name` has the shape of an entry's file name (64 lowercase hex digits), so that foreign files in the
    /// directory are neither indexed nor removed.
    static func isEntryFileName(_ name: String) -> Bool {
        let bytes = name.utf8
        return bytes.count == 64 && bytes.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The file contents for `data` under `key`: magic, version, key length (UInt32 big-endian), body length
    /// (UInt64 big-endian), the key's UTF-8 bytes, then `data`.
    ///
    /// The key is stored whole because two keys could share a name only through a hash collision, but checking
    /// costs little; the body length makes a truncated file detectable.
    static func encode(_ data: Data, key: String) -> Data {
        let keyBytes = Array(key.utf8)
        var contents = Data()
        contents.reserveCapacity(fixedHeaderLength + keyBytes.count + data.count)
        contents.append(contentsOf: magic)
        contents.append(formatVersion)
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: keyBytes.count).bigEndian) { contents.append(contentsOf: $0) }
        withUnsafeBytes(of: UInt64(data.count).bigEndian) { contents.append(contentsOf: $0) }
        contents.append(contentsOf: keyBytes)
        contents.append(data)
        return contents
    }

    /// The body of `contents` if it is a whole file written by ``encode(_:key:)`` for `expectedKey`, else nil.
    static func decode(_ contents: Data, expectedKey: String) -> Data? {
        let bytes = [UInt8](contents.prefix(fixedHeaderLength))
        guard bytes.count == fixedHeaderLength,
            Array(bytes[0..<4]) == magic,
            bytes[4] == formatVersion
        else { return nil }
        let keyLength = bytes[5..<9].reduce(0) { $0 << 8 | Int($1) }
        let bodyLength = bytes[9..<17].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let keyBytes = Array(expectedKey.utf8)
        // Exactly the declared length: shorter is a truncated write, longer is not a file of ours. The key length
        // is compared first, so the subtraction below can't go negative.
        guard keyLength == keyBytes.count,
            contents.count >= fixedHeaderLength + keyLength,
            UInt64(contents.count - fixedHeaderLength - keyLength) == bodyLength
        else { return nil }
        let keyStart = contents.startIndex + fixedHeaderLength
        let bodyStart = keyStart + keyLength
        guard contents[keyStart..<bodyStart].elementsEqual(keyBytes) else { return nil }
        return contents.subdata(in: bodyStart..<contents.endIndex)
    }
}

/// The use order of a set of keys, least recent first, with constant-time touch and remove.
///
/// A doubly linked list threaded through a dictionary (each key knows its neighbours), so it needs no node objects
/// and stays a plain value guarded by the storage's lock.
struct LRUOrder {
    /// A key's neighbours: `previous` was used before it, `next` after it.
    private struct Link {
        var previous: String?
        var next: String?
    }

    /// The links, by key.
    private var links: [String: Link] = [:]
    /// The least recently used key: the next to evict.
    private(set) var leastRecent: String?
    /// The most recently used key.
    private var mostRecent: String?

    /// Makes `key` the most recent, adding it if absent.
    mutating func touch(_ key: String) {
        if mostRecent == key { return }
        remove(key)
        links[key] = Link(previous: mostRecent, next: nil)
        if let last = mostRecent {
            links[last]?.next = key
        } else {
            leastRecent = key
        }
        mostRecent = key
    }

    /// Takes `key` out of the order, if there.
    mutating func remove(_ key: String) {
        guard let link = links.removeValue(forKey: key) else { return }
        if let previous = link.previous {
            links[previous]?.next = link.next
        } else {
            leastRecent = link.next
        }
        if let next = link.next {
            links[next]?.previous = link.previous
        } else {
            mostRecent = link.previous
        }
    }

    /// Forgets every key.
    mutating func removeAll() {
        links.removeAll()
        leastRecent = nil
        mostRecent = nil
    }
}
