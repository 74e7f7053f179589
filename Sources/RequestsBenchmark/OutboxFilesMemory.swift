#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// `requests-bench outbox-files-memory [--mib 1024] [--form body|multipart]` (issue 48): one entry with a file of
// --mib MiB, sent as the body (or as a multipart part) to the loopback server's `/sink` (which counts and checksums
// the body without keeping it). Measures the peak resident memory above the process's before the outbox opened
// (goal: under 64 MiB), the enqueue (the copy and its sync) and the upload, and checks that the server got the
// file's bytes and that no file is left.

/// What the sink received.
private final class SinkRecord: @unchecked Sendable {
    private let lock = NSLock()
    private var digests: [BodyDigest] = []
    var received: [BodyDigest] { lock.withLock { digests } }
    func add(_ digest: BodyDigest) { lock.withLock { digests.append(digest) } }
}

func runOutboxFilesMemoryCommand(_ arguments: [String]) -> Never {
    var mebibytes = 1024
    var multipart = false
    var flags = FlagReader(arguments, mode: "outbox-files-memory")
    while let flag = flags.nextFlag() {
        switch flag {
        case "--mib": mebibytes = max(1, flags.number(flag))
        case "--form": multipart = flags.value(flag) == "multipart"
        default: fail("outbox-files-memory: unknown argument \(flag)", code: 2)
        }
    }
    guard let server = try? LoopbackServer() else { fail("outbox-files-memory: could not start the loopback server", code: 2) }
    let record = SinkRecord()
    server.route("/sink/outbox-files-memory") { request in
        record.add(request.sinkDigest ?? BodyDigest(request.body))
        return LoopbackResponse(status: 201)
    }
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("requests-outbox-files-memory-\(getpid())")
    defer { try? FileManager.default.removeItem(at: folder) }
    let source = folder.appendingPathComponent("recording.bin")
    let size = Int64(mebibytes) << 20
    log("outbox-files-memory: writing a file of \(mebibytes) MiB…")
    let written: BodyDigest
    do {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        written = try writePatternFile(source, size: Int(size))
    } catch {
        fail("outbox-files-memory: cannot write \(source.path): \(error)", code: 2)
    }
    let baseline = ResourceUsage.residentBytes() ?? 0
    let peakBefore = ResourceUsage.peakResidentBytes() ?? 0
    let outbox = openMemoryOutbox(folder.appendingPathComponent("outbox"), size: size)
    let attachment = OutboxAttachment(file: source, name: "recording")
    let began = ResourceUsage.now()
    do {
        try outbox.enqueue(
            OutboxPost(url: server.url("/sink/outbox-files-memory").absoluteString), files: multipart ? .multipart([attachment]) : .body(attachment))
    } catch {
        fail("outbox-files-memory: enqueue failed: \(error)", code: 1)
    }
    let stored = ResourceUsage.now()
    try? FileManager.default.removeItem(at: source)
    while outbox.pendingCount > 0, outbox.deadLetters.isEmpty { usleep(10_000) }
    let sent = ResourceUsage.now()
    outbox.close()
    let peak = ResourceUsage.peakResidentBytes() ?? 0
    server.stop()
    let filesLeft = (try? FileManager.default.contentsOfDirectory(atPath: folder.appendingPathComponent("outbox/files").path)) ?? []
    let received = record.received
    let growth = peak - baseline
    let whole = received.count == 1 && (multipart ? received[0].count > Int(size) : received[0] == written)
    func mib(_ bytes: Int) -> String { fixed(Double(bytes) / 1_048_576, 1) + " MiB" }
    var section = Section(
        name: "Outbox file memory", title: "Issue 48. Outbox, one entry with a file of \(mebibytes) MiB sent \(multipart ? "as a multipart part" : "as the body")",
        rows: [])
    section.rows.append(
        Row(
            measure: "Peak resident growth while enqueueing and sending", library: mib(growth),
            baseline: "baseline \(mib(baseline)), peak before \(mib(peakBefore)), peak \(mib(peak))", comparison: ResourceUsage.peakSource,
            goal: "< 64 MiB", verdict: growth < 64 << 20 ? .pass : .miss))
    section.rows.append(
        Row(
            measure: "The server got the file's bytes, once", library: whole ? "yes" : "no",
            baseline: received.map { "\($0.count) bytes, CRC-32 \(String($0.crc32, radix: 16))" }.joined(separator: "; "),
            comparison: "file: \(written.count) bytes, CRC-32 \(String(written.crc32, radix: 16))", goal: "yes", verdict: whole ? .pass : .violated))
    section.rows.append(
        Row(
            measure: "enqueue (copy into the outbox, sync)", library: fixed(stored - began, 2) + " s",
            baseline: fixed(Double(size) / 1_048_576 / max(stored - began, 1e-9), 0) + " MiB/s", comparison: "", goal: "", verdict: .info))
    section.rows.append(
        Row(
            measure: "Upload to the loopback server", library: fixed(sent - stored, 2) + " s",
            baseline: fixed(Double(size) / 1_048_576 / max(sent - stored, 1e-9), 0) + " MiB/s", comparison: "", goal: "", verdict: .info))
    section.rows.append(
        Row(
            measure: "Files left in the outbox's folder", library: String(filesLeft.count), baseline: "", comparison: "", goal: "0",
            verdict: filesLeft.isEmpty ? .pass : .violated))
    try? FileManager.default.removeItem(at: folder)
    finishBenchCommand(section, success: "The file was sent whole, within the memory goal.")
}

/// An outbox for one large file: its limits above `size`, and an attempt timeout long enough for its upload.
private func openMemoryOutbox(_ directory: URL, size: Int64) -> Outbox {
    var options = OutboxOptions()
    options.maximumAttachmentSize = size
    options.maximumAttachmentsSize = size
    options.attemptTimeout = 3600
    do {
        return try Outbox(
            directory: directory, queue: OperationQueue(), session: makeOutboxSession(connections: 1), requestTypes: [OutboxPost.self],
            options: options)
    } catch {
        fail("outbox-files-memory: cannot open the outbox: \(error)", code: 1)
    }
}

/// Writes `size` bytes of a pattern to `url`, 1 MiB at a time; returns their count and CRC-32.
private func writePatternFile(_ url: URL, size: Int) throws -> BodyDigest {
    guard FileManager.default.createFile(atPath: url.path, contents: nil) else { throw CocoaError(.fileWriteUnknown) }
    let handle = try FileHandle(forWritingTo: url)
    defer { try? handle.close() }
    var random = SplitMix64(seed: 48)
    var digest = BodyDigest()
    var left = size
    while left > 0 {
        let count = min(left, 1 << 20)
        var words = [UInt64](repeating: 0, count: (count + 7) / 8)
        for index in words.indices { words[index] = random.next() }
        let chunk = words.withUnsafeBytes { Data($0.prefix(count)) }
        chunk.withUnsafeBytes { digest.add($0) }
        try handle.write(contentsOf: chunk)
        left -= count
    }
    return digest
}
#endif
