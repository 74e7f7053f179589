#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// A file to send with an outbox entry: a photo, a recording, a log. The outbox copies it at enqueue, so the app may
/// delete or change its own file as soon as `enqueue` returns.
public struct OutboxAttachment: Sendable, Hashable {
    /// The file to copy: a regular file (a symbolic link to one is followed, as the app's own file).
    public var file: URL
    /// The part's name, in a multipart body.
    public var name: String
    /// The file name sent with the part; default: the last component of ``file``.
    public var fileName: String?
    /// The part's `Content-Type` (for a body, the request's, unless the request set one); default: the one of the
    /// file name's extension (`jpg` is `image/jpeg`), else `application/octet-stream`.
    public var mimeType: String?

    /// A file to send, as the part `name` of a multipart body, or as the body.
    public init(file: URL, name: String = "file", fileName: String? = nil, mimeType: String? = nil) {
        self.file = file
        self.name = name
        self.fileName = fileName
        self.mimeType = mimeType
    }
}

/// How an entry's files are sent: as the whole body, or as parts of a `multipart/form-data` body beside the
/// request's own body. Either way each file is streamed from the outbox's copy, never read whole into memory, and
/// every attempt sends the same bytes.
public struct OutboxFiles: Sendable, Hashable {
    enum Form: UInt8, Sendable, Hashable {
        case body = 1
        case multipart = 2
    }

    let form: Form
    let attachments: [OutboxAttachment]
    let requestPart: String

    /// The file is the request's body, sent with its `Content-Length` and the attachment's ``OutboxAttachment/mimeType``
    /// as `Content-Type` unless the request set one. The request must make no body of its own.
    public static func body(_ attachment: OutboxAttachment) -> OutboxFiles {
        OutboxFiles(form: .body, attachments: [attachment], requestPart: "")
    }

    /// A `multipart/form-data` body: the request's own body first, if it has one, as the part named `requestPart`
    /// with the request's `Content-Type`, then each file as a part, in order.
    public static func multipart(_ attachments: [OutboxAttachment], requestPart: String = "request") -> OutboxFiles {
        OutboxFiles(form: .multipart, attachments: attachments, requestPart: requestPart)
    }
}

/// A file an entry carries, as the outbox stored it.
public struct OutboxStoredFile: Sendable, Hashable {
    /// The part's name, in a multipart body.
    public let name: String
    /// The file name sent with the part.
    public let fileName: String
    /// The part's (or the body's) `Content-Type`.
    public let mimeType: String
    /// Its size in bytes.
    public let size: Int64
    /// Its SHA-256, as 64 lowercase hexadecimal digits.
    public var sha256: String { SHA256.hex(digest) }
    let digest: [UInt8]
    /// The copy's name in the outbox's `files` folder.
    let storedName: String
}

/// An entry's files and how they are sent, as stored in its record.
struct OutboxStoredFiles: Sendable, Hashable {
    var form: OutboxFiles.Form
    /// The part the request's own body goes in (multipart).
    var requestPart: String
    /// The multipart boundary, chosen at enqueue, so that every attempt sends the same bytes.
    var boundary: String
    var files: [OutboxStoredFile]

    var totalSize: Int64 { files.reduce(0) { $0 + $1.size } }

    /// The body an attempt sends, with the files of `store`.
    func uploadBody(frozen: FrozenRequest?, store: OutboxFileStore) -> UploadBody {
        switch form {
        case .body:
            return .file(store.url(of: files.first?.storedName ?? ""))
        case .multipart:
            let boundary = boundary
            var form = MultipartFormData(boundaryGenerator: { boundary })
            if let frozen, !frozen.body.isEmpty {
                let type = frozen.fields.first { $0.name.lowercased() == "content-type" }?.value
                form.append(frozen.body, name: requestPart, mimeType: type ?? "application/octet-stream")
            }
            for file in files {
                form.append(fileAt: store.url(of: file.storedName), name: file.name, fileName: file.fileName, mimeType: file.mimeType)
            }
            return .multipart(form)
        }
    }
}

/// A damaged or missing attachment found when the outbox opened: its entry is parked with the reason.
public struct OutboxDamagedAttachment: Sendable, Hashable {
    /// The entry that carries it.
    public let entryID: UInt64
    /// The file name it was sent with.
    public let fileName: String
    /// What is wrong: missing, not a regular file, another size.
    public let problem: String
}
