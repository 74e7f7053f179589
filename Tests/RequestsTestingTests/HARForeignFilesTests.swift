#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTesting
import XCTest

/// HAR files written by other tools (Chrome, Firefox, mitmproxy: see Fixtures/README.md), replayed as they are.
final class HARForeignFilesTests: XCTestCase {
    private func fixture(_ name: String) -> URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/\(name)")
    }

    private func get(_ url: String) -> FetchData { FetchData(url: URL(string: url)!) }

    /// What a browser's export replays: the page, a Base64 image, a 301 followed to its target, a POST, a refused
    /// connection as URLSession reports it.
    private func checkBrowserExport(_ name: String) throws {
        let replay = try HARReplay(file: fixture(name), mode: .replayOnly)
        var post = FetchData(url: URL(string: "https://api.example.test/v1/session")!, method: "POST")
        post.body = Data("user=ada".utf8)
        let results = outcomes(
            [
                get("https://api.example.test/"), get("https://api.example.test/old-profile?id=7"), post,
                get("https://api.example.test/v1/users/7"),
            ], session: replay.session, monitors: [])
        XCTAssertEqual(results.count, 4)
        XCTAssertTrue(results[0].hasPrefix("ok <!doctype html>"), results[0])
        XCTAssertTrue(results[1].hasPrefix(#"ok {"id":7,"name":"Ada""#), "the 301 is followed to its Location: \(results[1])")
        XCTAssertTrue(results[2].hasPrefix(#"ok {"token":"#), results[2])
        XCTAssertEqual(results[3], results[1], "the redirect's target, asked again, repeats its only entry")
        let logo = try XCTUnwrap(run(get("https://api.example.test/static/logo.png"), on: replay.session).first).get()
        XCTAssertEqual(Array(logo.prefix(4)), [0x89, 0x50, 0x4E, 0x47], "the PNG, decoded from Base64")
    }

    func testChromesExportReplays() throws {
        try checkBrowserExport("chrome-export.har")
        let replay = try HARReplay(file: fixture("chrome-export.har"), mode: .replayOnly)
        // Chrome's status 0 with `net::ERR_CONNECTION_REFUSED` is the URLError URLSession gives for it.
        XCTAssertEqual(
            outcomes([get("https://api.example.test:8443/v1/events")], session: replay.session, monitors: []),
            ["URLError \(URLError.cannotConnectToHost.rawValue)"])
    }

    func testFirefoxsExportReplays() throws {
        try checkBrowserExport("firefox-export.har")
    }

    func testMitmproxysExportReplays() throws {
        let replay = try HARReplay(file: fixture("mitmproxy-export.har"), mode: .replayOnly)
        var order = FetchData(url: URL(string: "https://api.example.test/v1/orders")!, method: "POST")
        order.body = Data(#"{"item":1}"#.utf8)
        let results = outcomes(
            [
                get("https://api.example.test/v1/users/7?email=x&fields=name,email"), get("https://api.example.test/v1/users/7?fields=name,email"), order,
                get("https://api.example.test/v1/health"),
            ],
            session: replay.session, monitors: [])
        XCTAssertTrue(results[0].hasPrefix("error No recorded entry matches GET"), results[0])
        XCTAssertTrue(results[0].contains("the closest is entry 0: GET https://api.example.test/v1/users/7?fields=name,email"), results[0])
        XCTAssertTrue(results[1].hasPrefix(#"ok {"id":7"#), results[1])
        XCTAssertEqual(results[2], #"ok {"id":9001,"state":"new"}"#)
        XCTAssertEqual(results[3], "URLError \(URLError.cannotConnectToHost.rawValue)", "mitmproxy's \"Connection refused\"")
    }
}
