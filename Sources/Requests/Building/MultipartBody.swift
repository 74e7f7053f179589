#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// At file scope, where `close` is the system call and not `InputStream.close()`.
func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

/// Receives the encoded body: in memory, or in a temporary file. A sink that is dropped (after a boundary
/// collision or an error) closes and removes its file.
final class BodySink {
    private(set) var data = Data()
    private(set) var count = 0
    private var fd: Int32 = -1
    private var path: String?  // set while a named file must be removed when the sink or its stream goes

    init(capacity: Int) {
        data.reserveCapacity(capacity)
    }

    /// A new file `Requests-multipart-` + six random characters in `directory`. On Linux it is unlinked at once: only the
    /// descriptor keeps it, so the kernel frees it when the descriptor is closed, even after a crash.
    init(temporaryFileIn directory: URL) throws {
        // mkstemp replaces the six trailing X of the template.
        let pattern = "Requests-multipart-" + String(repeating: "X", count: 6)
        var template = Array(directory.appendingPathComponent(pattern).path.utf8CString)
        fd = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.map { mkstemp($0) } ?? -1 }
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)  // a child process must not keep the file alive (mkostemp is not imported)
        let name = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        #if canImport(FoundationNetworking)
        unlink(name)
        #else
        path = name
        #endif
    }

    deinit {
        if fd >= 0 { closeDescriptor(fd) }
        if let path { unlink(path) }
    }

    func write(_ bytes: Data) throws {
        guard fd >= 0 else {
            data.append(bytes)
            count += bytes.count
            return
        }
        try bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var done = 0
            while done < raw.count, let base = raw.baseAddress {
                let written = writeDescriptor(fd, base + done, raw.count - done)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                done += written
            }
        }
        count += bytes.count
    }

    /// A stream over the file written so far, which takes over the file. Call once, on a file sink.
    func makeStream() -> InputStream {
        #if canImport(FoundationNetworking)
        defer { fd = -1 }
        return TemporaryFileStream(fd: fd, length: count)
        #else
        // Untested here: Darwin's URLSession needs run-loop events a plain InputStream subclass does not send,
        // so use a file stream and remove the named file when the stream is released.
        closeDescriptor(fd)
        fd = -1
        let remover = FileRemover(path: path ?? "")
        path = nil
        let stream = InputStream(url: URL(fileURLWithPath: remover.path)) ?? InputStream(data: Data())
        objc_setAssociatedObject(stream, fileRemoverKey, remover, .OBJC_ASSOCIATION_RETAIN)
        return stream
        #endif
    }
}

/// At file scope, where `write` is the system call and not `BodySink.write(_:)`.
private func writeDescriptor(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buffer, count)
}

#if canImport(FoundationNetworking)
/// Reads an unlinked temporary file through the descriptor it owns. It closes the descriptor, freeing the disk
/// space, at the end of the body, on `close()`, or when released: swift-corelibs URLSession calls `open()`, then
/// `hasBytesAvailable` and `read(_:maxLength:)` in turn (up to 65,524 bytes) until the end, and never `close()`.
/// Thread-safe: URLSession reads on its own threads.
final class TemporaryFileStream: InputStream {
    private let lock = NSLock()
    private var fd: Int32
    private let length: Int
    private var offset = 0
    private var status = Stream.Status.notOpen
    private var failure: Error?

    init(fd: Int32, length: Int) {
        self.fd = fd
        self.length = length
        super.init(data: Data())
    }

    deinit {
        if fd >= 0 { closeDescriptor(fd) }
    }

    override func open() {
        lock.withLock { if status == .notOpen { status = .open } }
    }

    override func close() {
        lock.withLock {
            status = .closed
            release()
        }
    }

    override var streamStatus: Stream.Status { lock.withLock { status } }
    override var streamError: Error? { lock.withLock { failure } }
    override var hasBytesAvailable: Bool { lock.withLock { (status == .open || status == .notOpen) && offset < length } }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        lock.withLock {
            guard status == .open else { return status == .atEnd ? 0 : -1 }
            guard maxLength > 0 else { return 0 }
            while true {
                let count = pread(fd, buffer, min(maxLength, length - offset), off_t(offset))
                if count < 0 && errno == EINTR { continue }
                if count < 0 {
                    failure = POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                    status = .error
                } else {
                    offset += count
                    if count == 0 || offset >= length { status = .atEnd }
                }
                // Free the disk now rather than when the request is released, which may be much later.
                if status != .open { release() }
                return count
            }
        }
    }

    /// Getting the buffer directly is not supported, so callers use `read(_:maxLength:)`.
    override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length: UnsafeMutablePointer<Int>) -> Bool {
        false
    }

    private func release() {
        if fd >= 0 { closeDescriptor(fd) }
        fd = -1
    }
}
#else
/// Removes a temporary file when released, together with the stream it is associated with.
private final class FileRemover: NSObject {
    let path: String
    init(path: String) { self.path = path }
    deinit { unlink(path) }
}

nonisolated(unsafe) private let fileRemoverKey = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)
#endif

extension MultipartFormData {
    /// A new stream over the same file as `stream`, one that ``apply(to:)`` made, for a request URLSession must
    /// send again; `nil` for any other stream. The file is removed once neither stream is left. (Linux never asks:
    /// it drops a streamed body on a 307 or 308.)
    static func reopenedStream(_ stream: InputStream) -> InputStream? {
        #if canImport(FoundationNetworking)
        return nil
        #else
        guard let remover = objc_getAssociatedObject(stream, fileRemoverKey) as? FileRemover,
            let reopened = InputStream(url: URL(fileURLWithPath: remover.path))
        else { return nil }
        objc_setAssociatedObject(reopened, fileRemoverKey, remover, .OBJC_ASSOCIATION_RETAIN)
        return reopened
        #endif
    }
}
