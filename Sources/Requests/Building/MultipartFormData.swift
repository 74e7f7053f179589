#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `multipart/form-data` body (RFC 7578) of text fields, data parts and file parts, in the order appended.
///
/// ``apply(to:)`` encodes it into a `URLRequest`. Files are only read then, in 64 KiB chunks, never whole.
///
/// Names and file names are sent as quoted strings in `Content-Disposition`, escaped as browsers do (WHATWG HTML):
/// `"` becomes `%22`, CR `%0D` and LF `%0A`, so no input can end the header early or inject another one.
/// Everything else, non-ASCII UTF-8 and `%` included, is sent as is.
public struct MultipartFormData: Sendable {
    /// Bodies of at least this many bytes are written to a temporary file and sent from it; smaller ones are
    /// built in memory as `httpBody`. Default: 10_000_000.
    public var streamingThreshold = 10_000_000

    private enum Content: Sendable {
        case data(Data)
        case file(URL)
    }

    private struct Part: Sendable {
        let name: String
        let fileName: String?
        let mimeType: String?
        let content: Content
    }

    private var parts: [Part] = []
    private let makeBoundary: @Sendable () -> String

    /// An empty form.
    public init() {
        self.init(boundaryGenerator: MultipartFormData.randomBoundary)
    }

    /// A form with text `fields`, then file parts from `files`, each in order of name.
    public init(fields: [String: String] = [:], files: [String: URL]) {
        self.init()
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            append(value, name: name)
        }
        for (name, url) in files.sorted(by: { $0.key < $1.key }) {
            append(fileAt: url, name: name)
        }
    }

    /// For tests: each try of ``apply(to:)`` takes the next boundary from `boundaryGenerator`.
    package init(boundaryGenerator: @escaping @Sendable () -> String) {
        makeBoundary = boundaryGenerator
    }

    /// Appends a text field, sent as UTF-8 without a `Content-Type`.
    public mutating func append(_ value: String, name: String) {
        parts.append(Part(name: name, fileName: nil, mimeType: nil, content: .data(Data(value.utf8))))
    }

    /// Appends a data part. `fileName` (default none) is sent only if given; `mimeType` defaults to the one of
    /// `fileName`'s extension, else `application/octet-stream`.
    public mutating func append(_ data: Data, name: String, fileName: String? = nil, mimeType: String? = nil) {
        let type = mimeType ?? fileName.map { Self.mimeType(forExtension: ($0 as NSString).pathExtension) }
        parts.append(Part(name: name, fileName: fileName, mimeType: type ?? Self.octetStream, content: .data(data)))
    }

    /// Appends the file at `url`, read when ``apply(to:)`` runs. `fileName` defaults to `url.lastPathComponent`;
    /// `mimeType` to the one of the URL's extension (such as `png` → `image/png`), else `application/octet-stream`.
    public mutating func append(fileAt url: URL, name: String, fileName: String? = nil, mimeType: String? = nil) {
        let type = mimeType ?? Self.mimeType(forExtension: url.pathExtension)
        parts.append(Part(name: name, fileName: fileName ?? url.lastPathComponent, mimeType: type, content: .file(url)))
    }

    /// Sets the body of `request`, `Content-Type: multipart/form-data; boundary=…` and, for a body in memory,
    /// its exact `Content-Length`. The method is left alone. Each call encodes anew (files are read again),
    /// so every attempt of a retried request gets a fresh body or stream.
    ///
    /// A streamed body (see ``streamingThreshold``) comes from a temporary file that is unlinked as soon as it is
    /// created (on Linux) and lives only as long as the stream, so nothing is left behind whether the request
    /// succeeds, fails, is cancelled or is never sent, even after a crash. On Linux, URLSession sends a body
    /// stream with `Transfer-Encoding: chunked`, and a `Content-Length` next to it is forbidden (RFC 9112 §6.1;
    /// nginx answers 400), so such a request has no `Content-Length`. (Its upload-from-file path would send the
    /// length, but crashes Foundation when the upload is cancelled.)
    ///
    /// Throws `RequestBuildingError.unreadableFile` for a file part that is missing, unreadable or not a regular
    /// file, `.invalidHeader(name: "Content-Type")` for a MIME type holding CR, LF or NUL, and a `POSIXError`
    /// if the temporary file cannot be written.
    /// - Returns: the exact length of the body in bytes.
    @discardableResult
    public func apply(to request: inout URLRequest) throws -> Int {
        let heads = try parts.map(Self.head)
        var estimate = 0
        for (part, head) in zip(parts, heads) {
            estimate += head.count + 80  // + the boundary line and CRLF
            switch part.content {
            case let .data(data): estimate += data.count
            case let .file(url): estimate += try Self.openRegularFile(url, thenClose: true).size
            }
        }
        let streamed = estimate >= streamingThreshold
        // The boundary must not occur in the content. A random one of 32 alphanumerics never does unless planted,
        // so a collision is only ever met in tests; each try costs one more pass over the content.
        for _ in 0..<Self.boundaryTries {
            let boundary = makeBoundary()
            guard Self.isValid(boundary) else { continue }
            let sink = try streamed ? BodySink(temporaryFileIn: FileManager.default.temporaryDirectory) : BodySink(capacity: estimate)
            guard try write(heads, boundary: boundary, to: sink) else { continue }
            request.setValue("multipart/form-data; boundary=\(boundary)", forHTTPHeaderField: "Content-Type")
            if streamed {
                request.httpBody = nil
                request.httpBodyStream = sink.makeStream()
                #if canImport(FoundationNetworking)
                request.setValue(nil, forHTTPHeaderField: "Content-Length")
                #else
                request.setValue(String(sink.count), forHTTPHeaderField: "Content-Length")
                #endif
            } else {
                request.httpBodyStream = nil
                request.httpBody = sink.data
                request.setValue(String(sink.count), forHTTPHeaderField: "Content-Length")
            }
            return sink.count
        }
        throw BoundaryCollision()
    }

    // MARK: - Encoding

    static let boundaryTries = 8
    private static let octetStream = "application/octet-stream"
    private static let chunkSize = 64 * 1024

    /// Every boundary the generator offered occurred in the content. Only an injected generator can cause it.
    struct BoundaryCollision: Error {}

    private static let alphanumerics = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".unicodeScalars)

    /// `Requests-` and 32 random alphanumerics (about 190 bits).
    package static func randomBoundary() -> String {
        "Requests-" + String(String.UnicodeScalarView((0..<32).map { _ in alphanumerics[Int.random(in: 0..<alphanumerics.count)] }))
    }

    /// 1 to 70 alphanumerics, `-`, `_` or `.`, which need no quoting in `Content-Type` (RFC 2046 allows a few more).
    static func isValid(_ boundary: String) -> Bool {
        (1...70).contains(boundary.unicodeScalars.count)
            && boundary.unicodeScalars.allSatisfy { alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0) }
    }

    /// The header block of a part, up to and including its empty line.
    private static func head(of part: Part) throws -> Data {
        var text = "Content-Disposition: form-data; name=\"\(escaped(part.name))\""
        if let fileName = part.fileName { text += "; filename=\"\(escaped(fileName))\"" }
        text += "\r\n"
        if let type = part.mimeType {
            guard !type.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw RequestBuildingError.invalidHeader(name: "Content-Type")
            }
            text += "Content-Type: \(type)\r\n"
        }
        return Data((text + "\r\n").utf8)
    }

    /// WHATWG's escaping for names in multipart/form-data. On unicode scalars: "\r\n" is a single `Character`.
    static func escaped(_ text: String) -> String {
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result.append(contentsOf: "%22".unicodeScalars)
            case "\r": result.append(contentsOf: "%0D".unicodeScalars)
            case "\n": result.append(contentsOf: "%0A".unicodeScalars)
            default: result.append(scalar)
            }
        }
        return String(result)
    }

    /// Writes the whole body. Returns `false`, leaving `sink` half written, as soon as `boundary` occurs in a
    /// part's headers or content.
    private func write(_ heads: [Data], boundary: String, to sink: BodySink) throws -> Bool {
        let pattern = Data(boundary.utf8)
        for (part, head) in zip(parts, heads) {
            guard !head.contains(pattern) else { return false }
            try sink.write(Data("--\(boundary)\r\n".utf8) + head)
            switch part.content {
            case let .data(data):
                guard !data.contains(pattern) else { return false }
                try sink.write(data)
            case let .file(url):
                guard try Self.copy(url, to: sink, unless: pattern) else { return false }
            }
            try sink.write(Data("\r\n".utf8))
        }
        try sink.write(Data("--\(boundary)--\r\n".utf8))
        return true
    }

    /// Copies the file in chunks while looking for `pattern`, also across chunk edges. Returns `false` if found.
    private static func copy(_ url: URL, to sink: BodySink, unless pattern: Data) throws -> Bool {
        let fd = try openRegularFile(url, thenClose: false).fd
        defer { closeDescriptor(fd) }
        var buffer = Data(count: chunkSize)
        var tail = Data()  // the last `pattern.count - 1` bytes copied, where an occurrence may begin
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw RequestBuildingError.unreadableFile(url) }
            if count == 0 { return true }
            let chunk = buffer.prefix(count)
            guard !chunk.contains(pattern), !(tail + chunk.prefix(pattern.count - 1)).contains(pattern) else { return false }
            try sink.write(chunk)
            tail = Data((chunk.count >= pattern.count - 1 ? chunk : tail + chunk).suffix(pattern.count - 1))
        }
    }

    /// Opens `url` for reading, checking that it is a regular file; returns the descriptor (−1 if closed) and size.
    private static func openRegularFile(_ url: URL, thenClose: Bool) throws -> (fd: Int32, size: Int) {
        let fd = url.isFileURL ? open(url.path, O_RDONLY | O_CLOEXEC) : -1
        guard fd >= 0 else { throw RequestBuildingError.unreadableFile(url) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
            closeDescriptor(fd)
            throw RequestBuildingError.unreadableFile(url)
        }
        if thenClose { closeDescriptor(fd) }
        return (thenClose ? -1 : fd, Int(info.st_size))
    }

    /// The MIME type for a file name extension (any case); `application/octet-stream` for an unknown one.
    package static func mimeType(forExtension pathExtension: String) -> String {
        mimeTypes[pathExtension.lowercased()] ?? octetStream
    }

    private static let mimeTypes = [
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp", "svg": "image/svg+xml",
        "heic": "image/heic", "json": "application/json", "xml": "application/xml", "pdf": "application/pdf", "zip": "application/zip",
        "gz": "application/gzip", "txt": "text/plain", "html": "text/html", "htm": "text/html", "css": "text/css", "csv": "text/csv",
        "js": "text/javascript", "mp4": "video/mp4", "mov": "video/quicktime", "mp3": "audio/mpeg", "wav": "audio/wav",
    ]
}

extension Data {
    fileprivate func contains(_ pattern: Data) -> Bool {
        !pattern.isEmpty && count >= pattern.count && range(of: pattern) != nil
    }
}
