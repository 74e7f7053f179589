import Foundation
import Requests

/// An outbox entry's form in the journal: a version byte, then length-prefixed fields (docs/outbox-journal.md).
/// Hand-written, because an entry is encoded on every enqueue and decoded for every pending entry on open. Version 2
/// adds the frozen request (``FrozenRequest``) after the request's JSON; version 1 records are still read (their
/// entries make their request on each attempt, as that version did).
enum OutboxRecord {
    static let version: UInt8 = 2
    /// Version 3 adds, at the end, the coalescing key and the attachments; written only for entries that have
    /// either, so that other entries stay readable by the versions that read 2.
    static let extendedVersion: UInt8 = 3
    /// The largest response body kept with a parked entry.
    static let maximumParkedBody = 64 << 10

    /// The request's stored form: JSON with sorted keys, the same bytes for the same value. One encoder for every
    /// enqueue (`JSONEncoder` may encode on several threads at once), since making one costs as much as a small
    /// encoding.
    static var jsonEncoder: JSONEncoder { sharedEncoder.encoder }
    private static let sharedEncoder = SharedEncoder()

    /// Holds the encoder as a `Sendable` constant on every platform (Apple SDKs before macOS 14 do not mark
    /// `JSONEncoder` `Sendable`); its options are set once, before it is shared.
    private final class SharedEncoder: @unchecked Sendable {
        let encoder: JSONEncoder
        init() {
            encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
        }
    }

    /// A random (version 4) UUID in lower case, the form the `Idempotency-Key` is sent in. Formatted here because
    /// `UUID().uuidString.lowercased()` costs as much as the rest of an enqueue's bookkeeping, and its 122 random
    /// bits come from the system generator (`getrandom` on Linux, `arc4random` on Apple platforms), because
    /// `UUID()` on Linux opens and reads `/dev/urandom` each time.
    static func newKey() -> String {
        var generator = SystemRandomNumberGenerator()
        var bits = (generator.next(), generator.next())
        return withUnsafeMutableBytes(of: &bits) { bytes in
            bytes[6] = bytes[6] & 0x0F | 0x40
            bytes[8] = bytes[8] & 0x3F | 0x80
            return String(unsafeUninitializedCapacity: 36) { buffer in
                var position = 0
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        buffer[position] = UInt8(ascii: "-")
                        position += 1
                    }
                    let byte = bytes[index]
                    buffer[position] = hexDigit(byte >> 4)
                    buffer[position + 1] = hexDigit(byte & 0x0F)
                    position += 2
                }
                return position
            }
        }
    }

    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }

    static func encode(_ entry: OutboxEntry) -> Data {
        var writer = RecordWriter()
        writer.bytes.reserveCapacity(entry.encodedRequest.count + entry.idempotencyKey.utf8.count + entry.requestType.utf8.count + (entry.lane?.utf8.count ?? 0) + 64)
        let extended = entry.files != nil || entry.coalescingKey != nil
        writer.byte(extended ? extendedVersion : version)
        writer.string(entry.idempotencyKey)
        writer.optionalString(entry.lane)
        writer.string(entry.requestType)
        writer.double(entry.enqueuedAt.timeIntervalSince1970)
        writer.optionalDouble(entry.expiresAt?.timeIntervalSince1970)
        writer.bytes(entry.encodedRequest)
        if let frozen = entry.frozen {
            writer.byte(1)
            writer.string(frozen.method)
            writer.string(frozen.url)
            writer.double(frozen.timeout)
            writer.double(Double(frozen.fields.count))
            for field in frozen.fields {
                writer.string(field.name)
                writer.string(field.value)
            }
            writer.bytes(frozen.body)
        } else {
            writer.byte(0)
        }
        if let letter = entry.deadLetter {
            writer.byte(1)
            writer.double(letter.parkedAt.timeIntervalSince1970)
            switch letter.reason {
            case let .rejected(statusCode):
                writer.byte(0)
                writer.double(Double(statusCode))
            case let .failed(description):
                writer.byte(1)
                writer.string(description)
            case let .cannotDecode(requestType):
                writer.byte(2)
                writer.string(requestType)
            }
            if let response = letter.response {
                writer.byte(1)
                writer.double(Double(response.statusCode))
                writer.double(Double(response.headers.count))
                for (name, value) in response.headers.sorted(by: { $0.key < $1.key }) {
                    writer.string(name)
                    writer.string(value)
                }
                writer.bytes(response.body.prefix(maximumParkedBody))
            } else {
                writer.byte(0)
            }
        } else {
            writer.byte(0)
        }
        if extended { writer.extensions(entry) }
        return Data(writer.bytes)
    }

    /// The entry stored as `data` under `id`, or `nil` for bytes this version does not read.
    static func decode(_ data: Data, id: UInt64) -> OutboxEntry? {
        var reader = RecordReader(data)
        guard let recordVersion = reader.byte(), (1...extendedVersion).contains(recordVersion),
            let key = reader.string(),
            let lane = reader.optionalString(),
            let type = reader.string(),
            let enqueuedAt = reader.double(),
            let expiresAt = reader.optionalDouble(),
            let request = reader.bytes()
        else { return nil }
        var frozen: FrozenRequest?
        if recordVersion >= 2 {
            guard let hasFrozen = reader.byte() else { return nil }
            if hasFrozen == 1 {
                guard let method = reader.string(), let url = reader.string(), let timeout = reader.double(),
                    let count = reader.int(), count >= 0, count <= 10_000
                else { return nil }
                var fields: [FrozenRequest.Field] = []
                for _ in 0..<count {
                    guard let name = reader.string(), let value = reader.string() else { return nil }
                    fields.append(FrozenRequest.Field(name: name, value: value))
                }
                guard let body = reader.bytes() else { return nil }
                frozen = FrozenRequest(method: method, url: url, fields: fields, body: body, timeout: timeout)
            } else if hasFrozen != 0 {
                return nil
            }
        }
        guard let parked = reader.byte() else { return nil }
        var letter: OutboxDeadLetter?
        if parked == 1 {
            guard let parkedAt = reader.double(), let reasonKind = reader.byte() else { return nil }
            let reason: OutboxDeadLetter.Reason
            switch reasonKind {
            case 0:
                guard let status = reader.int() else { return nil }
                reason = .rejected(statusCode: status)
            case 1:
                guard let text = reader.string() else { return nil }
                reason = .failed(text)
            case 2:
                guard let name = reader.string() else { return nil }
                reason = .cannotDecode(requestType: name)
            default: return nil
            }
            var response: OutboxResponse?
            guard let hasResponse = reader.byte() else { return nil }
            if hasResponse == 1 {
                guard let status = reader.int(), let count = reader.int(), count >= 0, count <= 10_000 else { return nil }
                var headers: [String: String] = [:]
                for _ in 0..<count {
                    guard let name = reader.string(), let value = reader.string() else { return nil }
                    headers[name] = value
                }
                guard let body = reader.bytes() else { return nil }
                response = OutboxResponse(statusCode: status, headers: headers, body: body)
            }
            letter = OutboxDeadLetter(reason: reason, response: response, parkedAt: Date(timeIntervalSince1970: parkedAt))
        }
        var entry = OutboxEntry(
            id: id, idempotencyKey: key, lane: lane, requestType: type, enqueuedAt: Date(timeIntervalSince1970: enqueuedAt),
            expiresAt: expiresAt.map(Date.init(timeIntervalSince1970:)), attempts: 0, deadLetter: letter,
            encodedRequest: request, frozen: frozen)
        if recordVersion == extendedVersion {
            guard let coalescingKey = reader.optionalString(), let files = reader.files() else { return nil }
            entry.coalescingKey = coalescingKey
            entry.files = files
        }
        guard reader.isAtEnd else { return nil }
        return entry
    }
}

