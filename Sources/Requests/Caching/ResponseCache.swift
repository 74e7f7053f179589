#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// An HTTP cache for data requests, kept in memory and on disk in ``defaultDirectory`` by default; ``inMemory(capacity:)``
/// keeps it in memory only.
///
/// It behaves the same on Linux and Apple platforms (RFC 9111, as a private client cache): a fresh stored response is
/// served without the network; a stale one, or one marked `no-cache`, is revalidated with `If-None-Match` /
/// `If-Modified-Since`, and a `304` delivers the stored body through the same status check, validations and
/// `processResponse` as a body from the network.
///
/// Turn it on per queue with ``RequestPolicies/responseCache``, or per request with
/// ``NetworkRequest/responseCache``; choose per request how it is used with ``NetworkRequest/cacheUse``.
/// Downloads, uploads and streams do not use it.
///
/// What is stored: responses to `GET` and `HEAD` with status 200, 203, 204, 404, 405, 410 or 414 (no redirect: it
/// would bypass the redirect policy) that have a freshness lifetime (`Cache-Control: max-age`, `Expires`) or a
/// validator (`ETag`, `Last-Modified`), and fit in ``maximumEntrySize`` (headers included). Never a response with
/// `no-store` (in the request or the response) or `Vary: *`, one that arrived through a redirect, or one that owes
/// something to a credential the transport may have added (a challenge it answered, or a credential in the session's
/// storage for the host when the request carries no `Authorization` of its own). Monitors get
/// ``CacheEvent/notStored(reason:)`` with the ``NotStoredReason`` for every response to `GET` or `HEAD` it does not
/// store.
///
/// One entry per method and URL, for the credential the request carried (`Authorization`, `Proxy-Authorization`,
/// URL user info, and the ``TokenAuthenticator``'s token whatever header it goes in) and the header values its `Vary`
/// names as they were sent (the session's headers and cookies included): a request with others misses, and its
/// response replaces the entry. Only keyed digests of those values are written to disk, in a directory and files only
/// the user can read. A successful `POST`, `PUT`, `PATCH` or `DELETE` removes the URL's entries. Freshness has no
/// heuristic: a response without `max-age` or `Expires` is always revalidated. The request's `Cache-Control` is
/// honoured too: `no-cache`, `max-age`, `min-fresh` and `max-stale` (which never serves a response marked `no-cache`
/// or `must-revalidate` without asking the server).
///
/// Storage is in memory and on disk, each bounded by size, evicting the least recently used. A write goes to a
/// temporary file that is then renamed, so a crash never leaves half an entry; an entry that cannot be read counts
/// as a miss; a directory that disappears or cannot be written makes the disk layer do nothing.
public final class ResponseCache: @unchecked Sendable {
    let storage: CacheStorage
    /// The largest entry stored, its headers, body and bookkeeping together. Default: a quarter of the memory capacity
    /// (of the disk capacity for a cache without memory).
    public let maximumEntrySize: Int

    /// A cache holding up to `memoryCapacity` bytes in memory and `diskCapacity` bytes in `directory` (`nil`: memory
    /// only). Defaults: 10 MiB, 100 MiB, ``defaultDirectory``. A directory Requests creates is made `0700`, and so is
    /// an existing ``defaultDirectory``; an existing directory of your choice keeps its mode (the files in it are
    /// `0600`). A directory that is a link, not a directory, or another user's is not used: the cache is then
    /// memory only.
    public init(
        memoryCapacity: Int = 10 << 20,
        diskCapacity: Int = 100 << 20,
        directory: URL? = ResponseCache.defaultDirectory,
        maximumEntrySize: Int? = nil
    ) {
        storage = CacheStorage(
            memoryCapacity: max(0, memoryCapacity), diskCapacity: max(0, diskCapacity), directory: directory,
            tightensDirectory: directory.map { $0.standardizedFileURL == Self.defaultDirectory.standardizedFileURL } ?? false)
        self.maximumEntrySize = max(0, maximumEntrySize ?? (memoryCapacity > 0 ? memoryCapacity : diskCapacity) / 4)
    }

