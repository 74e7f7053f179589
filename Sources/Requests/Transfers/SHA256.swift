import Foundation

/// SHA-256 (FIPS 180-4), for checking that a download arrived intact.
///
/// Written here because CryptoKit is missing on Linux and the package takes no dependencies. Feed it bytes with
/// ``update(_:)`` as they come, then read the 32-byte digest with ``finalize()``; or use
/// ``hexDigest(_:)`` and ``hexDigest(ofFileAt:)`` for the common one-shot cases.
///
/// A value type with no heap storage: copying one forks the computation, so the digest of a common prefix can be
/// taken without disturbing the original.
package struct SHA256 {
    /// The eight chaining words, kept apart so `compress` can hold them in registers.
    private var h0: UInt32 = 0x6a09e667
    private var h1: UInt32 = 0xbb67ae85
    private var h2: UInt32 = 0x3c6ef372
    private var h3: UInt32 = 0xa54ff53a
    private var h4: UInt32 = 0x510e527f
    private var h5: UInt32 = 0x9b05688c
    private var h6: UInt32 = 0x1f83d9ab
    private var h7: UInt32 = 0x5be0cd19

    /// Bytes of an incomplete block carried between `update` calls; a tuple rather than an Array so the hasher
    /// never allocates and stays trivially copyable.
    private var pending: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    /// How many bytes of `pending` are in use, always below 64.
    private var pendingCount = 0
    /// Message length so far in bytes; the padding needs it in bits, modulo 2^64 as the standard says.
    private var byteCount: UInt64 = 0

    /// A hasher that has seen no bytes yet.
    package init() {}

    /// Adds `bytes` to the message.
    ///
    /// Whole 64-byte blocks are compressed straight from `bytes`; only a leading and trailing fragment goes
    /// through the small internal buffer.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let start = bytes.baseAddress, !bytes.isEmpty else { return }
        byteCount &+= UInt64(bytes.count)
        var offset = 0

        if pendingCount > 0 {
            let taken = min(64 - pendingCount, bytes.count)
            let filled = pendingCount
            withUnsafeMutableBytes(of: &pending) { buffer in
                UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<filled + taken])
                    .copyMemory(from: UnsafeRawBufferPointer(start: start, count: taken))
            }
            pendingCount += taken
            offset = taken
            guard pendingCount == 64 else { return }
            // A copy, because `compress` mutates the chaining words of `self` while reading the block.
            let block = pending
            withUnsafeBytes(of: block) { buffer in
                if let base = buffer.baseAddress {
                    compress(base, blockCount: 1)
                }
            }
            pendingCount = 0
        }

        let wholeBlocks = (bytes.count - offset) / 64
        if wholeBlocks > 0 {
            compress(start + offset, blockCount: wholeBlocks)
            offset += wholeBlocks * 64
        }

        let rest = bytes.count - offset
        if rest > 0 {
            withUnsafeMutableBytes(of: &pending) { buffer in
                UnsafeMutableRawBufferPointer(rebasing: buffer[0..<rest])
                    .copyMemory(from: UnsafeRawBufferPointer(start: start + offset, count: rest))
            }
            pendingCount = rest
        }
    }

    /// Adds the bytes of `data` to the message.
    package mutating func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// The 32-byte digest of everything added so far.
    ///
    /// Pads a copy, so the hasher itself is left as it was and can take more bytes afterwards.
    package func finalize() -> [UInt8] {
        var copy = self
        let bitLength = byteCount &* 8
        // One 0x80 byte, zeros up to 56 mod 64, then the length: 9 to 72 bytes in all.
        let zeroCount = (pendingCount < 56 ? 55 : 119) - pendingCount
        var padding = [UInt8](repeating: 0, count: 1 + zeroCount + 8)
        padding[0] = 0x80
        for index in 0..<8 {
            padding[1 + zeroCount + index] = UInt8(truncatingIfNeeded: bitLength >> (56 - 8 * UInt64(index)))
        }
        padding.withUnsafeBytes { copy.update($0) }

        var digest = [UInt8]()
        digest.reserveCapacity(32)
        for word in [copy.h0, copy.h1, copy.h2, copy.h3, copy.h4, copy.h5, copy.h6, copy.h7] {
            withUnsafeBytes(of: word.bigEndian) { digest.append(contentsOf: $0) }
        }
        return digest
    }

    /// The SHA-256 of `data`, as 64 lowercase hexadecimal digits.
    static func hexDigest(_ data: Data) -> String {
        var hasher = SHA256()
        hasher.update(data)
        return hex(hasher.finalize())
    }

    /// The SHA-256 of `data`.
    static func digest(_ data: Data) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data)
        return hasher.finalize()
    }

    /// The SHA-256 of the file at `url`, as 64 lowercase hexadecimal digits.
    ///
    /// Reads 1 MiB at a time, so memory stays flat however large the file is. Throws Foundation's error when the
    /// file can't be opened or read.
    static func hexDigest(ofFileAt url: URL) throws -> String {
        let handle = try FileHandle(forReadingFrom: url)
        // A failure to close a handle that was only read from can't affect the digest, so it isn't reported.
        defer { try? handle.close() }
        var hasher = SHA256()
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(chunk)
        }
        return hex(hasher.finalize())
    }

    /// `bytes` as lowercase hexadecimal, two digits a byte.
    package static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Runs the compression function over `blockCount` consecutive 64-byte blocks at `blocks`.
    ///
    /// Fully unrolled with sixteen rolling schedule words and literal round constants: no arrays, no bounds
    /// checks and no table loads in the hot loop, which is what makes gigabyte downloads quick to verify. What is
    /// left is bound by the integer units. A SIMD message schedule was tried and was no faster: Swift's SIMD
    /// shifts are per-lane loops that the optimizer re-vectorizes unreliably, often back into scalar code.
    private mutating func compress(_ blocks: UnsafeRawPointer, blockCount: Int) {
        var h0 = self.h0, h1 = self.h1, h2 = self.h2, h3 = self.h3
        var h4 = self.h4, h5 = self.h5, h6 = self.h6, h7 = self.h7
        var block = blocks
        for _ in 0..<blockCount {
            // Words are big-endian and the block may sit at any address.
            var w0 = block.loadUnaligned(fromByteOffset: 0, as: UInt32.self).bigEndian
            var w1 = block.loadUnaligned(fromByteOffset: 4, as: UInt32.self).bigEndian
            var w2 = block.loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian
            var w3 = block.loadUnaligned(fromByteOffset: 12, as: UInt32.self).bigEndian
            var w4 = block.loadUnaligned(fromByteOffset: 16, as: UInt32.self).bigEndian
            var w5 = block.loadUnaligned(fromByteOffset: 20, as: UInt32.self).bigEndian
            var w6 = block.loadUnaligned(fromByteOffset: 24, as: UInt32.self).bigEndian
            var w7 = block.loadUnaligned(fromByteOffset: 28, as: UInt32.self).bigEndian
            var w8 = block.loadUnaligned(fromByteOffset: 32, as: UInt32.self).bigEndian
            var w9 = block.loadUnaligned(fromByteOffset: 36, as: UInt32.self).bigEndian
            var w10 = block.loadUnaligned(fromByteOffset: 40, as: UInt32.self).bigEndian
            var w11 = block.loadUnaligned(fromByteOffset: 44, as: UInt32.self).bigEndian
            var w12 = block.loadUnaligned(fromByteOffset: 48, as: UInt32.self).bigEndian
            var w13 = block.loadUnaligned(fromByteOffset: 52, as: UInt32.self).bigEndian
            var w14 = block.loadUnaligned(fromByteOffset: 56, as: UInt32.self).bigEndian
            var w15 = block.loadUnaligned(fromByteOffset: 60, as: UInt32.self).bigEndian

            var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7
            var bc = b ^ c

            // Instead of shuffling a...h after each round, the rounds rotate which variable plays which role;
            // from round 16 on, w(t mod 16) is overwritten with W[t] once W[t - 16] is no longer needed.
            sha256Round(a, b, c, &d, e, f, g, &h, 0x428a2f98 &+ w0, &bc)
            sha256Round(h, a, b, &c, d, e, f, &g, 0x71374491 &+ w1, &bc)
            sha256Round(g, h, a, &b, c, d, e, &f, 0xb5c0fbcf &+ w2, &bc)
            sha256Round(f, g, h, &a, b, c, d, &e, 0xe9b5dba5 &+ w3, &bc)
            sha256Round(e, f, g, &h, a, b, c, &d, 0x3956c25b &+ w4, &bc)
            sha256Round(d, e, f, &g, h, a, b, &c, 0x59f111f1 &+ w5, &bc)
            sha256Round(c, d, e, &f, g, h, a, &b, 0x923f82a4 &+ w6, &bc)
            sha256Round(b, c, d, &e, f, g, h, &a, 0xab1c5ed5 &+ w7, &bc)
            sha256Round(a, b, c, &d, e, f, g, &h, 0xd807aa98 &+ w8, &bc)
            sha256Round(h, a, b, &c, d, e, f, &g, 0x12835b01 &+ w9, &bc)
            sha256Round(g, h, a, &b, c, d, e, &f, 0x243185be &+ w10, &bc)
            sha256Round(f, g, h, &a, b, c, d, &e, 0x550c7dc3 &+ w11, &bc)
            sha256Round(e, f, g, &h, a, b, c, &d, 0x72be5d74 &+ w12, &bc)
            sha256Round(d, e, f, &g, h, a, b, &c, 0x80deb1fe &+ w13, &bc)
            sha256Round(c, d, e, &f, g, h, a, &b, 0x9bdc06a7 &+ w14, &bc)
            sha256Round(b, c, d, &e, f, g, h, &a, 0xc19bf174 &+ w15, &bc)

            w0 &+= smallSigma1(w14) &+ w9 &+ smallSigma0(w1)
            sha256Round(a, b, c, &d, e, f, g, &h, 0xe49b69c1 &+ w0, &bc)
            w1 &+= smallSigma1(w15) &+ w10 &+ smallSigma0(w2)
            sha256Round(h, a, b, &c, d, e, f, &g, 0xefbe4786 &+ w1, &bc)
            w2 &+= smallSigma1(w0) &+ w11 &+ smallSigma0(w3)
            sha256Round(g, h, a, &b, c, d, e, &f, 0x0fc19dc6 &+ w2, &bc)
            w3 &+= smallSigma1(w1) &+ w12 &+ smallSigma0(w4)
            sha256Round(f, g, h, &a, b, c, d, &e, 0x240ca1cc &+ w3, &bc)
            w4 &+= smallSigma1(w2) &+ w13 &+ smallSigma0(w5)
            sha256Round(e, f, g, &h, a, b, c, &d, 0x2de92c6f &+ w4, &bc)
            w5 &+= smallSigma1(w3) &+ w14 &+ smallSigma0(w6)
            sha256Round(d, e, f, &g, h, a, b, &c, 0x4a7484aa &+ w5, &bc)
            w6 &+= smallSigma1(w4) &+ w15 &+ smallSigma0(w7)
            sha256Round(c, d, e, &f, g, h, a, &b, 0x5cb0a9dc &+ w6, &bc)
            w7 &+= smallSigma1(w5) &+ w0 &+ smallSigma0(w8)
            sha256Round(b, c, d, &e, f, g, h, &a, 0x76f988da &+ w7, &bc)
            w8 &+= smallSigma1(w6) &+ w1 &+ smallSigma0(w9)
            sha256Round(a, b, c, &d, e, f, g, &h, 0x983e5152 &+ w8, &bc)
            w9 &+= smallSigma1(w7) &+ w2 &+ smallSigma0(w10)
            sha256Round(h, a, b, &c, d, e, f, &g, 0xa831c66d &+ w9, &bc)
            w10 &+= smallSigma1(w8) &+ w3 &+ smallSigma0(w11)
            sha256Round(g, h, a, &b, c, d, e, &f, 0xb00327c8 &+ w10, &bc)
            w11 &+= smallSigma1(w9) &+ w4 &+ smallSigma0(w12)
            sha256Round(f, g, h, &a, b, c, d, &e, 0xbf597fc7 &+ w11, &bc)
            w12 &+= smallSigma1(w10) &+ w5 &+ smallSigma0(w13)
            sha256Round(e, f, g, &h, a, b, c, &d, 0xc6e00bf3 &+ w12, &bc)
            w13 &+= smallSigma1(w11) &+ w6 &+ smallSigma0(w14)
            sha256Round(d, e, f, &g, h, a, b, &c, 0xd5a79147 &+ w13, &bc)
            w14 &+= smallSigma1(w12) &+ w7 &+ smallSigma0(w15)
            sha256Round(c, d, e, &f, g, h, a, &b, 0x06ca6351 &+ w14, &bc)
            w15 &+= smallSigma1(w13) &+ w8 &+ smallSigma0(w0)
            sha256Round(b, c, d, &e, f, g, h, &a, 0x14292967 &+ w15, &bc)

            w0 &+= smallSigma1(w14) &+ w9 &+ smallSigma0(w1)
            sha256Round(a, b, c, &d, e, f, g, &h, 0x27b70a85 &+ w0, &bc)
            w1 &+= smallSigma1(w15) &+ w10 &+ smallSigma0(w2)
            sha256Round(h, a, b, &c, d, e, f, &g, 0x2e1b2138 &+ w1, &bc)
            w2 &+= smallSigma1(w0) &+ w11 &+ smallSigma0(w3)
            sha256Round(g, h, a, &b, c, d, e, &f, 0x4d2c6dfc &+ w2, &bc)
            w3 &+= smallSigma1(w1) &+ w12 &+ smallSigma0(w4)
            sha256Round(f, g, h, &a, b, c, d, &e, 0x53380d13 &+ w3, &bc)
            w4 &+= smallSigma1(w2) &+ w13 &+ smallSigma0(w5)
            sha256Round(e, f, g, &h, a, b, c, &d, 0x650a7354 &+ w4, &bc)
            w5 &+= smallSigma1(w3) &+ w14 &+ smallSigma0(w6)
            sha256Round(d, e, f, &g, h, a, b, &c, 0x766a0abb &+ w5, &bc)
            w6 &+= smallSigma1(w4) &+ w15 &+ smallSigma0(w7)
            sha256Round(c, d, e, &f, g, h, a, &b, 0x81c2c92e &+ w6, &bc)
            w7 &+= smallSigma1(w5) &+ w0 &+ smallSigma0(w8)
            sha256Round(b, c, d, &e, f, g, h, &a, 0x92722c85 &+ w7, &bc)
            w8 &+= smallSigma1(w6) &+ w1 &+ smallSigma0(w9)
            sha256Round(a, b, c, &d, e, f, g, &h, 0xa2bfe8a1 &+ w8, &bc)
            w9 &+= smallSigma1(w7) &+ w2 &+ smallSigma0(w10)
            sha256Round(h, a, b, &c, d, e, f, &g, 0xa81a664b &+ w9, &bc)
            w10 &+= smallSigma1(w8) &+ w3 &+ smallSigma0(w11)
            sha256Round(g, h, a, &b, c, d, e, &f, 0xc24b8b70 &+ w10, &bc)
            w11 &+= smallSigma1(w9) &+ w4 &+ smallSigma0(w12)
            sha256Round(f, g, h, &a, b, c, d, &e, 0xc76c51a3 &+ w11, &bc)
            w12 &+= smallSigma1(w10) &+ w5 &+ smallSigma0(w13)
            sha256Round(e, f, g, &h, a, b, c, &d, 0xd192e819 &+ w12, &bc)
            w13 &+= smallSigma1(w11) &+ w6 &+ smallSigma0(w14)
            sha256Round(d, e, f, &g, h, a, b, &c, 0xd6990624 &+ w13, &bc)
            w14 &+= smallSigma1(w12) &+ w7 &+ smallSigma0(w15)
            sha256Round(c, d, e, &f, g, h, a, &b, 0xf40e3585 &+ w14, &bc)
            w15 &+= smallSigma1(w13) &+ w8 &+ smallSigma0(w0)
            sha256Round(b, c, d, &e, f, g, h, &a, 0x106aa070 &+ w15, &bc)

            w0 &+= smallSigma1(w14) &+ w9 &+ smallSigma0(w1)
            sha256Round(a, b, c, &d, e, f, g, &h, 0x19a4c116 &+ w0, &bc)
            w1 &+= smallSigma1(w15) &+ w10 &+ smallSigma0(w2)
            sha256Round(h, a, b, &c, d, e, f, &g, 0x1e376c08 &+ w1, &bc)
            w2 &+= smallSigma1(w0) &+ w11 &+ smallSigma0(w3)
            sha256Round(g, h, a, &b, c, d, e, &f, 0x2748774c &+ w2, &bc)
            w3 &+= smallSigma1(w1) &+ w12 &+ smallSigma0(w4)
            sha256Round(f, g, h, &a, b, c, d, &e, 0x34b0bcb5 &+ w3, &bc)
            w4 &+= smallSigma1(w2) &+ w13 &+ smallSigma0(w5)
            sha256Round(e, f, g, &h, a, b, c, &d, 0x391c0cb3 &+ w4, &bc)
            w5 &+= smallSigma1(w3) &+ w14 &+ smallSigma0(w6)
            sha256Round(d, e, f, &g, h, a, b, &c, 0x4ed8aa4a &+ w5, &bc)
            w6 &+= smallSigma1(w4) &+ w15 &+ smallSigma0(w7)
            sha256Round(c, d, e, &f, g, h, a, &b, 0x5b9cca4f &+ w6, &bc)
            w7 &+= smallSigma1(w5) &+ w0 &+ smallSigma0(w8)
            sha256Round(b, c, d, &e, f, g, h, &a, 0x682e6ff3 &+ w7, &bc)
            w8 &+= smallSigma1(w6) &+ w1 &+ smallSigma0(w9)
            sha256Round(a, b, c, &d, e, f, g, &h, 0x748f82ee &+ w8, &bc)
            w9 &+= smallSigma1(w7) &+ w2 &+ smallSigma0(w10)
            sha256Round(h, a, b, &c, d, e, f, &g, 0x78a5636f &+ w9, &bc)
            w10 &+= smallSigma1(w8) &+ w3 &+ smallSigma0(w11)
            sha256Round(g, h, a, &b, c, d, e, &f, 0x84c87814 &+ w10, &bc)
            w11 &+= smallSigma1(w9) &+ w4 &+ smallSigma0(w12)
            sha256Round(f, g, h, &a, b, c, d, &e, 0x8cc70208 &+ w11, &bc)
            w12 &+= smallSigma1(w10) &+ w5 &+ smallSigma0(w13)
            sha256Round(e, f, g, &h, a, b, c, &d, 0x90befffa &+ w12, &bc)
            w13 &+= smallSigma1(w11) &+ w6 &+ smallSigma0(w14)
            sha256Round(d, e, f, &g, h, a, b, &c, 0xa4506ceb &+ w13, &bc)
            w14 &+= smallSigma1(w12) &+ w7 &+ smallSigma0(w15)
            sha256Round(c, d, e, &f, g, h, a, &b, 0xbef9a3f7 &+ w14, &bc)
            w15 &+= smallSigma1(w13) &+ w8 &+ smallSigma0(w0)
            sha256Round(b, c, d, &e, f, g, h, &a, 0xc67178f2 &+ w15, &bc)

            h0 &+= a; h1 &+= b; h2 &+= c; h3 &+= d
            h4 &+= e; h5 &+= f; h6 &+= g; h7 &+= h
            block += 64
        }
        self.h0 = h0; self.h1 = h1; self.h2 = h2; self.h3 = h3
        self.h4 = h4; self.h5 = h5; self.h6 = h6; self.h7 = h7
    }
}

