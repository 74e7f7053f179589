#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `SOCK_STREAM` as `socket(_:_:_:)` takes it: an enum case in Glibc, a plain `Int32` in Darwin.
#if canImport(Glibc)
private let streamSocketType = Int32(SOCK_STREAM.rawValue)
#else
private let streamSocketType = SOCK_STREAM
#endif

/// An nginx started for the benchmark: one worker, keep-alive, on 127.0.0.1, with its config, pid file
/// and logs in a temporary directory. ``stop()`` ends it by its process id and removes the directory.
final class NginxServer {
    /// The body served at `/json`: the same recipe the embedded server's `/json` returns.
    static let jsonBody = #"{"name":"Pancakes","ingredients":["flour","milk","eggs"],"steps":["mix","fry"]}"#

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The pid of the running nginx, for a signal handler to stop it; 0 when none runs.
    nonisolated(unsafe) static var runningPID: pid_t = 0

    let executable: String
    let port: UInt16
    let baseURL: URL
    /// The base URLs of the extra servers asked for with `postServers`, in that order: each on a port of its own,
    /// with its own `keepalive_requests`, answering `POST /post` (the body read and discarded) with `{"ok":true}`.
    let postBaseURLs: [URL]
    private let directory: URL
    private let process: Process

    /// `nginx` on `PATH`, else `/usr/sbin/nginx`, if either is executable.
    static func findExecutable() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map { "\($0)/nginx" } + ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts nginx and waits until it accepts connections (a few tries, in case the chosen port is taken meanwhile).
    /// `files` (name → size in bytes) are written first and served as static files at `/files/NAME`, with nginx's
    /// `ETag`, `Last-Modified` and ranges (what a resumable download needs).
    /// `jsonFiles` (name → size in bytes): JSON arrays of small objects, served as `application/json` at
    /// `/json-files/NAME`. The main server also answers `POST /post` as the extra ones do.
    /// `postServers`: the `keepalive_requests` of each extra server block (see ``postBaseURLs``).
    init(executable: String, files: [String: Int] = [:], jsonFiles: [String: Int] = [:], postServers: [Int] = []) throws {
        let launched = try Self.launch(executable: executable, files: files, jsonFiles: jsonFiles, postServers: postServers)
        self.executable = executable
        self.port = launched.port
        self.baseURL = launched.url
        self.postBaseURLs = launched.postURLs
        self.directory = launched.directory
        self.process = launched.process
    }

