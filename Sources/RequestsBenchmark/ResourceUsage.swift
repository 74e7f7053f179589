#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
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

    /// User and system CPU time of the whole process so far, in microseconds, apart.
    static func userAndSystemMicroseconds() -> (user: Double, system: Double) {
        var usage = rusage()
        #if canImport(Glibc)
        let who = __rusage_who_t(RUSAGE_SELF.rawValue)
        #else
        let who = RUSAGE_SELF
        #endif
        guard getrusage(who, &usage) == 0 else { return (.nan, .nan) }
        func micros(_ time: timeval) -> Double {
            Double(time.tv_sec) * 1_000_000 + Double(time.tv_usec)
        }
        return (micros(usage.ru_utime), micros(usage.ru_stime))
    }

    /// A monotonic clock in seconds.
    static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1_000_000_000
    }

    /// The resident set size in bytes: on Linux the second field of `/proc/self/statm`, on Darwin `ri_resident_size`
    /// of `proc_pid_rusage`; `nil` where it cannot be read.
    static func residentBytes() -> Int? {
        #if canImport(Darwin)
        // proc_pid_rusage rather than task_info(mach_task_self_, MACH_TASK_BASIC_INFO, …): in Swift 6 mode, reading
        // the C global `mach_task_self_` is an error ("not concurrency-safe") with SDKs that do not yet mark it
        // nonisolated(unsafe) (the macOS 15.2 SDK of Xcode 16.2, for one), and proc_pid_rusage needs no task port.
        var info = rusage_info_v0()
        let status = withUnsafeMutablePointer(to: &info) { pointer in
            pointer.withMemoryRebound(to: rusage_info_t?.self, capacity: 1) { proc_pid_rusage(getpid(), RUSAGE_INFO_V0, $0) }
        }
        guard status == 0, info.ri_resident_size > 0 else { return nil }
        return Int(clamping: info.ri_resident_size)
        #else
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
        #endif
    }

    /// The peak resident set size of this process so far, in bytes: on Linux `VmHWM` of `/proc/self/status`, on
    /// Darwin `ru_maxrss` of `getrusage` (in bytes there; Linux counts it in KiB); `nil` where it cannot be read.
    static func peakResidentBytes() -> Int? {
        #if canImport(Darwin)
        var usage = rusage()
        guard getrusage(RUSAGE_SELF, &usage) == 0, usage.ru_maxrss > 0 else { return nil }
        return Int(usage.ru_maxrss)
        #else
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return nil }
        return kilobytes * 1024
        #endif
    }

    #if canImport(Darwin)
    /// Where ``residentBytes()`` comes from, for the report's notes.
    static let residentSource = "RSS from proc_pid_rusage (ri_resident_size); the heap is not trimmed (Darwin has no malloc_trim)"
    /// Where ``peakResidentBytes()`` comes from, for the report's notes.
    static let peakSource = "ru_maxrss (getrusage)"
    #else
    static let residentSource = "RSS from /proc/self/statm; the heap is trimmed (malloc_trim) before each fill"
    static let peakSource = "VmHWM"
    #endif

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

    /// `uname -a` (`/usr/bin/uname` on macOS, which has no `/bin/uname`).
    static func uname() -> String {
        run("/bin/uname", ["-a"]) ?? run("/usr/bin/uname", ["-a"]) ?? "unknown"
    }

    /// The first `model name` of `/proc/cpuinfo`; "unknown" on Darwin, which has no `/proc`.
    static func cpuModel() -> String {
        #if canImport(Darwin)
        return "unknown"
        #else
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
        #endif
    }

    /// The 1-minute load average: from `getloadavg` on Darwin, else from `/proc/loadavg`.
    static func loadAverage() -> String {
        #if canImport(Darwin)
        var averages = [Double](repeating: 0, count: 1)
        guard getloadavg(&averages, 1) == 1 else { return "unknown" }
        return String(format: "%.2f", averages[0])
        #else
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "unknown" }
        return text.split(separator: " ").first.map(String.init) ?? "unknown"
        #endif
    }

    /// The physical memory in GiB: `ProcessInfo.physicalMemory` on Darwin, else `MemTotal` of `/proc/meminfo`.
    static func memoryTotal() -> String {
        #if canImport(Darwin)
        return String(format: "%.1f GiB", Double(ProcessInfo.processInfo.physicalMemory) / 1024 / 1024 / 1024)
        #else
        guard let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("MemTotal:") {
            let fields = line.split(separator: " ")
            if fields.count >= 2, let kib = Double(fields[1]) {
                return String(format: "%.1f GiB", kib / 1024 / 1024)
            }
        }
        return "unknown"
        #endif
    }

    /// The first line of `swift --version`, or what the compiler says about itself at build time.
    static func swiftVersion() -> String {
        if let output = run("/usr/bin/env", ["swift", "--version"]),
            let line = output.split(separator: "\n").first(where: { $0.contains("Swift version") })
        {
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
        try? runReportingFailure(executable, arguments, includeStandardError: includeStandardError).get()
    }

    /// A command that failed: its exit status and what it wrote on standard error.
    struct CommandFailure: Error {
        let reason: String
    }

    /// Runs a short command and returns its standard output, or why it failed: its standard error, or its status.
    static func runReportingFailure(_ executable: String, _ arguments: [String], includeStandardError: Bool = false) -> Result<String, CommandFailure> {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        // Standard error goes to a file, not a second pipe, so that a child writing much to both cannot block.
        let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("bench-stderr-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: errorFile) }
        let errors = FileManager.default.createFile(atPath: errorFile.path, contents: nil) ? try? FileHandle(forWritingTo: errorFile) : nil
        process.standardError = includeStandardError ? pipe : (errors ?? FileHandle.nullDevice)
        do {
            try process.run()
        } catch {
            return .failure(CommandFailure(reason: "could not run \(executable): \(error)"))
        }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        try? errors?.close()
        guard process.terminationStatus == 0 else {
            let written = (try? String(contentsOf: errorFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            return .failure(CommandFailure(reason: written.isEmpty ? "exit status \(process.terminationStatus)" : written))
        }
        return .success(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

/// The median of `values` (the mean of the middle two for an even count); `nan` when empty.
func median(_ values: [Double]) -> Double {
    let sorted = values.filter { !$0.isNaN }.sorted()
    guard !sorted.isEmpty else { return .nan }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
#endif
