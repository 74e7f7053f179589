// TaskRegistry cancel/fail race probe.
// One process = one in-process loopback fault server + one client that runs
// `--tasks` data tasks (completion-handler API, ephemeral session) with at most
// `--inflight` outstanding, and cancels every task from another thread at a
// random delay after resume().
//
//   variant A: task.cancel() at delay d            (d uniform in [min,max] us)
//   variant B: "user cancel" at d, task.cancel() at d + --post-ms (default 50 ms)
//   variant none: never cancel (calibration: measures resume->completion latency)
//
// Faults served on 127.0.0.1:
//   refused : port bound then closed, nobody listening -> ECONNREFUSED
//   rst     : accept, SO_LINGER{1,0}, close without reading  -> RST before headers
//   fin     : accept, read request, close()                  -> FIN before headers (empty reply)
//   midbody : accept, read request, send headers (Content-Length 100000) + 1000 bytes, close
//   late    : accept, read request, RST after 40..60 ms (random)
//
// Output: "PROGRESS <cancels issued>" lines (flushed) and a final "RESULT ..." line.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

setvbuf(stdout, nil, _IOLBF, 0)

// ---------- args ----------
var fault = "refused"
var variant = "A"
var totalTasks = 2000
var inflight = 32
var minDelayUs = 0
var maxDelayUs = 5000
var postMs = 50
var nSessions = 1
var timeoutS = 10.0
do {
    var it = CommandLine.arguments.dropFirst().makeIterator()
    while let a = it.next() {
        let v = it.next() ?? ""
        switch a {
        case "--fault": fault = v
        case "--variant": variant = v
        case "--tasks": totalTasks = Int(v)!
        case "--inflight": inflight = Int(v)!
        case "--min-us": minDelayUs = Int(v)!
        case "--max-us": maxDelayUs = Int(v)!
        case "--post-ms": postMs = Int(v)!
        case "--sessions": nSessions = Int(v)!
        case "--timeout": timeoutS = Double(v)!
        default: fatalError("unknown arg \(a)")
        }
    }
}

@inline(__always) func nowNs() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

// ---------- server ----------
func makeSocket() -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    precondition(fd >= 0)
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = 0
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let r = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    precondition(r == 0, "bind failed")
    return fd
}
func portOf(_ fd: Int32) -> UInt16 {
    var addr = sockaddr_in()
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
    }
    return UInt16(bigEndian: addr.sin_port)
}
func rst(_ fd: Int32) {
    var l = linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
    close(fd)
}
func readRequest(_ fd: Int32) {
    var buf = [UInt8](repeating: 0, count: 8192)
    var got = [UInt8]()
    for _ in 0..<20 {
        let n = recv(fd, &buf, buf.count, 0)
        if n <= 0 { return }
        got.append(contentsOf: buf[0..<n])
        if got.count >= 4 {
            let s = got.count
            for i in 0...(s - 4) where got[i] == 13 && got[i+1] == 10 && got[i+2] == 13 && got[i+3] == 10 { return }
        }
    }
}
func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
    var off = 0
    while off < bytes.count {
        let n = bytes[off...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if n <= 0 { return }
        off += n
    }
}

let port: UInt16
if fault == "refused" {
    let fd = makeSocket()
    port = portOf(fd)
    close(fd)   // nobody listens on this port any more
} else {
    let lfd = makeSocket()
    precondition(listen(lfd, 4096) == 0)
    port = portOf(lfd)
    let body = [UInt8](repeating: 120, count: 1000)
    let head = Array("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n".utf8)
    let f = fault
    let t = Thread {
        while true {
            let c = accept(lfd, nil, nil)
            if c < 0 { continue }
            switch f {
            case "rst":
                rst(c)
            case "fin":
                readRequest(c); close(c)
            case "midbody":
                readRequest(c); writeAll(c, head + body); close(c)
            case "late":
                readRequest(c)
                let ms = Int.random(in: 40...60)
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) { rst(c) }
            default:
                fatalError("unknown fault \(f)")
            }
        }
    }
    t.start()
}
let url = URL(string: "http://127.0.0.1:\(port)/probe")!

