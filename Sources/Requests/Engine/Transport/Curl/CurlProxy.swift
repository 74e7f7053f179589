#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The proxy a libcurl transfer goes through, from the session's `connectionProxyDictionary` with the keys Apple's
/// CFNetwork uses (`HTTPEnable`, `HTTPProxy`, `HTTPPort` for `http` URLs; `HTTPSEnable`, `HTTPSProxy`, `HTTPSPort`
/// for `https` ones, tunnelled with `CONNECT`). URLSession on Linux ignores that dictionary; here a session that sets
/// one is ruled by it alone: without an enabled entry for the URL's scheme, the transfer goes direct, whatever the
/// environment says. A session without one keeps libcurl's own rule: the `http_proxy`, `https_proxy` and `no_proxy`
/// environment variables, as URLSession on Linux.
enum CurlProxy {
    /// The `CURLOPT_PROXY` text for `url` (`""`: go direct), or `nil` to leave libcurl's environment rule.
    static func setting(for url: URL, in configuration: URLSessionConfiguration) -> String? {
        guard let dictionary = configuration.connectionProxyDictionary else { return nil }
        let prefix = url.scheme?.equalsIgnoringASCIICase("https") == true ? "HTTPS" : "HTTP"
        guard number(dictionary[prefix + "Enable"]) == 1, let host = dictionary[prefix + "Proxy"] as? String,
            isHostName(host)
        else { return "" }
        let port = number(dictionary[prefix + "Port"]).flatMap { (1...65_535).contains($0) ? $0 : nil }
        return "http://" + host + (port.map { ":\($0)" } ?? "")
    }

    /// An integer given as a number or as its text.
    private static func number(_ value: Any?) -> Int? {
        if let value = value as? Int { return value }
        if let value = value as? NSNumber { return value.intValue }
        return (value as? String).flatMap { Int($0) }
    }

    /// Whether `host` is a bare host name or address, which cannot smuggle a scheme, credentials, a port or a path
    /// into the proxy's URL.
    private static func isHostName(_ host: String) -> Bool {
        !host.isEmpty && host.utf8.count <= 253
            && host.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "[")
                    || byte == UInt8(ascii: "]")
            }
    }
}
#endif
