#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One libcurl multi handle and the thread that drives it. The thread sleeps in `curl_multi_poll` until a socket is
/// ready, libcurl's own timer is due, or a command arrives (`curl_multi_wakeup`): waiting costs no CPU. Everything
/// that touches a handle (adding, removing, pausing, the callbacks) happens on that thread; other threads only post
/// commands. A cancel removes the handle on the loop's next turn, which the command itself starts.
final class CurlLoop: @unchecked Sendable {
    private enum Command {
        case add(CurlTransfer)
        case cancel(CurlTransfer, URLError.Code)
        case resume(CurlTransfer)
    }

    private let curl: LibCurl
    private let multi: LibCurl.Handle
    private let lock = NSLock()
    /// Under `lock`.
    private var inbox: [Command] = []
    private var stopping = false
    private let stopped = DispatchSemaphore(value: 0)
    /// The loop thread's own: the transfers whose handles are in the multi handle.
    private var running: [LibCurl.Handle: CurlTransfer] = [:]
    /// The loop thread's own: easy handles of ended transfers, reset, for the next ones (libcurl's advice; an init
    /// and a cleanup less per request). At most ``maximumSpareHandles``.
    private var spareHandles: [LibCurl.Handle] = []
    private static let maximumSpareHandles = 16

    /// A loop with its own thread, or `nil` when libcurl cannot be loaded.
    init?(curl: LibCurl? = LibCurl.shared, maximumConnectionsPerHost: Int = 0, name: String = "Requests.CurlLoop") {
        guard let curl, let multi = curl.multiInit() else { return nil }
        self.curl = curl
        self.multi = multi
        if maximumConnectionsPerHost > 0 {
            _ = curl.multiSetLong(multi, LibCurl.Code.maximumHostConnections, maximumConnectionsPerHost)
        }
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    /// Starts `transfer`; its client hears of it on the loop's thread.
    func add(_ transfer: CurlTransfer) { post(.add(transfer)) }

    /// Ends `transfer` with `code` at once (`.cancelled` by default), unless it has already ended.
    func cancel(_ transfer: CurlTransfer, code: URLError.Code = .cancelled) {
        transfer.requestStop(code)
        post(.cancel(transfer, code))
    }

    /// Delivers a paused transfer's body again (see ``CurlTransferClient/curlTransfer(_:didReceive:)``).
    func resume(_ transfer: CurlTransfer) { post(.resume(transfer)) }

    /// Ends every transfer (cancelled), stops the thread and frees the multi handle; waits for the thread.
    func stop() {
        let first: Bool = lock.withLock {
            defer { stopping = true }
            return !stopping
        }
        guard first else { return }
        _ = curl.multiWakeup(multi)
        stopped.wait()
    }

    private func post(_ command: Command) {
        let accepted: Bool = lock.withLock {
            guard !stopping else { return false }
            inbox.append(command)
            return true
        }
        guard accepted else {
            if case let .add(transfer) = command { transfer.finish(.cancelled, curl: curl) }
            return
        }
        _ = curl.multiWakeup(multi)
    }

    private func run() {
        var active: Int32 = 0
        while true {
            let (commands, ending) = lock.withLock { () -> ([Command], Bool) in
                defer { inbox.removeAll(keepingCapacity: true) }
                return (inbox, stopping)
            }
            commands.forEach(handle)
            if ending { break }
            _ = curl.multiPerform(multi, &active)
            collectFinished()
            // Sleeps until a socket is ready, libcurl's timer is due (it shortens the wait to it), a transfer's idle
            // timeout, or a wakeup.
            _ = curl.multiPoll(multi, nil, 0, endIdleTransfers(), nil)
        }
        // `post` refuses commands once `stopping` is set, and the last turn took every command posted before.
        for transfer in running.values { remove(transfer, ending: .cancelled) }
        _ = curl.multiCleanup(multi)
        spareHandles.forEach(curl.easyCleanup)
        spareHandles = []
        stopped.signal()
    }

    private func handle(_ command: Command) {
        switch command {
        case let .add(transfer):
            guard let easy = transfer.start(curl: curl, loop: self) else { return }
            guard curl.multiAdd(multi, easy) == 0 else {
                return transfer.finish(.cannotLoadFromNetwork, curl: curl)
            }
            running[easy] = transfer
        case let .cancel(transfer, code):
            guard let easy = transfer.easy, running[easy] === transfer else { return }
            remove(transfer, ending: code)
        case let .resume(transfer):
            guard let easy = transfer.easy, running[easy] === transfer, transfer.isPaused else { return }
            transfer.willResume()
            _ = curl.easyPause(easy, LibCurl.Code.pauseNone)
        }
    }

    /// Ends the transfers that moved no byte for their timeout (`timedOut`); returns the milliseconds until the next
    /// one would time out (at most a minute).
    private func endIdleTransfers() -> Int32 {
        let now = DispatchTime.now()
        var next = now + 60
        for transfer in running.values where !transfer.isPaused {
            let deadline = transfer.idleDeadline
            if deadline <= now {
                remove(transfer, ending: .timedOut)
            } else if deadline < next {
                next = deadline
            }
        }
        let milliseconds = (next.uptimeNanoseconds - now.uptimeNanoseconds + 999_999) / 1_000_000
        return Int32(clamping: milliseconds)
    }

    /// Removes the transfers libcurl has finished, each with its result.
    private func collectFinished() {
        var queued: Int32 = 0
        while let message = curl.multiInfoRead(multi, &queued) {
            // `CURLMsg`: `CURLMSG msg` (an int, padded to 8 bytes), `CURL *easy_handle`, then a union whose
            // `CURLcode result` is the int at its start.
            guard message.load(as: Int32.self) == LibCurl.Code.messageDone,
                let easy = message.load(fromByteOffset: 8, as: LibCurl.Handle?.self),
                let transfer = running[easy]
            else { continue }
            let result = message.load(fromByteOffset: 16, as: Int32.self)
            running[easy] = nil
            _ = curl.multiRemove(multi, easy)
            transfer.finish(result: result, curl: curl)
        }
    }

    /// An easy handle for a transfer about to start (the loop's thread): a spare one, or a new one.
    func takeHandle() -> LibCurl.Handle? {
        spareHandles.popLast() ?? curl.easyInit()
    }

    /// Takes back the handle of a transfer that has ended and left the multi handle (the loop's thread).
    func giveBack(_ easy: LibCurl.Handle) {
        guard spareHandles.count < Self.maximumSpareHandles else { return curl.easyCleanup(easy) }
        curl.easyReset(easy)
        spareHandles.append(easy)
    }

    private func remove(_ transfer: CurlTransfer, ending code: URLError.Code) {
        guard let easy = transfer.easy else { return }
        running[easy] = nil
        _ = curl.multiRemove(multi, easy)
        transfer.finish(code, curl: curl)
    }
}
#endif