// ---------- client ----------
let cfg = URLSessionConfiguration.ephemeral
cfg.timeoutIntervalForRequest = timeoutS
cfg.httpMaximumConnectionsPerHost = max(inflight, 6)
let sessions = (0..<nSessions).map { _ in URLSession(configuration: cfg) }

final class Stats {
    let lock = NSLock()
    var cancelsIssued = 0        // task.cancel() calls made
    var stateAtCancel = [Int](repeating: 0, count: 4) // running, suspended, canceling, completed (as read just before cancel())
    var completions = 0
    var errCancelled = 0         // completion got NSURLErrorCancelled -> cancel won
    var errOther = [Int: Int]()  // completion got another error code
    var success = 0
    var overlap = 0              // cancel() called while state==running, but completion carried the fault error
    var lat = [Double]()         // resume -> completion (us), calibration
}
let stats = Stats()

final class Rec {
    var tResume: UInt64 = 0
    var cancelSawRunning = false
    var done = false
    var errCode: Int? = nil
}

let sem = DispatchSemaphore(value: inflight)
let doneGroup = DispatchGroup()
let cancelGroup = DispatchGroup()
let cancelQ = DispatchQueue(label: "cancellers", attributes: .concurrent)

func doCancel(_ task: URLSessionDataTask, _ rec: Rec) {
    let st = task.state
    stats.lock.lock()
    if st == .running { rec.cancelSawRunning = true }
    stats.stateAtCancel[st.rawValue] += 1
    stats.cancelsIssued += 1
    let n = stats.cancelsIssued
    let live = stats.stateAtCancel[0] + stats.stateAtCancel[1]
    stats.lock.unlock()
    task.cancel()
    if n % 25 == 0 { print("PROGRESS \(n) live=\(live)") }
}

let t0 = nowNs()
for i in 0..<totalTasks {
    sem.wait()
    let rec = Rec()
    doneGroup.enter()
    let s = sessions[i % nSessions]
    var req = URLRequest(url: url)
    req.timeoutInterval = timeoutS
    let task = s.dataTask(with: req) { data, resp, err in
        let t = nowNs()
        stats.lock.lock()
        rec.done = true
        stats.completions += 1
        if variant == "none" { stats.lat.append(Double(t - rec.tResume) / 1000) }
        if let e = err as NSError? {
            if e.code == NSURLErrorCancelled { stats.errCancelled += 1 }
            else {
                stats.errOther[e.code, default: 0] += 1
                if rec.cancelSawRunning { stats.overlap += 1 }
            }
        } else { stats.success += 1 }
        stats.lock.unlock()
        sem.signal()
        doneGroup.leave()
    }
    rec.tResume = nowNs()
    task.resume()
    if variant != "none" {
        let d = Int.random(in: minDelayUs...maxDelayUs)
        let extraUs = variant == "B" ? postMs * 1000 : 0
        cancelGroup.enter()
        cancelQ.asyncAfter(deadline: .now() + .microseconds(d + extraUs)) {
            doCancel(task, rec)
            cancelGroup.leave()
        }
    }
}
let r1 = doneGroup.wait(timeout: .now() + 120)
let r2 = cancelGroup.wait(timeout: .now() + 120)
usleep(300_000) // let the async part of the last cancel() calls run
let elapsed = Double(nowNs() - t0) / 1e9

stats.lock.lock()
var latStr = ""
if !stats.lat.isEmpty {
    let l = stats.lat.sorted()
    func p(_ q: Double) -> Int { Int(l[min(l.count - 1, Int(Double(l.count) * q))]) }
    latStr = " lat_us_p10=\(p(0.1)) p50=\(p(0.5)) p90=\(p(0.9)) p99=\(p(0.99)) max=\(Int(l.last!))"
}
let errs = stats.errOther.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
print("RESULT fault=\(fault) variant=\(variant) tasks=\(totalTasks) cancels=\(stats.cancelsIssued) completions=\(stats.completions) cancelWon=\(stats.errCancelled) faultErr=[\(errs)] overlap=\(stats.overlap) success=\(stats.success) stateAtCancel(run,susp,cancing,compl)=\(stats.stateAtCancel) waitOK=\(r1 == .success && r2 == .success) secs=\(String(format: "%.2f", elapsed))\(latStr)")
stats.lock.unlock()
exit(0)
