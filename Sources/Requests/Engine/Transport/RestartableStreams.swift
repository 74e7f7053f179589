#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

#if canImport(FoundationNetworking)
/// A body stream for URLSession on Linux (see `SentBody`) that starts again from its first byte each time it is
/// opened. corelibs opens the same stream object again when it sends a request again itself, after an authentication
/// challenge got a credential (`startNewTransfer` reuses the task's body); a stream that went on from where it stopped
/// would send the headers and no body, and the server would wait for it until the timeout.
///
/// `Data` in memory, or a file read with `pread` from an offset: never more than `length` bytes, and a file that
/// ends before them fails the read (the transfer then fails at once, instead of announcing a length it never sends).
final class RestartableBodyStream: InputStream {
    enum Source {
        case data(Data)
        case file(URL)
    }

    private let lock = NSLock()
    private let source: Source
    private let length: Int
    private var offset = 0
    private var fd: Int32 = -1
    private var status = Stream.Status.notOpen
    private var failure: Error?

    init(_ source: Source, length: Int) {
        self.source = source
        self.length = length
        super.init(data: Data())
    }

    deinit {
        if fd >= 0 { _ = Glibc.close(fd) }
    }

    override func open() {
        lock.withLock {
            (offset, failure, status) = (0, nil, .open)
            guard case let .file(url) = source, fd < 0 else { return }
            fd = Glibc.open(url.path, O_RDONLY | O_CLOEXEC)
            if fd < 0 { fail(errno) }
        }
    }

    override func close() {
        lock.withLock {
            status = .closed
            if fd >= 0 { _ = Glibc.close(fd) }
            fd = -1
        }
    }

    override var streamStatus: Stream.Status { lock.withLock { status } }
    override var streamError: Error? { lock.withLock { failure } }
    override var hasBytesAvailable: Bool { lock.withLock { status == .open && offset < length } }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        lock.withLock {
            guard status == .open else { return status == .atEnd ? 0 : -1 }
            let wanted = min(maxLength, length - offset)
            guard wanted > 0 else {
                status = .atEnd
                return 0
            }
            var count: Int
            switch source {
            case let .data(data):
                count = data.withUnsafeBytes { bytes in
                    bytes.copyBytes(to: UnsafeMutableRawBufferPointer(start: buffer, count: wanted), from: offset..<(offset + wanted))
                }
            case .file:
                repeat { count = pread(fd, buffer, wanted, off_t(offset)) } while count < 0 && errno == EINTR
                if count < 0 {
                    fail(errno)
                    return -1
                }
                if count == 0 {
                    // The file is shorter than when the request was made.
                    fail(EIO)
                    return -1
                }
            }
            offset += count
            if offset >= length { status = .atEnd }
            return count
        }
    }

    override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length: UnsafeMutablePointer<Int>) -> Bool {
        false
    }

    /// Called with `lock` held.
    private func fail(_ code: Int32) {
        failure = POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        status = .error
    }
}
#endif
