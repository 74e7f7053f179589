#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// An event for the monitors, queued so that each operation's events arrive in order.
enum MonitorEvent {
    case willSend(RequestAttempt)
    case didCreateTask(RequestAttempt, URLSessionTask)
    case didReceive(RequestAttempt, HTTPURLResponse, bodyBytes: Int, duration: TimeInterval)
    /// For the recording monitors only (see `ExchangeRecording`).
    case didExchange(RecordedExchange)
    case didFail(RequestAttempt, Error, duration: TimeInterval)
    case willAttemptAgain(RequestAttempt, ReattemptReason, delay: TimeInterval)
    case willRedirect(RequestAttempt, HTTPURLResponse, to: URLRequest)
    case cache(RequestAttempt, CacheEvent)
    case notice(RequestAttempt, RequestNotice)
    case didFinish(RequestSummary, then: @Sendable () -> Void)

    /// What runs once the monitors have seen the event: the completion, after the finish.
    var continuation: (@Sendable () -> Void)? {
        if case let .didFinish(_, continuation) = self { return continuation }
        return nil
    }

    func deliver(to monitor: any RequestEventMonitor) {
        switch self {
        case let .willSend(attempt):
            monitor.requestWillSend(attempt)
        case let .didCreateTask(attempt, task):
            monitor.requestDidCreateTask(attempt, task: task)
        case let .didReceive(attempt, response, bodyBytes, duration):
            monitor.requestDidReceive(attempt, response: response, bodyBytes: bodyBytes, duration: duration)
        case let .didExchange(exchange):
            (monitor as? any ExchangeRecording)?.requestDidExchange(exchange)
        case let .didFail(attempt, error, duration):
            monitor.requestDidFail(attempt, error: error, duration: duration)
        case let .willAttemptAgain(attempt, reason, delay):
            monitor.requestWillAttemptAgain(attempt, reason: reason, delay: delay)
        case let .willRedirect(attempt, response, request):
            monitor.requestWillRedirect(attempt, response: response, to: request)
        case let .cache(attempt, event):
            monitor.requestDidUseCache(attempt, event: event)
        case let .notice(attempt, notice):
            monitor.requestDidNotice(attempt, notice: notice)
        case let .didFinish(summary, _):
            monitor.requestDidFinish(summary)
        }
    }
}

extension NetworkRequestOperation {
    /// Hands `event` to the monitors, after the events before it. Attempt events that come after the outcome
    /// (from an attempt a cancellation overtook) are dropped, so ``RequestEventMonitor/requestDidFinish(_:)`` is
    /// last; the completion is scheduled only after it, by whichever thread delivers it.
    func emit(_ event: MonitorEvent) {
        let monitors: [any RequestEventMonitor]? = withLock {
            if case .didFinish = event {} else if isCompletedUnderLock { return nil }
            let monitors = policies.monitors
            guard !monitors.isEmpty else { return [] }
            run.pendingEvents.append(event)
            guard !run.isDeliveringEvents else { return nil }
            run.isDeliveringEvents = true
            return monitors
        }
        guard let monitors else { return }
        guard !monitors.isEmpty else {
            event.continuation?()
            return
        }
        while let event: MonitorEvent = withLock({
            guard !run.pendingEvents.isEmpty else {
                run.isDeliveringEvents = false
                return nil
            }
            return run.pendingEvents.removeFirst()
        }) {
            for monitor in monitors {
                event.deliver(to: monitor)
            }
            event.continuation?()
        }
    }
}