/// One round: `d` becomes the next `e` and `h` the next `a`; the caller rotates the roles of the others.
///
/// `kw` is the round constant plus the schedule word. `bc` carries `b ^ c` from round to round: this round's
/// `a ^ b` is the next round's `b ^ c`, which saves an operation in the majority function. The sums are ordered
/// so that `bigSigma1(e)`, the slowest term, is added last, keeping the round-to-round dependency chain short.
@inline(__always)
private func sha256Round(
    _ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: inout UInt32,
    _ e: UInt32, _ f: UInt32, _ g: UInt32, _ h: inout UInt32, _ kw: UInt32, _ bc: inout UInt32
) {
    let choice = g ^ (e & (f ^ g))
    let ab = a ^ b
    let majority = b ^ (ab & bc)
    bc = ab
    let t1 = h &+ kw &+ choice &+ bigSigma1(e)
    d &+= t1
    h = t1 &+ (bigSigma0(a) &+ majority)
}

@inline(__always)
private func rotateRight(_ x: UInt32, _ n: UInt32) -> UInt32 {
    (x &>> n) | (x &<< (32 - n))
}

@inline(__always)
private func bigSigma0(_ x: UInt32) -> UInt32 {
    rotateRight(x, 2) ^ rotateRight(x, 13) ^ rotateRight(x, 22)
}

