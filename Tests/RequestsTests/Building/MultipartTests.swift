#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

final class MultipartTests: XCTestCase {
    // MARK: - Over URLSession to the loopback server

    func testFieldsDataAndFilesArriveByteForByte() throws {
        let text = try makeFile("notes.txt", Data("first line\r\nsecond line\n--not a boundary\r\n".utf8))
        let binary = try makeFile("random.bin", trickyBytes(count: 50_000))
        let image = try makeFile("pixel.PNG", trickyBytes(count: 300))
        let json = Data(#"{"a":[1,2]}"#.utf8)

        var form = MultipartFormData()
        form.append("hello", name: "plain")
        form.append("värde 🚀 \"quoted\"\r\nnext line", name: "unicodé ✓ 名前")
        form.append("x", name: "say \"hi\"\r\nX-Injected: 1")
        form.append(Data([0, 1, 13, 10, 45, 45, 255]), name: "blob")
        form.append(json, name: "meta", fileName: "meta.json")
        form.append(fileAt: text, name: "notes")
        form.append(fileAt: binary, name: "binary", fileName: "we\"ird\r\nname.bin", mimeType: "application/x-custom")
        form.append(fileAt: image, name: "image")

        var request = URLRequest(url: TestServer.url("/multipart/\(UUID().uuidString)"))
        request.httpMethod = "POST"
        let length = try form.apply(to: &request)
        XCTAssertNotNil(request.httpBody)
        XCTAssertNil(request.httpBodyStream)
        XCTAssertEqual(request.value(forHTTPHeaderField: "Content-Length"), String(length))

        let received = try send(request)
        XCTAssertEqual(received.headers["content-length"], String(received.body.count))
        XCTAssertEqual(received.body.count, length)
        XCTAssertEqual(received.body, request.httpBody)

        let parts = try parse(received)
        XCTAssertEqual(parts.map(\.name), ["plain", "unicodé ✓ 名前", "say \"hi\"\r\nX-Injected: 1", "blob", "meta", "notes", "binary", "image"])
        XCTAssertEqual(parts.map(\.fileName), [nil, nil, nil, nil, "meta.json", "notes.txt", "we\"ird\r\nname.bin", "pixel.PNG"])
        XCTAssertEqual(
            parts.map(\.contentType),
            [
                nil, nil, nil, "application/octet-stream", "application/json", "text/plain", "application/x-custom", "image/png",
            ])
        XCTAssertEqual(
            parts.map(\.body),
            [
                Data("hello".utf8), Data("värde 🚀 \"quoted\"\r\nnext line".utf8), Data("x".utf8), Data([0, 1, 13, 10, 45, 45, 255]),
                json, try Data(contentsOf: text), try Data(contentsOf: binary), try Data(contentsOf: image),
            ])
        // Quotes and line breaks are escaped, so they neither end the quoted name nor start a header.
        XCTAssertEqual(parts[2].headers["content-disposition"], #"form-data; name="say %22hi%22%0D%0AX-Injected: 1""#)
        XCTAssertEqual(parts[6].headers["content-disposition"], #"form-data; name="binary"; filename="we%22ird%0D%0Aname.bin""#)
        XCTAssertFalse(parts.contains { $0.headers["x-injected"] != nil })
    }

    func testBodyAboveThresholdIsStreamedFromAnUnlinkedFile() throws {
        let big = try makeFile("big.bin", trickyBytes(count: 1_000_000))
        var form = MultipartFormData(boundaryGenerator: { "Requests-fixed-boundary-for-comparison" })
        form.streamingThreshold = 64 * 1024
        form.append("caption", name: "title")
        form.append(fileAt: big, name: "upload")
        var inMemory = form
        inMemory.streamingThreshold = .max
        var expected = URLRequest(url: TestServer.url("/unused"))
        try inMemory.apply(to: &expected)

        let filesSeenByServer = Box<[String]>()
        let path = "/multipart/\(UUID().uuidString)"
        do {
            var request = URLRequest(url: TestServer.url(path))
            request.httpMethod = "POST"
            let length = try form.apply(to: &request)
            XCTAssertNil(request.httpBody)
            XCTAssertNotNil(request.httpBodyStream)
            XCTAssertEqual(length, expected.httpBody?.count)
            #if canImport(FoundationNetworking)
            XCTAssertTrue(leftoverTemporaryFiles().isEmpty, "the file is unlinked as soon as it is created")
            #else
            // On Apple platforms the file keeps its name until the stream is released, to answer needNewBodyStream.
            XCTAssertEqual(leftoverTemporaryFiles().count, 1, "the stream's file, named until the stream is released")
            #endif
            #if os(Linux)
            XCTAssertEqual(openTemporaryDescriptors().count, 1, "the stream holds the file open")
            XCTAssertNil(request.value(forHTTPHeaderField: "Content-Length"))
            #endif

            let received = try send(request) { _ in filesSeenByServer.value = leftoverTemporaryFiles() }
            XCTAssertEqual(received.body, expected.httpBody)
            #if os(Linux)
            // corelibs sends a body stream chunked; a Content-Length beside it would be refused by nginx.
            XCTAssertEqual(received.headers["transfer-encoding"], "chunked")
            XCTAssertNil(received.headers["content-length"])
            XCTAssertTrue(openTemporaryDescriptors().isEmpty, "closed at the end of the body, while the request still exists")
            #else
            XCTAssertEqual(received.headers["content-length"], String(received.body.count))
            #endif
            let parts = try parse(received)
            XCTAssertEqual(parts.map(\.name), ["title", "upload"])
            XCTAssertEqual(parts.map(\.body), [Data("caption".utf8), try Data(contentsOf: big)])
            XCTAssertEqual(parts[1].contentType, "application/octet-stream")
        }
        #if canImport(FoundationNetworking)
        XCTAssertEqual(filesSeenByServer.value, [])
        #else
        XCTAssertEqual(filesSeenByServer.value?.count, 1, "named while the stream is sent")
        #endif
        waitUntil("no temporary file is left, open or named") { noTemporaryFileIsLeft() }
    }

    func testEveryApplyMakesAFreshBody() throws {
        let big = try makeFile("big.bin", trickyBytes(count: 200_000))
        var form = MultipartFormData()
        form.streamingThreshold = 64 * 1024
        form.append(fileAt: big, name: "upload")
        var first = URLRequest(url: TestServer.url("/multipart/\(UUID().uuidString)"))
        first.httpMethod = "POST"
        var second = first
        try form.apply(to: &first)
        try form.apply(to: &second)
        let firstBody = try XCTUnwrap(first.httpBodyStream.map(readAll))
        XCTAssertEqual(try parse(contentType: first, body: firstBody).first?.body, try Data(contentsOf: big))
        // The second attempt is unaffected by the first stream being consumed.
        let received = try send(second)
        XCTAssertEqual(try parse(received).first?.body, try Data(contentsOf: big))
        // Re-applying to the same request replaces a stream by an in-memory body, and the header with it.
        form.streamingThreshold = .max
        let length = try form.apply(to: &second)
        XCTAssertNil(second.httpBodyStream)
        XCTAssertEqual(second.httpBody?.count, length)
        XCTAssertEqual(second.value(forHTTPHeaderField: "Content-Length"), String(length))
    }

    func testCancelledOrUnsentStreamsFreeTheirFile() throws {
        let big = try makeFile("big.bin", trickyBytes(count: 300_000))
        var form = MultipartFormData()
        form.streamingThreshold = 0
        form.append(fileAt: big, name: "upload")
        do {
            var unsent = URLRequest(url: TestServer.url("/fault/never-respond"))
            try form.apply(to: &unsent)
            var partlyRead = unsent
            try form.apply(to: &partlyRead)
            let stream = try XCTUnwrap(partlyRead.httpBodyStream)
            stream.open()
            var buffer = [UInt8](repeating: 0, count: 1000)
            XCTAssertEqual(stream.read(&buffer, maxLength: buffer.count), 1000)
            #if os(Linux)
            XCTAssertEqual(openTemporaryDescriptors().count, 2)
            #else
            // Named files; only the stream that was opened holds a descriptor.
            XCTAssertEqual(leftoverTemporaryFiles().count, 2)
            XCTAssertEqual(openTemporaryDescriptors().count, 1)
            #endif
        }
        waitUntil("released streams close and remove their file") { noTemporaryFileIsLeft() }

        let done = expectation(description: "cancelled")
        do {
            var request = URLRequest(url: TestServer.url("/fault/never-respond"))
            request.httpMethod = "POST"
            try form.apply(to: &request)
            let task = testSession.dataTask(with: request) { _, _, error in
                XCTAssertEqual((error as? URLError)?.code, .cancelled)
                done.fulfill()
            }
            task.resume()
            task.cancel()
        }
        wait(for: [done], timeout: 10)
        waitUntil("a cancelled request's stream closes and removes its file") { noTemporaryFileIsLeft() }
    }

    // MARK: - Errors

    func testMissingOrUnreadableFilePartThrowsUnreadableFile() throws {
        let directory = try makeDirectory()
        let missing = directory.appendingPathComponent("missing.txt")
        let remote = try XCTUnwrap(URL(string: "https://example.com/a.png"))
        for (url, threshold) in [(missing, 10_000_000), (missing, 0), (directory, 0), (remote, 0)] {
            var form = MultipartFormData()
            form.streamingThreshold = threshold
            form.append("field", name: "field")
            form.append(fileAt: url, name: "file")
            var request = URLRequest(url: TestServer.url("/unused"))
            XCTAssertThrowsError(try form.apply(to: &request)) { error in
                XCTAssertEqual(error as? RequestBuildingError, .unreadableFile(url))
            }
            XCTAssertNil(request.httpBody)
            XCTAssertNil(request.httpBodyStream)
        }
        #if os(Linux)
        if getuid() != 0 {  // root reads any file
            let locked = try makeFile("locked.txt", Data("secret".utf8))
            chmod(locked.path, 0)
            var form = MultipartFormData()
            form.append(fileAt: locked, name: "file")
            var request = URLRequest(url: TestServer.url("/unused"))
            XCTAssertThrowsError(try form.apply(to: &request)) { XCTAssertEqual($0 as? RequestBuildingError, .unreadableFile(locked)) }
        }
        #endif
        XCTAssertTrue(openTemporaryDescriptors().isEmpty)
        XCTAssertTrue(leftoverTemporaryFiles().isEmpty)
    }

    func testMimeTypeWithLineBreakIsRejected() {
        for type in ["text/plain\r\nX-Injected: 1", "text/plain\nX: 1", "text/plain\r", "text/\0plain"] {
            var form = MultipartFormData()
            form.append(Data(), name: "a", mimeType: type)
            var request = URLRequest(url: TestServer.url("/unused"))
            XCTAssertThrowsError(try form.apply(to: &request), type.debugDescription) {
                XCTAssertEqual($0 as? RequestBuildingError, .invalidHeader(name: "Content-Type"))
            }
        }
    }

    // MARK: - Boundary

    func testBoundaryInContentIsReplacedByANewOne() throws {
        let planted = (1...4).map { "Requests-planted\($0)-0123456789abcdefghij" }
        var fileBytes = trickyBytes(count: 150_000)
        // Across the builder's 64 KiB read chunks, so only the carry-over between chunks can see it.
        fileBytes.replaceSubrange((65_536 - 10)..<(65_536 - 10 + planted[2].utf8.count), with: Data(planted[2].utf8))
        let file = try makeFile("planted.bin", fileBytes)

        for threshold in [Int.max, 0] {
            let generator = BoundarySequence(planted + ["Requests-clean"])
            var form = MultipartFormData(boundaryGenerator: { generator.next() })
            form.streamingThreshold = threshold
            form.append("before \(planted[0]) after", name: "field")
            form.append(Data("x\r\n--\(planted[1])--\r\n".utf8), name: "data")
            form.append(fileAt: file, name: "file")
            form.append("", name: "empty")
            form.append(Data(), name: "named", fileName: "\(planted[3]).txt")

            var request = URLRequest(url: TestServer.url("/multipart/\(UUID().uuidString)"))
            request.httpMethod = "POST"
            try form.apply(to: &request)
            XCTAssertEqual(request.value(forHTTPHeaderField: "Content-Type"), "multipart/form-data; boundary=Requests-clean")
            XCTAssertEqual(generator.taken, 5)
            let parts = try parse(try send(request))
            XCTAssertEqual(
                parts.map(\.body),
                [
                    Data("before \(planted[0]) after".utf8), Data("x\r\n--\(planted[1])--\r\n".utf8), fileBytes, Data(), Data(),
                ])
            XCTAssertEqual(parts.last?.fileName, "\(planted[3]).txt")
        }
    }

    func testBoundaryThatAlwaysCollidesFailsWithoutLeftovers() throws {
        var form = MultipartFormData(boundaryGenerator: { "Requests-same" })
        form.streamingThreshold = 0
        form.append("Requests-same", name: "field")
        var request = URLRequest(url: TestServer.url("/unused"))
        XCTAssertThrowsError(try form.apply(to: &request)) { XCTAssertTrue($0 is MultipartFormData.BoundaryCollision) }
        XCTAssertNil(request.httpBodyStream)
        XCTAssertTrue(openTemporaryDescriptors().isEmpty)
        XCTAssertTrue(leftoverTemporaryFiles().isEmpty)
    }

    func testRandomBoundariesAreFreshAndValid() {
        let boundaries = (0..<1000).map { _ in MultipartFormData.randomBoundary() }
        XCTAssertEqual(Set(boundaries).count, 1000)
        XCTAssertTrue(boundaries.allSatisfy { $0.hasPrefix("Requests-") && $0.utf8.count == 41 && MultipartFormData.isValid($0) })
        XCTAssertFalse(MultipartFormData.isValid(""))
        XCTAssertFalse(MultipartFormData.isValid("a\"b"))
        XCTAssertFalse(MultipartFormData.isValid(String(repeating: "a", count: 71)))
    }

    func testMimeTypesFromExtensions() {
        let expected = [
            "png": "image/png", "JPG": "image/jpeg", "jpeg": "image/jpeg", "json": "application/json", "txt": "text/plain",
            "pdf": "application/pdf", "gif": "image/gif", "html": "text/html", "csv": "text/csv", "xml": "application/xml",
            "mp4": "video/mp4", "zip": "application/zip", "": "application/octet-stream", "unknown": "application/octet-stream",
        ]
        for (pathExtension, type) in expected {
            XCTAssertEqual(MultipartFormData.mimeType(forExtension: pathExtension), type, pathExtension)
        }
    }

    // MARK: - The loopback server's parser

    func testParserAcceptsPreambleEpilogueAndPaddingAndRejectsMalformedBodies() throws {
        let type = "multipart/form-data; boundary=\"b\""
        let valid =
            "preamble\r\n--b \t\r\nContent-Disposition: form-data; name=\"a;b\"\r\n\r\n\r\n--b\r\n"
            + "content-disposition: form-data; name=x; filename=\"C:\\f.txt\"\r\nContent-Type: text/plain\r\n\r\n1\r\n2\r\n--b--\r\nepilogue"
        let parts = try MultipartParser.parse(contentType: type, body: Data(valid.utf8))
        XCTAssertEqual(parts.map(\.name), ["a;b", "x"])
        XCTAssertEqual(parts.map(\.fileName), [nil, "C:\\f.txt"])
        XCTAssertEqual(parts.map(\.body), [Data(), Data("1\r\n2".utf8)])
        XCTAssertEqual(try MultipartParser.parse(contentType: type, body: Data("--b--\r\n".utf8)), [])

        let disposition = "Content-Disposition: form-data; name=\"a\"\r\n"
        let malformed: [(String, String)] = [
            ("text/plain; boundary=b", "--b--"),
            ("multipart/form-data", "--b--"),
            (type, ""),
            (type, "--b\r\n\(disposition)\r\nno closing delimiter"),
            (type, "--b\r\n\(disposition)\r\nx\r\n--bb\r\n\(disposition)\r\ny\r\n--b--"),
            (type, "--b\r\nno colon\r\n\r\nx\r\n--b--"),
            (type, "--b\r\n\(disposition)unterminated"),
            (type, "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--"),
            (type, "--b\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--b--"),
            (type, "--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--"),
            (type, "--b\r\nBad Name: 1\r\n\(disposition)\r\nx\r\n--b--"),
        ]
        for (contentType, body) in malformed {
            XCTAssertThrowsError(try MultipartParser.parse(contentType: contentType, body: Data(body.utf8)), body.debugDescription)
        }
    }

    // MARK: - Helpers

    /// Random bytes interleaved with `--`, CRLF and `\r\n--` sequences.
    private func trickyBytes(count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let sequences: [[UInt8]] = [[45, 45], [13, 10], [13, 10, 45, 45], [13, 10, 13, 10], [45, 45, 13, 10]]
        for (index, offset) in stride(from: 0, to: max(0, count - 8), by: 997).enumerated() {
            let sequence = sequences[index % sequences.count]
            bytes.replaceSubrange(offset..<(offset + sequence.count), with: sequence)
        }
        return Data(bytes)
    }

    private func makeDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("MultipartTests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
        return directory
    }

    private func makeFile(_ name: String, _ contents: Data) throws -> URL {
        let url = try makeDirectory().appendingPathComponent(name)
        try contents.write(to: url)
        return url
    }

    /// Sends `request` with `testSession` to a fresh loopback route and returns what the server received.
    private func send(_ request: URLRequest, onReceive: @escaping @Sendable (LoopbackRequest) -> Void = { _ in }) throws -> LoopbackRequest {
        let path = request.url?.path ?? "/"
        let received = Box<LoopbackRequest>()
        TestServer.shared.route(path) { loopbackRequest in
            onReceive(loopbackRequest)
            received.value = loopbackRequest
            return .text("ok")
        }
        let done = expectation(description: "response")
        let status = Box<Int>()
        testSession.dataTask(with: request) { _, response, error in
            XCTAssertNil(error)
            status.value = (response as? HTTPURLResponse)?.statusCode
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 30)
        XCTAssertEqual(status.value, 200)
        return try XCTUnwrap(received.value)
    }

    private func parse(_ request: LoopbackRequest) throws -> [MultipartPart] {
        try MultipartParser.parse(contentType: request.headers["content-type"] ?? "", body: request.body)
    }

    private func parse(contentType request: URLRequest, body: Data) throws -> [MultipartPart] {
        try MultipartParser.parse(contentType: request.value(forHTTPHeaderField: "Content-Type") ?? "", body: body)
    }

    private func readAll(_ stream: InputStream) -> Data {
        stream.open()
        defer { stream.close() }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 10_000)
        while stream.hasBytesAvailable {
            let count = stream.read(&buffer, maxLength: buffer.count)
            guard count > 0 else { break }
            data.append(contentsOf: buffer[0..<count])
        }
        return data
    }
}

/// Files in the temporary directory named like the builder's temporary files.
private func leftoverTemporaryFiles() -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: FileManager.default.temporaryDirectory.path)) ?? []
    return names.filter { $0.hasPrefix("Requests-multipart-") }
}

