#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// GET `url` as text.
struct FetchText: TextRequest {
    let url: URL
    var fallbackEncoding: String.Encoding = .utf8
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

final class TextRequestTests: XCTestCase {
    private let server = TestServer.shared

    /// Serves `body` with `contentType` at a fresh path, and fetches it as text.
    private func text(_ body: Data, contentType: String?, fallback: String.Encoding = .utf8) -> Result<String, Error> {
        let path = "/text/\(UUID().uuidString)"
        server.route(path) { _ in
            LoopbackResponse(headers: contentType.map { ["Content-Type": $0] } ?? ["Content-Type": ""], body: body)
        }
        let queue = OperationQueue()
        let results = Recorder<Result<String, Error>>()
        queue.addRequest(FetchText(url: server.url(path), fallbackEncoding: fallback), session: testSession) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(results.values.count, 1)
        return results.values.first ?? .failure(RequestQueueError.misuse("no completion"))
    }

    func testEachCharsetTheHeaderNames() throws {
        let word = "Grüße, déjà vu"
        let cases: [(String, String.Encoding)] = [
            ("text/plain; charset=utf-8", .utf8),
            ("text/plain; charset=\"UTF-8\"", .utf8),
            ("text/plain; charset=iso-8859-1", .isoLatin1),
            ("text/html; charset=windows-1252", .windowsCP1252),
            ("text/plain; charset=utf-16le", .utf16LittleEndian),
            ("text/plain; charset=utf-16be", .utf16BigEndian),
        ]
        for (contentType, encoding) in cases {
            let body = try XCTUnwrap(word.data(using: encoding))
            XCTAssertEqual(try text(body, contentType: contentType).get(), word, contentType)
        }
        XCTAssertEqual(try text(Data("plain".utf8), contentType: "text/plain; charset=us-ascii").get(), "plain")
        // UTF-16 with a byte order mark, as Foundation writes it.
        let utf16 = try XCTUnwrap(word.data(using: .utf16))
        XCTAssertEqual(try text(utf16, contentType: "text/plain; charset=utf-16").get(), word)
    }

    func testWithoutACharsetAByteOrderMarkDecidesElseTheFallback() throws {
        let word = "naïve"
        XCTAssertEqual(try text(Data([0xEF, 0xBB, 0xBF]) + Data(word.utf8), contentType: "text/plain").get(), word, "UTF-8 BOM, dropped")
        XCTAssertEqual(try text(try XCTUnwrap(word.data(using: .utf16)), contentType: "text/plain").get(), word, "UTF-16 BOM")
        XCTAssertEqual(try text(Data(word.utf8), contentType: nil).get(), word, "UTF-8 by default")
        let latin1 = try XCTUnwrap(word.data(using: .isoLatin1))
        XCTAssertEqual(try text(latin1, contentType: "text/plain", fallback: .isoLatin1).get(), word, "a fallback of the request's own")
    }

    func testAnUnknownCharsetFallsBack() throws {
        XCTAssertEqual(try text(Data("café".utf8), contentType: "text/plain; charset=klingon").get(), "café")
    }

    func testTheHeaderWinsOverAContradictingByteOrderMark() throws {
        // A UTF-16 BOM (FF FE) on a body the header calls ISO-8859-1: decoded as ISO-8859-1, BOM bytes included.
        let body = Data([0xFF, 0xFE, 0x41])
        XCTAssertEqual(try text(body, contentType: "text/plain; charset=iso-8859-1").get(), "ÿþA")
    }

    func testBytesThatAreNotValidInTheCharsetFailWithATypedError() {
        let result = text(Data([0x63, 0x61, 0x66, 0xE9]), contentType: "text/plain; charset=utf-8")
        XCTAssertEqual(result.failure as? TextDecodingError, .invalidBytes(charset: "utf-8", byteCount: 4))
        let ascii = text(Data([0x41, 0xC3, 0xA9]), contentType: "text/plain; charset=us-ascii")
        XCTAssertEqual(ascii.failure as? TextDecodingError, .invalidBytes(charset: "us-ascii", byteCount: 3))
    }

    func testAnEmptyBodyIsAnEmptyString() throws {
        XCTAssertEqual(try text(Data(), contentType: "text/plain; charset=utf-8").get(), "")
    }
}
