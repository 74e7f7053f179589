import Foundation
import Requests

/// Version 3 of an entry's record (see ``OutboxRecord``): after the fields of version 2, the coalescing key (an
/// optional string), then a byte (0 no files, 1 files) and the files: the form, the request's part, the boundary,
/// the count, and for each the part's name, the file name, the type, the size, the 32-byte SHA-256 and the stored
/// name.
extension RecordWriter {
    mutating func extensions(_ entry: OutboxEntry) {
        optionalString(entry.coalescingKey)
        guard let files = entry.files else { return byte(0) }
        byte(1)
        byte(files.form.rawValue)
        string(files.requestPart)
        string(files.boundary)
        double(Double(files.files.count))
        for file in files.files {
            string(file.name)
            string(file.fileName)
            string(file.mimeType)
            double(Double(file.size))
            bytes(Data(file.digest))
            string(file.storedName)
        }
    }
}

extension RecordReader {
    /// The files of a version 3 record: `.some(nil)` for none, `nil` for bytes this version does not read. A stored
    /// name that could leave the folder (empty, `.`, `..`, or with a `/`) is refused.
    mutating func files() -> OutboxStoredFiles?? {
        switch byte() {
        case 0: return .some(nil)
        case 1: break
        default: return nil
        }
        guard let rawForm = byte(), let form = OutboxFiles.Form(rawValue: rawForm), let requestPart = string(),
            let boundary = string(), let count = int(), (0...10_000).contains(count)
        else { return nil }
        var files: [OutboxStoredFile] = []
        for _ in 0..<count {
            guard let name = string(), let fileName = string(), let mimeType = string(), let size = int(), size >= 0,
                let digest = bytes(), digest.count == 32, let storedName = string(), Self.isPlainName(storedName)
            else { return nil }
            files.append(
                OutboxStoredFile(name: name, fileName: fileName, mimeType: mimeType, size: Int64(size), digest: Array(digest), storedName: storedName))
        }
        return .some(OutboxStoredFiles(form: form, requestPart: requestPart, boundary: boundary, files: files))
    }

    private static func isPlainName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.utf8.contains(0)
    }
}
