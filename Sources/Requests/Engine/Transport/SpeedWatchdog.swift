#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Watches the transfers that have a minimum speed, with one timer for all of them that runs only while there
/// are any: a request costs an insertion and a removal, not a timer of its own.
final class TransferWatchdog: @unchecked Sendable {
    static let shared = TransferWatchdog()

    private let lock = NSLock()
    private var watched: [ObjectIdentifier: TransferSink] = [:]
    private var timer: DispatchSourceTimer?

    func watch(_ transfer: TransferSink) {
        lock.withLock {
            watched[ObjectIdentifier(transfer)] = transfer
            guard timer == nil else { return }
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
            timer.setEventHandler { [weak self] in self?.tick() }
            timer.resume()
            self.timer = timer
        }
    }

    /// Stops watching `transfer`, whose attempt ended: the set stays as small as the transfers in flight. The timer
    /// stops at its next tick if nothing is left (so back-to-back requests do not make a timer each).
    func unwatch(_ transfer: TransferSink) {
        lock.withLock { _ = watched.removeValue(forKey: ObjectIdentifier(transfer)) }
    }

    private func tick() {
        let transfers = lock.withLock { Array(watched.values) }
        let now = DispatchTime.now()
        let done = transfers.filter { !$0.checkSpeed(now: now) }.map(ObjectIdentifier.init)
        lock.withLock {
            done.forEach { watched[$0] = nil }
            if watched.isEmpty { timer.take()?.cancel() }
        }
    }
}
