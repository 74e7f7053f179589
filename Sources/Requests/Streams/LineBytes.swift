#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The byte work of the line-based decoders (``LineDecoder``, ``JSONLinesDecoder``, ``ServerSentEventDecoder``), on raw
/// pointers: a body is scanned once with `memchr`, and a line is made text by the standard library's own UTF-8
/// routines, so that decoding keeps up with a fast body even in a debug build.
enum LineBytes {
    /// The offset of the first `byte` in `buffer` at or after `start`, or `nil`.
    static func index(of byte: UInt8, in buffer: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = buffer.baseAddress, start < buffer.count,
            let found = memchr(base + start, Int32(byte), buffer.count - start)
        else { return nil }
        return base.distance(to: UnsafeRawPointer(found))
    }

    /// `bytes` as text; bad UTF-8 is replaced with U+FFFD unless `validating`, when it gives `nil`.
    static func text(_ bytes: UnsafeRawBufferPointer, validating: Bool) -> String? {
        var text = String(decoding: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
        guard validating else { return text }
        // Decoding replaces bad bytes: the text is valid exactly when its bytes are those given.
        let isSame = text.withUTF8 { decoded in
            decoded.count == bytes.count && (bytes.isEmpty || memcmp(decoded.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
        }
        return isSame ? text : nil
    }

    /// Whether `bytes` are UTF-8: ASCII is checked eight bytes at a time, the rest by ``text(_:validating:)``.
    static func isUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 {
                return text(bytes, validating: true) != nil
            }
            offset += 8
        }
        while offset < bytes.count {
            if bytes[offset] >= 0x80 { return text(bytes, validating: true) != nil }
            offset += 1
        }
        return true
    }

    /// Whether `bytes` hold nothing but JSON's whitespace (space, tab, CR, LF): a blank line.
    static func isBlank(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.allSatisfy { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D || $0 == 0x0A }
    }

    /// Whether `bytes` are `name`'s, an ASCII field name.
    static func equals(_ bytes: UnsafeRawBufferPointer, _ name: StaticString) -> Bool {
        bytes.count == name.utf8CodeUnitCount && (bytes.isEmpty || memcmp(bytes.baseAddress!, name.utf8Start, bytes.count) == 0)
    }
}
