import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One connection's requests, in turn, under the server's ``ConnectionPolicy``.
extension ServerCore {
    func serve(_ fd: Int32, connection: Int) {
        defer {
            withLock { _ = openFDs.remove(fd) }
            Sys.close(fd)
        }
        let reader = RequestReader(fd: fd)
        var index = 0
        while true {
            index += 1
            let policy = withLock { connectionPolicy }
            if index > 1, let idle = policy?.closeAfterIdleMilliseconds {
                // Idle too long (or the client closed it): close, as a load balancer does.
                guard reader.waitForBytes(milliseconds: max(0, idle)) else { return shutdownOutput(fd) }
            }
            let fault = policy.flatMap { claimFault($0, index: index) }
            switch fault {
            case .disconnectAtStart?:
                guard reader.waitForBytes(milliseconds: -1) else { return }
                reader.discardAvailable()
                recordUnread(connection: connection, index: index, fault: .disconnectAtStart)
                return shutdownOutput(fd)
            case .stallAtStart?:
                recordUnread(connection: connection, index: index, fault: .stallAtStart)
                _ = reader.wait(milliseconds: -1)
                return
            default:
                break
            }

            let (outcome, arrival) = read(from: reader, connection: connection, index: index, recording: policy != nil, fault: fault)
            switch outcome {
            case .closed:
                return
            case .stoppedInBody:
                return  // The rest of the body is left unread: the close usually resets the connection.
            case .reject(let status):
                let reason = LoopbackResponse.reasonPhrase(for: status).lowercased()
                let response = LoopbackResponse.json(#"{"error":"\#(reason)"}"#, status: status)
                if send(response, on: fd, keepAlive: false, isHead: false) { lingeringClose(fd) }
                return
            case .request(let request, let keepAlive, let isHead):
                let fault = fault ?? requestFault(for: request, policy: policy, arrival: arrival)
                switch fault {
                case .disconnectAfterRequest?, .disconnectDuringRequestBody?:
                    return shutdownOutput(fd)
                case .noResponse?:
                    _ = reader.wait(milliseconds: -1)
                    return
                case .reset?:
                    Self.resetOnClose(fd)
                    return
                case .disconnectDuringResponseBody?:
                    sendHalfAnswer(to: request, on: fd)
                    return shutdownOutput(fd)
                default:
                    break
                }
                if let arrival { update(arrival) { $0.answered = true } }
                let keepOpen = respond(to: request, reader: reader, keepAlive: keepAlive || policy?.ignoresConnectionClose == true, isHead: isHead)
                guard keepOpen else { return }
                switch fault {
                case .shutdownInputAtEnd?:
                    _ = shutdown(fd, Int32(SHUT_RD))
                    return
                case .shutdownOutputAtEnd?:
                    shutdownOutput(fd)
                    // Read on, recording, and never answer.
                    var next = index + 1
                    while case .request = read(from: reader, connection: connection, index: next, recording: policy != nil, fault: nil).0 {
                        next += 1
                    }
                    return
                default:
                    break
                }
                if let limit = policy?.closeAfterRequests, index >= limit { return shutdownOutput(fd) }
            }
        }
    }

    private func shutdownOutput(_ fd: Int32) {
        _ = shutdown(fd, Sys.shutWR)
    }

    /// The policy's fault if it applies to the `index`-th request of a connection, counting it against `times`.
    private func claimFault(_ policy: ConnectionPolicy, index: Int) -> ConnectionFault? {
        guard let fault = policy.fault, index == policy.onRequest else { return nil }
        return withLock {
            if let times = policy.times, connectionFaultsApplied >= times { return nil }
            connectionFaultsApplied += 1
            return fault
        }
    }

    /// The policy's ``ConnectionPolicy/requestFault`` for a request that was read whole, recorded in its arrival.
    private func requestFault(for request: LoopbackRequest, policy: ConnectionPolicy?, arrival: Int?) -> ConnectionFault? {
        guard let fault = policy?.requestFault?.fault(for: request) else { return nil }
        if let arrival { update(arrival) { $0.fault = fault } }
        return fault
    }

    /// Reads one request, recording its arrival when `recording`: its head as soon as it is parsed, then how much of
    /// its body came. Returns the outcome and the arrival's place in `arrivals`.
    private func read(
        from reader: RequestReader, connection: Int, index: Int, recording: Bool, fault: ConnectionFault?
    ) -> (ReadOutcome, Int?) {
        var arrival: Int?
        let outcome = reader.readRequest(
            sendContinue: { Sys.sendAll(reader.fd, Data("HTTP/1.1 100 Continue\r\n\r\n".utf8)) },
            onHead: { head, contentLength, _ in
                guard recording else { return }
                let tag = head.headers["x-request-tag"] ?? head.query["tag"]
                let record = LoopbackArrival(
                    connection: connection, index: index, method: head.method, path: head.path, tag: tag,
                    idempotencyKey: head.headers["idempotency-key"], contentLength: contentLength, body: .pending, bodyBytes: 0, fault: fault,
                    answered: false)
                arrival = withLock {
                    arrivals.append(record)
                    return arrivals.count - 1
                }
            },
            stopInBody: fault == .disconnectDuringRequestBody
        )
        if let arrival {
            switch outcome {
            case .request(let request, _, _):
                update(arrival) {
                    $0.body = .complete
                    $0.bodyBytes = request.sinkDigest?.count ?? request.body.count
                }
            case .stoppedInBody(let received): update(arrival) { $0.body = .stoppedByServer(received: received) }
            case .closed: update(arrival) { $0.body = .cut(received: reader.cutBodyBytes) }
            case .reject: update(arrival) { $0.body = .cut(received: 0) }
            }
        }
        return (outcome, arrival)
    }

    private func update(_ arrival: Int, _ change: (inout LoopbackArrival) -> Void) {
        withLock {
            guard arrivals.indices.contains(arrival) else { return }
            change(&arrivals[arrival])
        }
    }

    private func recordUnread(connection: Int, index: Int, fault: ConnectionFault) {
        let record = LoopbackArrival(
            connection: connection, index: index, method: "", path: "", tag: nil, idempotencyKey: nil, contentLength: nil, body: .notRead, bodyBytes: 0,
            fault: fault, answered: false)
        withLock { arrivals.append(record) }
    }

    /// The route's answer cut in the middle of its body: the head with the full `Content-Length`, then half the body.
    /// A route without an in-memory response (or with a body under 2 bytes) is answered with 1,000 zero bytes instead.
    private func sendHalfAnswer(to request: LoopbackRequest, on fd: Int32) {
        let handler = withLock {
            requestCounts[request.path, default: 0] += 1
            totalRequests += 1
            return routes[request.path]
        }
        var response = handler?(request) ?? LoopbackResponse(headers: ["Content-Type": "application/octet-stream"], body: Data(count: 1000))
        if LoopbackResponse.statusHasNoBody(response.status) { response.status = 200 }
        if response.body.count < 2 { response.body = Data(count: 1000) }
        let head = headerBlock(response, contentLength: response.body.count, keepAlive: true)
        _ = Sys.sendAll(fd, head + response.body.prefix(response.body.count / 2))
    }
}