@inline(__always)
private func bigSigma1(_ x: UInt32) -> UInt32 {
    rotateRight(x, 6) ^ rotateRight(x, 11) ^ rotateRight(x, 25)
}

@inline(__always)
private func smallSigma0(_ x: UInt32) -> UInt32 {
    rotateRight(x, 7) ^ rotateRight(x, 18) ^ (x &>> 3)
}

@inline(__always)
private func smallSigma1(_ x: UInt32) -> UInt32 {
    rotateRight(x, 17) ^ rotateRight(x, 19) ^ (x &>> 10)
}

/// HMAC-SHA-256 (RFC 2104) under one key: a digest of a secret that cannot be recomputed, or guessed at, without the
/// key. The key's two padded blocks are hashed once, here, so each digest hashes only its message.
struct KeyedDigest: Sendable {
    private let inner: SHA256
    private let outer: SHA256

    init(key: [UInt8]) {
        var block = key.count > 64 ? SHA256.digest(Data(key)) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        var inner = SHA256()
        inner.update(Data(block.map { $0 ^ 0x36 }))
        var outer = SHA256()
        outer.update(Data(block.map { $0 ^ 0x5c }))
        (self.inner, self.outer) = (inner, outer)
    }

    /// The digest of `message`, as 64 lowercase hexadecimal digits.
    func hex(_ message: String) -> String {
        var inner = self.inner
        var message = message
        message.withUTF8 { inner.update(UnsafeRawBufferPointer($0)) }
        var outer = self.outer
        outer.update(Data(inner.finalize()))
        return SHA256.hex(outer.finalize())
    }
}
