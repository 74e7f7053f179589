#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import XCTest

/// `URLQueryEncoder`: percent-encoding, every option, nesting, sorting, errors, and round trips.
final class URLQueryEncoderTests: XCTestCase {
    // MARK: - Fixtures

    private struct Tagged: Encodable {
        let tags: [String]
        let id: Int
    }

    private struct Address: Encodable {
        let city: String
        let postCode: String?
    }

    private struct User: Encodable {
        let name: String
        let address: Address
    }

    private struct Profile: Encodable {
        let user: User
        let active: Bool
    }

    private struct Stamped: Encodable {
        let at: Date
    }

    private struct Mixed: Encodable {
        let nothing: String?
        let data: Data
        let link: URL
        let price: Decimal
        let small: Int8
        let big: UInt64
        let half: Double
        let two: Double
        let single: Float
    }

    private struct CamelCase: Encodable {
        let accessToken: String
        let myURLValue: Int
        let plain: Int
    }

    /// One keyed field, `name=1`, written through a coding key.
    private struct OneKey: Encodable {
        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        let name: String
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(1, forKey: Key(stringValue: name))
        }
    }

    private struct Line: Encodable {
        let sku: String
        let qty: Int
    }

    private struct Order: Encodable {
        let lines: [Line]
    }

    /// A class hierarchy that encodes its superclass through `superEncoder()` and writes nested containers by hand.
    private class Base: Encodable {
        var id = 7
    }

    private final class Derived: Base {
        var label = "x"
        private enum Keys: String, CodingKey { case label, meta, list, parent }
        private enum MetaKeys: String, CodingKey { case depth }

        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(label, forKey: .label)
            var meta = container.nestedContainer(keyedBy: MetaKeys.self, forKey: .meta)
            try meta.encode(2, forKey: .depth)
            var list = container.nestedUnkeyedContainer(forKey: .list)
            try list.encode("a")
            try list.encodeNil()
            var inner = list.nestedContainer(keyedBy: MetaKeys.self)
            try inner.encode(3, forKey: .depth)
            var deeper = list.nestedUnkeyedContainer()
            try deeper.encode(true)
            try super.encode(to: list.superEncoder())
            try super.encode(to: container.superEncoder())
            try super.encode(to: container.superEncoder(forKey: .parent))
        }
    }

    // MARK: - Percent-encoding

    func testPercentEncodeLeavesOnlyUnreservedCharacters() {
        // Given every unreserved character and a set of reserved, special and non-ASCII ones
        let unreserved = "ABCXYZabcxyz0189-._~"
        let others = " +&=#?/%[]!*'();:@$,\"<>\\^`{|}é中👩‍👩‍👧"

        // When they are percent-encoded
        let keptText = URLQueryEncoder.percentEncode(unreserved)
        let escaped = URLQueryEncoder.percentEncode(others)

        // Then unreserved characters pass through and the rest become uppercase %XX of their UTF-8 bytes
        XCTAssertEqual(keptText, unreserved)
        XCTAssertEqual(URLQueryEncoder.percentEncode("a b+c&d=e#f?g/h%i"), "a%20b%2Bc%26d%3De%23f%3Fg%2Fh%25i")
        XCTAssertEqual(URLQueryEncoder.percentEncode("é中"), "%C3%A9%E4%B8%AD")
        XCTAssertEqual(URLQueryEncoder.percentEncode("[]"), "%5B%5D")
        XCTAssertFalse(escaped.contains { !$0.isASCII || ($0.isLetter && $0.isLowercase) })
        XCTAssertEqual(escaped.removingPercentEncoding, others)
    }

    // MARK: - Options

    func testArrayEncodings() throws {
        // Given a value holding an array
        let value = Tagged(tags: ["a", "b c"], id: 1)

        // When it is encoded with each array encoding
        let byDefault = try URLQueryEncoder().encode(value)
        let noBrackets = try URLQueryEncoder(arrayEncoding: .noBrackets).encode(value)
        let indexed = try URLQueryEncoder(arrayEncoding: .indexed).encode(value)

        // Then brackets is the default, and brackets are percent-encoded like any other reserved character
        XCTAssertEqual(byDefault, "id=1&tags%5B%5D=a&tags%5B%5D=b%20c")
        XCTAssertEqual(noBrackets, "id=1&tags=a&tags=b%20c")
        XCTAssertEqual(indexed, "id=1&tags%5B0%5D=a&tags%5B1%5D=b%20c")
        // Elements that produce nothing (empty arrays, objects of nils) are not counted
        struct Zip: Encodable { let zip: Int? }
        XCTAssertEqual(try URLQueryEncoder(arrayEncoding: .indexed).encode(["a": [[], [1]]]), "a%5B0%5D%5B0%5D=1")
        XCTAssertEqual(try URLQueryEncoder(arrayEncoding: .indexed).encode(["p": [Zip(zip: nil), Zip(zip: 2)]]), "p%5B0%5D%5Bzip%5D=2")
    }

    func testIndexedArraysKeepElementOrderPastTen() throws {
        // Given twelve elements, whose indices would reorder if the final keys were sorted as strings
        let value = ["n": Array(0..<12)]

        // When they are encoded with indices
        let query = try URLQueryEncoder(arrayEncoding: .indexed).encode(value)

        // Then the elements stay in array order
        let expected = (0..<12).map { "n%5B\($0)%5D=\($0)" }.joined(separator: "&")
        XCTAssertEqual(query, expected)
    }

    func testBoolEncodings() throws {
        // Given true and false
        let value = ["yes": true, "no": false]

        // When encoded numerically (the default) and literally
        let numeric = try URLQueryEncoder().encode(value)
        let literal = try URLQueryEncoder(boolEncoding: .literal).encode(value)

        // Then they are 1/0 and true/false, never confused with numbers
        XCTAssertEqual(numeric, "no=0&yes=1")
        XCTAssertEqual(literal, "no=false&yes=true")
        XCTAssertEqual(try URLQueryEncoder(boolEncoding: .literal).encode(["one": 1]), "one=1")
    }

    func testDateEncodings() throws {
        // Given 2026-11-21T10:00:00.5Z
        let date = Date(timeIntervalSince1970: 1_795_255_200.5)
        let whole = Stamped(at: Date(timeIntervalSince1970: 1_795_255_200))
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy/MM/dd"

        // When it is encoded with each date encoding
        func encoded(_ strategy: URLQueryEncoder.DateEncoding) throws -> String {
            try URLQueryEncoder(dateEncoding: strategy).encode(Stamped(at: date))
        }

        // Then ISO 8601 in UTC is the default and drops fractional seconds
        XCTAssertEqual(try URLQueryEncoder().encode(Stamped(at: date)), "at=2026-11-21T10%3A00%3A00Z")
        XCTAssertEqual(try encoded(.iso8601), "at=2026-11-21T10%3A00%3A00Z")
        XCTAssertEqual(try encoded(.secondsSince1970), "at=1795255200.5")
        XCTAssertEqual(try URLQueryEncoder(dateEncoding: .secondsSince1970).encode(whole), "at=1795255200")
        XCTAssertEqual(try encoded(.millisecondsSince1970), "at=1795255200500")
        XCTAssertEqual(try encoded(.formatted(formatter)), "at=2026%2F11%2F21")
        XCTAssertEqual(try encoded(.custom { "t\(Int($0.timeIntervalSince1970) % 100)" }), "at=t0")
    }

    func testKeyEncodings() throws {
        // Given camel-case keys
        let value = CamelCase(accessToken: "t", myURLValue: 1, plain: 2)

        // When encoded with each key encoding
        let byDefault = try URLQueryEncoder().encode(value)
        let snake = try URLQueryEncoder(keyEncoding: .convertToSnakeCase).encode(value)
        let custom = try URLQueryEncoder(keyEncoding: .custom { $0.uppercased() }).encode(value)

        // Then default keys are kept, snake_case follows JSONEncoder's rules, and the custom mapping is applied
        XCTAssertEqual(byDefault, "accessToken=t&myURLValue=1&plain=2")
        XCTAssertEqual(snake, "access_token=t&my_url_value=1&plain=2")
        XCTAssertEqual(custom, "ACCESSTOKEN=t&MYURLVALUE=1&PLAIN=2")
    }

    func testSnakeCaseMatchesJSONEncoder() throws {
        // Given coding keys with acronyms, digits, underscores and a single letter
        let keys = [
            "accessToken", "myURLValue", "URLValue", "isHTTPS", "a1B", "a_B", "ABc", "x", "X", "simple", "myURL2Value",
            "_private", "trailing_", "ÉtéÀ", "aBCdEFg", "",
        ]
        let json = JSONEncoder()
        json.keyEncodingStrategy = .convertToSnakeCase
        let snake = URLQueryEncoder(keyEncoding: .convertToSnakeCase)
        func jsonKey(_ value: some Encodable) throws -> String? {
            (try JSONSerialization.jsonObject(with: try json.encode(value)) as? [String: Int])?.keys.first
        }

        for key in keys {
            // When each is encoded by both encoders, as a coding key and as a dictionary key
            let query = try snake.encode(OneKey(name: key))
            let dictionaryQuery = try snake.encode([key: 1])

            // Then both encoders produce the same keys: coding keys converted, dictionary keys kept
            XCTAssertEqual(query, URLQueryEncoder.percentEncode(try XCTUnwrap(try jsonKey(OneKey(name: key)))) + "=1", key)
            XCTAssertEqual(dictionaryQuery, URLQueryEncoder.percentEncode(try XCTUnwrap(try jsonKey([key: 1]))) + "=1", key)
        }
        XCTAssertEqual(try snake.encode(OneKey(name: "myURLValue")), "my_url_value=1")
        XCTAssertEqual(try snake.encode(["myURLValue": 1]), "myURLValue=1")
    }

    // MARK: - Structure

    func testNestedObjectsUseBracketNotationAndSortedKeys() throws {
        // Given a nested value whose keys are declared out of order
        let value = Profile(user: User(name: "ada", address: Address(city: "London", postCode: nil)), active: true)

        // When it is encoded
        let query = try URLQueryEncoder().encode(value)

        // Then nested keys use brackets (percent-encoded), keys are sorted, and nil is omitted
        XCTAssertEqual(query, "active=1&user%5Baddress%5D%5Bcity%5D=London&user%5Bname%5D=ada")
        XCTAssertEqual(query.removingPercentEncoding, "active=1&user[address][city]=London&user[name]=ada")
    }

    func testTopLevelKeysAreSorted() throws {
        // Given a dictionary with many keys
        let keys = ["zeta", "alpha", "Mid", "beta2", "beta10", "_x", "~y"]
        let value = Dictionary(uniqueKeysWithValues: keys.map { ($0, 1) })

        // When it is encoded twice
        let first = try URLQueryEncoder().encode(value)
        let second = try URLQueryEncoder().encode(value)

        // Then the keys come out in sorted order, every time
        XCTAssertEqual(first, keys.sorted().map { "\($0)=1" }.joined(separator: "&"))
        XCTAssertEqual(first, second)
    }

    func testArraysOfObjectsKeepEachElementTogether() throws {
        // Given an array of objects
        let order = Order(lines: [Line(sku: "b", qty: 2), Line(sku: "a", qty: 1)])

        // When encoded with brackets and with indices
        let brackets = try URLQueryEncoder().encode(order).removingPercentEncoding
        let indexed = try URLQueryEncoder(arrayEncoding: .indexed).encode(order).removingPercentEncoding

        // Then elements keep their order and each element's fields stay together, sorted
        XCTAssertEqual(brackets, "lines[][qty]=2&lines[][sku]=b&lines[][qty]=1&lines[][sku]=a")
        XCTAssertEqual(indexed, "lines[0][qty]=2&lines[0][sku]=b&lines[1][qty]=1&lines[1][sku]=a")
    }

    func testLeafTypesNilAndNumbers() throws {
        // Given every leaf type the encoder special-cases
        let value = Mixed(
            nothing: nil, data: Data([0xFB, 0xFF]), link: try XCTUnwrap(URL(string: "https://x.io/a?b=c")),
            price: try XCTUnwrap(Decimal(string: "12.50")), small: -8, big: .max, half: 1.5, two: 2.0, single: 0.25
        )

        // When it is encoded
        let query = try URLQueryEncoder().encode(value)

        // Then nil is omitted, Data is Base64, URL is its absoluteString, and numbers are their description
        XCTAssertEqual(
            query,
            [
                "big=18446744073709551615", "data=" + URLQueryEncoder.percentEncode("+/8="), "half=1.5",
                "link=https%3A%2F%2Fx.io%2Fa%3Fb%3Dc", "price=12.5", "single=0.25", "small=-8", "two=2.0",
            ].joined(separator: "&"))
    }

    func testDictionaryOfParameters() throws {
        // Given a heterogeneous parameter dictionary, with a nil optional and a nested array
        let missing: Int? = nil
        let parameters: [String: any Encodable & Sendable] = [
            "q": "swift & linux", "page": 2, "exact": true, "ids": [3, 1], "missing": missing, "firstName": "Ada",
        ]

        // When it is encoded with snake_case keys (which apply to coding keys only)
        let query = try URLQueryEncoder(keyEncoding: .convertToSnakeCase).encode(parameters)

        // Then the dictionary keys are sorted but kept as they are (like JSONEncoder), and nil is omitted
        XCTAssertEqual(query, "exact=1&firstName=Ada&ids%5B%5D=3&ids%5B%5D=1&page=2&q=swift%20%26%20linux")
        XCTAssertEqual(try URLQueryEncoder().encode([String: any Encodable & Sendable]()), "")
    }

    func testSuperEncodersAndHandWrittenContainers() throws {
        // Given a class that encodes its superclass through superEncoder() and writes nested containers itself
        let value = Derived()

        // When it is encoded
        let query = try URLQueryEncoder(arrayEncoding: .indexed).encode(value).removingPercentEncoding

        // Then every container lands under its key: nil elements are dropped and indices count the kept ones
        XCTAssertEqual(
            query,
            [
                "label=x", "list[0]=a", "list[1][depth]=3", "list[2][0]=1", "list[3][id]=7", "meta[depth]=2",
                "parent[id]=7", "super[id]=7",
            ].joined(separator: "&"))
    }

    // MARK: - Errors

    func testNonFiniteNumbersThrow() {
        // Given non-finite numbers, at the top level of the value and nested inside it
        let cases: [[String: any Encodable & Sendable]] = [
            ["x": Double.nan], ["x": Double.infinity], ["x": -Float.infinity], ["x": ["y": [1.0, .nan]]],
            ["x": Decimal.nan], ["x": Date(timeIntervalSince1970: .infinity)],
        ]

        for parameters in cases {
            // When each is encoded
            XCTAssertThrowsError(try URLQueryEncoder(dateEncoding: .secondsSince1970).encode(parameters)) { error in
                // Then an invalidValue error explains why
                guard case let EncodingError.invalidValue(_, context)? = error as? EncodingError else {
                    return XCTFail("unexpected error \(error)")
                }
                XCTAssertTrue(context.debugDescription.contains("Non-finite"), context.debugDescription)
                XCTAssertEqual(context.codingPath.first?.stringValue, "x")
            }
        }
    }

    func testTopLevelValuesThatAreNotKeyedThrow() {
        // Given top-level values that have no keys
        let encoder = URLQueryEncoder()
        let attempts: [() throws -> String] = [
            { try encoder.encode("bare") }, { try encoder.encode(42) }, { try encoder.encode(["a", "b"]) },
            { try encoder.encode(Optional<Int>.none) }, { try encoder.encode(Date()) },
        ]

        for attempt in attempts {
            // When each is encoded
            XCTAssertThrowsError(try attempt()) { error in
                // Then it fails with invalidValue, not with a crash or an empty string
                guard case let EncodingError.invalidValue(_, context)? = error as? EncodingError else {
                    return XCTFail("unexpected error \(error)")
                }
                XCTAssertTrue(context.debugDescription.contains("keyed top-level"), context.debugDescription)
            }
        }
    }

    // MARK: - Round trips

    func testRandomStringsRoundTripThroughURLComponents() throws {
        // Given a seeded generator and a pool of awkward pieces
        var random = SplitMix64(seed: 0x5EED_2026)
        let pool = ["é", "中文", "👩‍👩‍👧", "&", "=", "+", "#", "?", "/", "%", " ", "[", "]", "a", "Z", "q", "0", "~", "%20"]
        func randomString() -> String {
            (0..<Int.random(in: 0...8, using: &random)).map { _ in pool.randomElement(using: &random) ?? "" }.joined()
        }

        for round in 0..<500 {
            // When a dictionary of random keys and values is encoded and parsed back by URLComponents
            var original: [String: String] = [:]
            for _ in 0..<Int.random(in: 1...4, using: &random) { original[randomString()] = randomString() }
            let encoded = try URLQueryEncoder().encode(original)
            var components = URLComponents()
            components.percentEncodedQuery = encoded
            let items = try XCTUnwrap(components.queryItems, "round \(round): \(encoded)")

            // Then the names and values are exactly the originals
            XCTAssertEqual(items.count, original.count, encoded)
            let parsed = Dictionary(items.map { ($0.name, $0.value ?? "<nil>") }, uniquingKeysWith: { first, _ in first })
            XCTAssertEqual(parsed, original, "round \(round): \(encoded)")
        }
    }

    func testLoopbackServerSeesOriginalKeysAndValues() async throws {
        // Given tricky keys and values and their encoded query
        let original = [
            "a b": "x y", "plus+": "1+1=2", "amp&": "&&", "eq=": "==", "hash#": "#frag", "q?": "?", "slash/": "/a/b",
            "pct%": "100%", "é": "中文", "👩‍👩‍👧": "family 👩‍👩‍👧", "tags[]": "[x]", "empty": "",
        ]
        let query = try URLQueryEncoder().encode(original)

        // When it is sent over a real URLSession to the loopback echo route
        let (data, response) = try await testSession.data(from: TestServer.url("/echo?" + query))

        // Then the server parsed exactly the original keys and values
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        let echo = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
        XCTAssertEqual(echo["query"] as? [String: String], original, String(decoding: data, as: UTF8.self))
    }
}