    /// A cache that keeps up to `capacity` bytes in memory and never touches the disk: no directory is created, and
    /// nothing (not even the key of its digests) is written to a file. What it holds is gone when the process ends.
    /// The largest entry is a quarter of `capacity`. Default: 10 MiB.
    public static func inMemory(capacity: Int = 10 << 20) -> ResponseCache {
        ResponseCache(memoryCapacity: capacity, diskCapacity: 0, directory: nil)
    }

    /// `Requests.ResponseCache-<app>` in the user's caches directory (on Linux `~/.cache`), or in the temporary
    /// directory; `<app>` is the main bundle's identifier, else the process name, so that apps that are not sandboxed
    /// (a Mac app, a command-line tool) never share a cache.
    public static var defaultDirectory: URL {
        let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first ?? FileManager.default.temporaryDirectory
        return caches.appendingPathComponent("Requests.ResponseCache-" + appName, isDirectory: true)
    }

    /// The app's name in the default directory: its bundle identifier or process name, as letters, digits, `.`, `-`
    /// and `_` (others become `_`).
    static var appName: String {
        let name = Bundle.main.bundleIdentifier ?? ProcessInfo.processInfo.processName
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")
        let safe = String(name.prefix(100).map { allowed.contains($0) ? $0 : "_" })
        return safe.isEmpty || safe.allSatisfy({ $0 == "." }) ? "app" : safe
    }

    /// Removes every stored response.
    public func removeAll() {
        storage.removeAll()
    }

    /// Removes what is stored for `request`'s URL, for `GET` and `HEAD`.
    public func removeResponses(for url: URL) {
        guard let url = CacheableRequest.bare(url) else { return }
        ["GET", "HEAD"].forEach { storage.removeData(forKey: key(method: $0, url: url)) }
    }

    // MARK: - For the operation

    /// The name of the pseudo-header, among an entry's `Vary` values, that holds the digest of the credential its
    /// request carried ("" for none): it never matches a header a request can send.
    static let credentialPartition = ":credential"

    /// One entry per method and URL (without user info), named by the URL's keyed digest: no URL (nor a token in
    /// its query) is written to disk.
    func key(method: String, url: URL) -> String {
        "\(method) \(storage.keyedDigest.hex(url.absoluteString))"
    }

    /// The keyed digest of a request value: what entries hold of `Vary` values and credentials, so that no header
    /// value is written to disk and none can be guessed from the files without the cache's key.
    func digest(_ value: String) -> String {
        value.isEmpty ? "" : storage.keyedDigest.hex(value)
    }

    /// What an entry stored for `request` must hold to answer it: the digest of each header its `Vary` names
    /// (`Cookie` too when the response set cookies), and of the request's credential.
    func partition(of request: CacheableRequest, varyNames: [String]) -> [String: String] {
        var values = [Self.credentialPartition: digest(request.credential)]
        for name in varyNames where name != "*" && name != Self.credentialPartition {
            values[name] = digest(request.sentValue(name) ?? "")
        }
        return values
    }

    /// The stored response for `request`, if it was stored for the same credential and `Vary` values.
    func entry(for request: CacheableRequest) -> CachedResponse? {
        guard let data = storage.data(forKey: key(method: request.method, url: request.url)),
            let entry = CachedResponse(serialized: data), entry.varyValues[Self.credentialPartition] != nil,
            partition(of: request, varyNames: Array(entry.varyValues.keys)) == entry.varyValues
        else { return nil }
        return entry
    }

