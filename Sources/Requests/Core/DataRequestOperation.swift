#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Runs a ``DataRequest``: a ``NetworkRequestOperation`` whose body, kept in memory up to the
/// ``TransferLimits/maximumBodySize``, becomes `Success` through the request's
/// ``DataRequest/processResponse(_:response:)``.
open class DataRequestOperation<R: DataRequest>: NetworkRequestOperation<R>, @unchecked Sendable {
    override func process(_ body: ResponseBody, response: HTTPURLResponse, of request: R) throws -> Processed<R.Success> {
        guard case let .data(data) = body else {
            throw RequestQueueError.misuse("\(type(of: self)) received a file it cannot process")
        }
        return Processed(value: try request.processResponse(data, response: response))
    }
}

/// Runs a ``DecodableRequest``: a ``DataRequestOperation`` whose success value is decoded from JSON.
public final class DecodableRequestOperation<R: DecodableRequest>: DataRequestOperation<R>, @unchecked Sendable {}

/// Runs a ``NoContentRequest``: a ``DataRequestOperation`` that expects an empty body.
public final class NoContentRequestOperation<R: NoContentRequest>: DataRequestOperation<R>, @unchecked Sendable {}