/// This process's open descriptors of the builder's temporary files: read from /proc/self/fd on Linux (where the files
/// are unlinked, so a descriptor is all that is left of them), and with `fcntl(F_GETPATH)` on Apple platforms.
private func openTemporaryDescriptors() -> [String] {
    #if os(Linux)
    let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return descriptors.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
        .filter { $0.contains("/Requests-multipart-") }
    #elseif canImport(Darwin)
    var paths: [String] = []
    var buffer = [CChar](repeating: 0, count: Int(MAXPATHLEN))
    for fd in 0..<getdtablesize() where fcntl(fd, F_GETPATH, &buffer) != -1 {
        let path = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if path.contains("/Requests-multipart-") { paths.append(path) }
    }
    return paths
    #else
    return []
    #endif
}

/// Whether every temporary file of the builder is gone: no descriptor open, and no name left in the temporary directory.
private func noTemporaryFileIsLeft() -> Bool {
    openTemporaryDescriptors().isEmpty && leftoverTemporaryFiles().isEmpty
}

/// Hands out the given boundaries in turn, then the last one again; counts how many were taken.
private final class BoundarySequence: @unchecked Sendable {
    private let lock = NSLock()
    private let boundaries: [String]
    private var index = 0

    init(_ boundaries: [String]) {
        self.boundaries = boundaries
    }

    var taken: Int {
        lock.lock()
        defer { lock.unlock() }
        return index
    }

    func next() -> String {
        lock.lock()
        defer { lock.unlock() }
        index += 1
        return boundaries[min(index, boundaries.count) - 1]
    }
}
