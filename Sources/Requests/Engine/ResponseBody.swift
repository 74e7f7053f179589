#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A processed success value, with what makes it final: `commit` runs in the step that claims the outcome
/// (under the operation's lock, so it must be quick and must not call back into the operation; a throw turns
/// the outcome into that failure), and `abandon` runs if a cancellation claimed it first.
struct Processed<Value> {
    let value: Value
    var commit: (() throws -> Void)?
    var abandon: (() -> Void)?

    init(value: Value, commit: (() throws -> Void)? = nil, abandon: (() -> Void)? = nil) {
        self.value = value
        self.commit = commit
        self.abandon = abandon
    }
}

/// A response's body: bytes in memory, or the file a download wrote.
enum ResponseBody: Sendable {
    case data(Data)
    case file(URL)

    /// Its size in bytes.
    var count: Int {
        switch self {
        case let .data(data): return data.count
        case let .file(url): return ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? NSNumber)?.intValue ?? 0
        }
    }

    /// The bytes validations see: a file's are not read (an empty `Data`).
    var inMemory: Data {
        if case let .data(data) = self { return data }
        return Data()
    }

    /// Removes a file body; one in memory is simply released.
    func discard() {
        if case let .file(url) = self {
            try? FileManager.default.removeItem(at: url)
        }
    }

    /// The bytes a status error carries: a file's first 64 KiB, which is where a server's error payload is.
    var errorPayload: Data {
        switch self {
        case let .data(data): return data
        case let .file(url): return (try? FileHandle(forReadingFrom: url)).flatMap { try? $0.read(upToCount: 64 * 1024) } ?? Data()
        }
    }
}