/// Appends fields: bytes and strings as a 4-byte little-endian length and the bytes; doubles as 8 bytes. Into an
/// array, made `Data` once: appending small pieces to `Data` costs several times more.
struct RecordWriter {
    var bytes: [UInt8] = []

    mutating func byte(_ value: UInt8) { bytes.append(value) }

    mutating func double(_ value: Double) {
        withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func bytes(_ value: Data) {
        withUnsafeBytes(of: UInt32(clamping: value.count).littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: value)
    }

    mutating func string(_ value: String) {
        withUnsafeBytes(of: UInt32(clamping: value.utf8.count).littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: value.utf8)
    }

    mutating func optionalString(_ value: String?) {
        byte(value == nil ? 0 : 1)
        if let value { string(value) }
    }

    mutating func optionalDouble(_ value: Double?) {
        byte(value == nil ? 0 : 1)
        if let value { double(value) }
    }
}

/// Reads what ``RecordWriter`` wrote; every read returns `nil` past the end, so no input can crash it.
struct RecordReader {
    private let data: Data
    private var offset: Int

    init(_ data: Data) {
        self.data = data
        offset = data.startIndex
    }

    var isAtEnd: Bool { offset == data.endIndex }

    mutating func byte() -> UInt8? {
        guard offset < data.endIndex else { return nil }
        defer { offset += 1 }
        return data[offset]
    }

    mutating func double() -> Double? {
        guard data.endIndex - offset >= 8 else { return nil }
        var bits: UInt64 = 0
        for index in 0..<8 { bits |= UInt64(data[offset + index]) << (8 * UInt64(index)) }
        offset += 8
        return Double(bitPattern: bits)
    }

    /// A double that holds a whole number in `Int`'s range.
    mutating func int() -> Int? {
        guard let value = double(), value.isFinite, value == value.rounded(), abs(value) < 1e15 else { return nil }
        return Int(value)
    }

    mutating func bytes() -> Data? {
        guard data.endIndex - offset >= 4 else { return nil }
        var length = 0
        for index in 0..<4 { length |= Int(data[offset + index]) << (8 * index) }
        guard data.endIndex - offset - 4 >= length else { return nil }
        defer { offset += 4 + length }
        return data.subdata(in: (offset + 4)..<(offset + 4 + length))
    }

    mutating func string() -> String? {
        bytes().flatMap { String(data: $0, encoding: .utf8) }
    }

    mutating func optionalString() -> String?? {
        switch byte() {
        case 0: return .some(nil)
        case 1: return string().map { .some($0) }
        default: return nil
        }
    }

    mutating func optionalDouble() -> Double?? {
        switch byte() {
        case 0: return .some(nil)
        case 1: return double().map { .some($0) }
        default: return nil
        }
    }
}
