import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Process-wide CPU time, resident memory and wall-clock time, plus a description of the machine.
enum ResourceUsage {
    /// User + system CPU time of the whole process so far, in microseconds (`getrusage(RUSAGE_SELF)`).
    static func cpuMicroseconds() -> Double {
        usage().cpuMicroseconds
    }

    /// CPU time in microseconds and context switches (voluntary + involuntary) of the whole process so far.
    static func usage() -> (cpuMicroseconds: Double, contextSwitches: Int) {
        var usage = rusage()
        #if canImport(Glibc)
        let who = __rusage_who_t(RUSAGE_SELF.rawValue)
        #else
        let who = RUSAGE_SELF
        #endif
        guard getrusage(who, &usage) == 0 else { return (.nan, 0) }
        func micros(_ time: timeval) -> Double {
            Double(time.tv_sec) * 1_000_000 + Double(time.tv_usec)
        }
        return (micros(usage.ru_utime) + micros(usage.ru_stime), Int(usage.ru_nvcsw) + Int(usage.ru_nivcsw))
    }

    /// A monotonic clock in seconds.
    static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1_000_000_000
    }

    /// The resident set size in bytes, from the second field of `/proc/self/statm`; `nil` where it is missing.
    static func residentBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// Returns freed heap memory to the operating system, so the next RSS delta starts from a clean heap.
    static func trimHeap() {
        #if canImport(Glibc)
        // glibc's malloc_trim is not in the Glibc module; look it up at run time.
        typealias MallocTrim = @convention(c) (Int) -> Int32
        if let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "malloc_trim") {
            _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
        }
        #endif
    }

    // MARK: - Machine description

    /// `uname -a`.
    static func uname() -> String {
        run("/bin/uname", ["-a"]) ?? "unknown"
    }

    /// The first `model name` of `/proc/cpuinfo`.
    static func cpuModel() -> String {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
    }

    /// The 1-minute load average from `/proc/loadavg`.
    static func loadAverage() -> String {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "unknown" }
        return text.split(separator: " ").first.map(String.init) ?? "unknown"
    }

    /// `MemTotal` of `/proc/meminfo`, in GiB.
    static func memoryTotal() -> String {
        guard let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("MemTotal:") {
            let fields = line.split(separator: " ")
            if fields.count >= 2, let kib = Double(fields[1]) {
                return String(format: "%.1f GiB", kib / 1024 / 1024)
            }
        }
        return "unknown"
    }

    /// The first line of `swift --version`, or what the compiler says about itself at build time.
    static func swiftVersion() -> String {
        if let output = run("/usr/bin/env", ["swift", "--version"]),
           let line = output.split(separator: "\n").first(where: { $0.contains("Swift version") }) {
            return String(line)
        }
        #if compiler(>=6.3)
        return "compiled with Swift 6.3 or later"
        #elseif compiler(>=6.2)
        return "compiled with Swift 6.2"
        #elseif compiler(>=6.1)
        return "compiled with Swift 6.1"
        #else
        return "compiled with Swift 6.0"
        #endif
    }

    /// Runs a short command and returns its standard output, or `nil` if it could not run or failed.
    static func run(_ executable: String, _ arguments: [String], includeStandardError: Bool = false) -> String? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = includeStandardError ? pipe : FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return nil
        }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The median of `values` (the mean of the middle two for an even count); `nan` when empty.
func median(_ values: [Double]) -> Double {
    let sorted = values.filter { !$0.isNaN }.sorted()
    guard !sorted.isEmpty else { return .nan }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
