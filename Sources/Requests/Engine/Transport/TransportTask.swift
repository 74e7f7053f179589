#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// One attempt's transfer as the engine starts and stops it, whichever transport carries it: a `URLSessionTask`, or
/// on Linux a libcurl transfer (`CurlTask`, see `Transport`). Either way its events go to the attempt's
/// `TransferSink`, and it is resumed once.
protocol TransportTask: AnyObject {
    func resume()
    /// Stops the transfer; its sink may still hear of its end, which the sink then ignores. `nil`: the transport's
    /// own delay (see `TaskCancellation`).
    func stop(after delay: TimeInterval?)
    /// The last response whose head arrived, if any.
    var response: URLResponse? { get }
    /// The task, for ``RequestEventMonitor/requestDidCreateTask(_:task:)``; `nil` for a transfer that has none.
    var sessionTask: URLSessionTask? { get }
    /// Goes on receiving after the sink held a piece back (``TransferSink/offer(_:)``); a transport that never pauses
    /// has nothing to do.
    func resumeReceiving()
}

extension URLSessionTask: TransportTask {
    func stop(after delay: TimeInterval?) {
        TaskCancellation.cancel(self, after: delay ?? TaskCancellation.delay)
    }

    var sessionTask: URLSessionTask? { self }

    /// URLSession hands every piece over as it comes (``TransferSink/didReceive(_:)``): it never pauses.
    func resumeReceiving() {}
}