    private static func launch(
        executable: String, files: [String: Int], jsonFiles: [String: Int], postServers: [Int]
    ) throws -> (port: UInt16, url: URL, directory: URL, process: Process, postURLs: [URL]) {
        var lastError = Failure(description: "nginx did not start")
        for _ in 0..<3 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("requests-bench-nginx-\(UUID().uuidString)")
            do {
                let port = try freePort()
                let postPorts = try postServers.map { _ in try freePort() }
                guard let url = URL(string: "http://127.0.0.1:\(port)"), Set(postPorts + [port]).count == postPorts.count + 1 else {
                    throw Failure(description: "bad or repeated port \(port) \(postPorts)")
                }
                let postURLs = postPorts.compactMap { URL(string: "http://127.0.0.1:\($0)") }
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                try writeFiles(files, into: directory.appendingPathComponent("www/files"))
                try writeJSONFiles(jsonFiles, into: directory.appendingPathComponent("www/json-files"))
                try config(directory: directory.path, port: port, postServers: Array(zip(postPorts, postServers)))
                    .write(to: directory.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
                let process = Process()
                process.executableURL = URL(fileURLWithPath: executable)
                process.arguments = [
                    "-p", directory.path + "/", "-c", directory.path + "/nginx.conf",
                    "-e", directory.path + "/error.log",
                ]
                process.standardOutput = FileHandle.nullDevice
                process.standardError = FileHandle.nullDevice
                try process.run()
                if waitUntilListening(port: port, process: process), postPorts.allSatisfy({ waitUntilListening(port: $0, process: process) }) {
                    return (port, url, directory, process, postURLs)
                }
                if process.isRunning {
                    kill(process.processIdentifier, SIGTERM)
                    process.waitUntilExit()
                }
                let log = (try? String(contentsOf: directory.appendingPathComponent("error.log"), encoding: .utf8)) ?? ""
                lastError = Failure(description: "nginx did not start: \(log.trimmingCharacters(in: .whitespacesAndNewlines))")
            } catch let error as Failure {
                lastError = error
            } catch {
                lastError = Failure(description: "nginx did not start: \(error)")
            }
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastError
    }

    var processIdentifier: pid_t { process.processIdentifier }

    /// Sends SIGTERM to the nginx master (by its pid), waits for it, and removes the temporary directory.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// The body `POST /post` answers.
    static let postAnswer = #"{"ok":true}"#

    /// A server block on `port` with `keepalive_requests` `keepalive`, answering `POST /post`: `return` reads and
    /// discards the request body before it answers.
    private static func postServer(port: UInt16, keepalive: Int) -> String {
        """
            server {
                listen 127.0.0.1:\(port);
                keepalive_requests \(keepalive);
                location /post {
                    default_type application/json;
                    return 200 '\(postAnswer)';
                }
            }
        """
    }

    private static func config(directory: String, port: UInt16, postServers: [(port: UInt16, keepalive: Int)]) -> String {
        """
        daemon off;
        master_process on;
        worker_processes 1;
        pid \(directory)/nginx.pid;
        error_log \(directory)/error.log warn;
        events { worker_connections 1024; }
        http {
            access_log off;
            client_body_temp_path \(directory)/client_body;
            proxy_temp_path \(directory)/proxy;
            fastcgi_temp_path \(directory)/fastcgi;
            uwsgi_temp_path \(directory)/uwsgi;
            scgi_temp_path \(directory)/scgi;
            keepalive_timeout 65s;
            keepalive_requests 1000000;
            tcp_nodelay on;
            server {
                listen 127.0.0.1:\(port);
                location /json {
                    default_type application/json;
                    return 200 '\(jsonBody)';
                }
                location /files/ {
                    root \(directory)/www;
                }
                location /json-files/ {
                    root \(directory)/www;
                    default_type application/json;
                }
                location /post {
                    default_type application/json;
                    return 200 '\(postAnswer)';
                }
            }
        \(postServers.map { postServer(port: $0.port, keepalive: $0.keepalive) }.joined(separator: "\n"))
        }

        """
    }

    /// Writes each file a MiB at a time (a repeating byte pattern), so that a large one does not raise the peak.
    private static func writeFiles(_ files: [String: Int], into folder: URL) throws {
        guard !files.isEmpty else { return }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        for (name, size) in files {
            let file = folder.appendingPathComponent(name)
            guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
                throw Failure(description: "cannot create \(file.path)")
            }
            let handle = try FileHandle(forWritingTo: file)
            defer { try? handle.close() }
            var left = size
            while left > 0 {
                let piece = min(left, block.count)
                try handle.write(contentsOf: block.prefix(piece))
                left -= piece
            }
        }
    }

    /// Writes each file as a JSON array of small objects, `bytes` long (padded with spaces after the array).
    private static func writeJSONFiles(_ files: [String: Int], into folder: URL) throws {
        guard !files.isEmpty else { return }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for (name, size) in files {
            try Data(jsonArray(bytes: size).utf8).write(to: folder.appendingPathComponent(name))
        }
    }

    /// `[{"id":0,"name":"item 0","price":1.25,"tags":["a","b"]},…]`, as many objects as fit in `bytes`, then spaces
    /// up to `bytes`.
    static func jsonArray(bytes: Int) -> String {
        var text = "["
        var index = 0
        while true {
            let item = (index == 0 ? "" : ",") + #"{"id":\#(index),"name":"item \#(index)","price":\#(index % 100).25,"tags":["a","b"]}"#
            guard text.utf8.count + item.utf8.count + 1 <= bytes else { break }
            text += item
            index += 1
        }
        text += "]"
        return text + String(repeating: " ", count: max(0, bytes - text.utf8.count))
    }

    /// Asks the kernel for a free port on 127.0.0.1 (bind to port 0, read it, close).
    private static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, streamSocketType, 0)
        guard fd >= 0 else { throw Failure(description: "socket failed") }
        defer { close(fd) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw Failure(description: "bind failed") }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw Failure(description: "getsockname failed") }
        return UInt16(bigEndian: address.sin_port)
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        return address
    }

    /// Tries to connect every 20 ms for up to 5 s; `false` if nginx exits or never listens.
    private static func waitUntilListening(port: UInt16, process: Process) -> Bool {
        let deadline = ResourceUsage.now() + 5
        while ResourceUsage.now() < deadline {
            guard process.isRunning else { return false }
            let fd = socket(AF_INET, streamSocketType, 0)
            if fd >= 0 {
                var address = loopback(port: port)
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
                close(fd)
                if connected == 0 { return process.isRunning }
            }
            usleep(20_000)
        }
        return false
    }
}
#endif