    /// Stores `response` to `request` if the rules allow it, and if no `refusal` (the stage's reason not to) or
    /// credential the transport may add stands in the way; otherwise says why not. `maximumEntrySize` bounds the entry
    /// as stored, headers included.
    func store(
        _ body: Data, response: HTTPURLResponse, for request: CacheableRequest, requestTime: Date, responseTime: Date,
        refusing refusal: NotStoredReason?
    ) -> NotStoredReason? {
        var entry = CachedResponse(body: body, response: response, requestTime: requestTime, responseTime: responseTime)
        if let reason = entry.notStorableReason(for: request.request) ?? refusal { return reason }
        if request.transportMayAddCredential { return .credentialInSessionStorage }
        // The body alone may be enough to tell, before the entry is serialized.
        guard body.count <= maximumEntrySize else { return .tooLarge(bytes: body.count, limit: maximumEntrySize) }
        entry.varyValues = partition(of: request, varyNames: entry.varyNames)
        let serialized = entry.serialized()
        guard serialized.count <= maximumEntrySize else { return .tooLarge(bytes: serialized.count, limit: maximumEntrySize) }
        storage.setData(serialized, forKey: key(method: request.method, url: request.url))
        return nil
    }

    /// Replaces the stored entry for `request` with `entry`, after a `304` refreshed its headers: its partition is
    /// taken again (the `304` may name other `Vary` headers, or set cookies), and an entry that no longer fits in
    /// ``maximumEntrySize``, or now says `Vary: *` or `no-store`, is removed instead (the reason is returned).
    func replace(_ entry: CachedResponse, for request: CacheableRequest) -> NotStoredReason? {
        var entry = entry
        let varyNames = entry.varyNames
        entry.varyValues = partition(of: request, varyNames: varyNames)
        let key = key(method: request.method, url: request.url)
        let serialized = entry.serialized()
        var reason: NotStoredReason?
        if entry.cacheControl["no-store"] != nil {
            reason = .noStore
        } else if varyNames.contains("*") {
            reason = .varyAll
        } else if serialized.count > maximumEntrySize {
            reason = .tooLarge(bytes: serialized.count, limit: maximumEntrySize)
        }
        if reason != nil {
            storage.removeData(forKey: key)
        } else {
            storage.setData(serialized, forKey: key)
        }
        return reason
    }

    func remove(for request: CacheableRequest) {
        storage.removeData(forKey: key(method: request.method, url: request.url))
    }

    /// After a successful unsafe request, what is stored for its URL is out of date (RFC 9111 §4.4).
    func invalidate(after request: URLRequest, status: Int) {
        let method = (request.httpMethod ?? "GET").uppercased()
        guard ["POST", "PUT", "PATCH", "DELETE"].contains(method), (200..<400).contains(status),
            let url = request.url.flatMap(CacheableRequest.bare)
        else { return }
        removeResponses(for: url)
    }
}

/// How a request uses the ``ResponseCache``.
public enum CacheUse: Sendable, Equatable {
    /// A fresh stored response is served without the network, a stale one is revalidated, and what the network
    /// answers is stored if it may be. The default.
    case useCache
    /// A stored response, even a fresh one, is revalidated before it is served.
    case revalidate
    /// What is stored is ignored; the network's answer is stored.
    case reload
    /// Only what is stored, fresh or stale, and never the network: nothing stored (or only a response marked
    /// `no-cache` or `must-revalidate`, which may not be served without asking the server) fails with
    /// ``ResponseCacheError/notCached(_:)``.
    case onlyIfCached
    /// Neither read nor written.
    case bypass
}

/// Why a request that had to be answered from the cache was not.
public enum ResponseCacheError: Error, Equatable, CustomStringConvertible {
    /// ``CacheUse/onlyIfCached`` found nothing stored for the request.
    case notCached(URL?)

    /// Names the URL, without user, password, query or fragment.
    public var description: String {
        switch self {
        case let .notCached(url): return "Nothing is stored in the response cache for \(url.map { ErrorText.url($0) } ?? "the request")."
        }
    }
}
