#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// An entry's files: copied into the folder at enqueue, checked on open and before an entry found on disk is first
/// sent, removed once the entry's removal is durable (so that a crash never leaves an entry without its files).
/// Files that no entry carries are removed on open.
extension Outbox {
    /// Copies `files` into the outbox's folder, durably (the copies and the folder synced), and fixes how they are
    /// sent in `frozen`; on any failure removes what it copied and throws ``OutboxError``.
    func store(_ files: OutboxFiles, frozen: inout FrozenRequest) throws -> OutboxStoredFiles {
        if files.form == .body, !frozen.body.isEmpty {
            throw OutboxError.unusableAttachment(files.attachments[0].file, "the request makes a body of its own, and the file is to be the body")
        }
        for attachment in files.attachments
        where attachment.mimeType?.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) == true {
            throw OutboxError.unusableAttachment(attachment.file, "its MIME type holds a line break or a NUL")
        }
        var stored = OutboxStoredFiles(
            form: files.form, requestPart: files.requestPart, boundary: MultipartFormData.randomBoundary(), files: [])
        do {
            for attachment in files.attachments {
                let copy = try fileStore.store(attachment.file, largest: options.maximumAttachmentSize, total: options.maximumAttachmentsSize)
                let fileName = attachment.fileName ?? attachment.file.lastPathComponent
                let type = attachment.mimeType ?? MultipartFormData.mimeType(forExtension: (fileName as NSString).pathExtension)
                stored.files.append(
                    OutboxStoredFile(
                        name: attachment.name, fileName: fileName, mimeType: type, size: copy.size, digest: copy.sha256, storedName: copy.name))
            }
            try fileStore.syncFolder()
        } catch {
            discard(stored)
            throw Self.attachmentError(error)
        }
        if files.form == .body, !frozen.fields.contains(where: { $0.name.lowercased() == "content-type" }), let type = stored.files.first?.mimeType {
            frozen.fields.append(FrozenRequest.Field(name: "Content-Type", value: type))
            frozen.fields.sort { $0.name < $1.name }
        }
        return stored
    }

    /// Removes the copies of an enqueue that failed.
    func discard(_ files: OutboxStoredFiles) {
        for file in files.files { fileStore.remove(file.storedName, size: file.size) }
    }

    /// Removes the files of entries whose removal from the journal is durable.
    func removeFiles(of ids: [UInt64]) {
        let leaving: [OutboxStoredFiles] = lock.withLock {
            guard !leavingFiles.isEmpty else { return [] }
            return ids.compactMap { leavingFiles.removeValue(forKey: $0) }
        }
        leaving.forEach(discard)
    }

    /// What is wrong with one of `files` (its type and size; if `reading`, its SHA-256 too, reading it whole), as a
    /// dead letter's reason; `nil` if nothing.
    func problem(with files: OutboxStoredFiles, reading: Bool) -> String? {
        for file in files.files {
            if let problem = fileStore.problem(with: file.storedName, size: file.size, sha256: reading ? file.digest : nil) {
                return Self.describe(file, problem)
            }
        }
        return nil
    }

    /// Opening: counts the files of `entries` against the limit, checks that each is there with its size (the
    /// SHA-256 is checked before the entry's first attempt), parks the pending entries whose files are not, and
    /// removes the files no entry carries.
    static func checkFiles(
        of entries: inout [OutboxEntry], in store: OutboxFileStore, journal: Journal
    ) -> (count: Int, damaged: [OutboxDamagedAttachment], removed: Int) {
        var count = 0
        var damaged: [OutboxDamagedAttachment] = []
        var kept = Set<String>()
        for index in entries.indices {
            guard let files = entries[index].files else { continue }
            count += files.files.count
            store.hold(files.totalSize)
            var reasons: [String] = []
            for file in files.files {
                kept.insert(file.storedName)
                guard let problem = store.problem(with: file.storedName, size: file.size) else { continue }
                damaged.append(OutboxDamagedAttachment(entryID: entries[index].id, fileName: file.fileName, problem: problem))
                reasons.append(describe(file, problem))
            }
            guard !reasons.isEmpty, entries[index].deadLetter == nil else { continue }
            entries[index].deadLetter = OutboxDeadLetter(reason: .failed(reasons.joined(separator: "; ")), response: nil, parkedAt: Date())
            // A failed write parks it in memory only: the next open finds the same damage and parks it again.
            try? journal.update(entries[index].id, payload: OutboxRecord.encode(entries[index]))
        }
        return (count, damaged, store.removeFiles(notIn: kept))
    }

    private static func describe(_ file: OutboxStoredFile, _ problem: String) -> String {
        "its attachment \(file.fileName) (\(OutboxFileStore.folderName)/\(file.storedName)) cannot be sent: \(problem)"
    }

    private static func attachmentError(_ error: Error) -> OutboxError {
        if let error = error as? OutboxError { return error }
        guard let failure = error as? OutboxFileStore.Failure else { return .writeFailed(OutboxVerdict.describe(error)) }
        switch failure {
        case let .tooLarge(size, limit): return .attachmentTooLarge(size: size, limit: limit)
        case let .full(size, _, limit): return .attachmentsFull(size: size, limit: limit)
        case let .unreadable(url, reason): return .unusableAttachment(url, reason)
        case let .writeFailed(reason): return .writeFailed(reason)
        }
    }
}
