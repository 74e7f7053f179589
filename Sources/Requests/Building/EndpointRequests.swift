#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

// One-off requests: an endpoint and what to make of its response, without declaring a type. Each is an
// `EndpointRequest` of one of the seed kinds, so it runs as the same operation, with the same policies, as a type the
// app declares; declare your own type when a request needs more (its own decoder, validations, a retry policy).

extension Endpoint {
    /// A request for this endpoint whose JSON body decodes to `type`.
    ///
    /// ```swift
    /// let recipes = queue.addRequest(api.get("recipes").decoding([Recipe].self))
    /// ```
    public func decoding<Success: Decodable>(_ type: Success.Type) -> Decoding<Success> {
        Decoding(endpoint: self)
    }

    /// A request for this endpoint that expects no body: it succeeds with `Void` on a valid status.
    public func noContent() -> NoContent {
        NoContent(endpoint: self)
    }

    /// A request for this endpoint whose body is written to a file: at `destination`, or when `nil`, in a new private
    /// folder of the temporary directory (see ``DownloadRequest/destination``).
    public func download(to destination: URL? = nil, options: DownloadOptions = .createIntermediateDirectories) -> Download {
        Download(endpoint: self, destination: destination, downloadOptions: options)
    }

    /// A request for this endpoint's server-sent events, which reconnects as a browser's `EventSource` does.
    ///
    /// ```swift
    /// for try await event in queue.stream(for: api.get("events").serverSentEvents()) {
    ///     print(event.data)
    /// }
    /// ```
    public func serverSentEvents() -> ServerSentEvents {
        ServerSentEvents(endpoint: self)
    }

    /// An endpoint's request whose JSON body decodes to `Success`: a ``DecodableRequest`` made by
    /// ``Endpoint/decoding(_:)``. Its identifier is the endpoint's method and URL.
    public struct Decoding<Success: Decodable>: DecodableRequest, EndpointRequest, Sendable {
        /// Any error: the transport's, the status check's, or the decoder's.
        public typealias Failure = Error
        /// Where and how the request is sent.
        public let endpoint: Endpoint
    }

    /// An endpoint's request that expects no body: a ``NoContentRequest`` made by ``Endpoint/noContent()``.
    public struct NoContent: NoContentRequest, EndpointRequest, Sendable {
        /// Any error: the transport's or the status check's.
        public typealias Failure = Error
        /// Where and how the request is sent.
        public let endpoint: Endpoint
    }

    /// An endpoint's request whose body goes to a file: a ``DownloadRequest`` made by
    /// ``Endpoint/download(to:options:)``.
    public struct Download: DownloadRequest, EndpointRequest, Sendable {
        /// Any error: the transport's, the status check's, or the file system's.
        public typealias Failure = Error
        /// Where and how the request is sent.
        public let endpoint: Endpoint
        /// Where the file goes; `nil`: a new private folder of the temporary directory.
        public let destination: URL?
        /// What the download may do at its destination.
        public let downloadOptions: DownloadOptions
    }

    /// An endpoint's server-sent events: a ``StreamRequest`` made by ``Endpoint/serverSentEvents()``, which
    /// reconnects with ``ReconnectPolicy/default``.
    public struct ServerSentEvents: StreamRequest, EndpointRequest, Sendable {
        /// Any error: the transport's, the status check's, or the stream's.
        public typealias Failure = Error
        /// Where and how the request is sent.
        public let endpoint: Endpoint

        /// A new ``ServerSentEventDecoder``.
        public func makeDecoder() -> ServerSentEventDecoder {
            ServerSentEventDecoder()
        }
    }
}

extension OperationQueue {
    /// Runs `endpoint` as an operation of this queue and returns its JSON body decoded as `type`; see
    /// ``response(for:session:after:)``.
    ///
    /// ```swift
    /// let recipes = try await queue.response(for: api.get("recipes"), as: [Recipe].self)
    /// ```
    public func response<Success: Decodable & Sendable>(
        for endpoint: Endpoint,
        as type: Success.Type = Success.self,
        session: URLSession = .shared,
        after dependencies: [Operation] = []
    ) async throws -> Success {
        try await response(for: endpoint.decoding(type), session: session, after: dependencies)
    }

    /// Runs `endpoint` as an operation of this queue, decoding its JSON body as `type`, and returns the operation; see
    /// ``addRequest(_:session:completionQueue:completion:)``.
    ///
    /// ```swift
    /// let recipes = queue.addRequest(api.get("recipes"), as: [Recipe].self)
    /// ```
    @discardableResult
    public func addRequest<Success: Decodable>(
        _ endpoint: Endpoint,
        as type: Success.Type,
        session: URLSession = .shared,
        completionQueue: DispatchQueue? = nil,
        completion: ((Result<Success, Error>) -> Void)? = nil
    ) -> RequestOperation<Success, Error> {
        addRequest(endpoint.decoding(type), session: session, completionQueue: completionQueue, completion: completion)
    }
}
