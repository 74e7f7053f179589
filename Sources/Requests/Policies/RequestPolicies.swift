#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What every request sent through a queue goes through, in this order: ``adapters``, the
/// ``authenticator``, ``preconditions``, the send (under the ``limits`` and the ``redirectPolicy``), the status
/// check, ``validations``, ``retryPolicy``; ``monitors`` see each step.
///
/// Set it once per queue with `OperationQueue.requestPolicies`; a request adds its own with the
/// ``NetworkRequest`` properties of the same names (its adapters, preconditions, validations and sensitive headers
/// come after the queue's; its retry policy, limits and redirect policy replace the queue's). Every default is
/// "none", except the ``limits`` (``TransferLimits/default``) and the ``redirectPolicy`` (``RedirectPolicy/follow``).
public struct RequestPolicies: Sendable {
    /// Change each `URLRequest` before it is sent, in order. Default: none.
    public var adapters: [RequestAdapter]
    /// Checked on the final `URLRequest` just before it is sent. Default: none.
    public var preconditions: [RequestPrecondition]
    /// Checked on every response whose status is valid, before the body is processed. Default: none.
    public var validations: [ResponseValidation]
    /// When a failed attempt is sent again, for requests whose own ``NetworkRequest/retryPolicy`` is `nil`.
    /// Default: `nil`, no retries.
    public var retryPolicy: RetryPolicy?
    /// Adds a credential to each request and refreshes it, once for all, when the server rejects it.
    /// Requests whose ``NetworkRequest/usesAuthenticator`` is `false` skip it. Default: `nil`.
    public var authenticator: TokenAuthenticator?
    /// Told about every attempt and every outcome, in order. Default: none.
    public var monitors: [any RequestEventMonitor]
    /// How large a response and how slow a request may be. Default: ``TransferLimits/default`` (64 MiB in memory,
    /// at least 1 KiB per 60 s).
    public var limits: TransferLimits
    /// What a redirect may do. Default: ``RedirectPolicy/follow``.
    public var redirectPolicy: RedirectPolicy
    /// Headers that a redirect never carries to another origin, besides `Authorization`, `Proxy-Authorization`
    /// and `Cookie` (for example `X-Api-Key`). Names are compared without regard to case. Default: none.
    public var sensitiveHeaders: [String]
    /// Where data requests find and keep responses (see ``ResponseCache``). Default: `nil`, no caching by Requests.
    public var responseCache: ResponseCache?

    /// Policies with the given parts; each defaults to the documented default.
    public init(
        adapters: [RequestAdapter] = [],
        preconditions: [RequestPrecondition] = [],
        validations: [ResponseValidation] = [],
        retryPolicy: RetryPolicy? = nil,
        authenticator: TokenAuthenticator? = nil,
        monitors: [any RequestEventMonitor] = [],
        limits: TransferLimits = .default,
        redirectPolicy: RedirectPolicy = .follow,
        sensitiveHeaders: [String] = [],
        responseCache: ResponseCache? = nil
    ) {
        self.adapters = adapters
        self.preconditions = preconditions
        self.validations = validations
        self.retryPolicy = retryPolicy
        self.authenticator = authenticator
        self.monitors = monitors
        self.limits = limits
        self.redirectPolicy = redirectPolicy
        self.sensitiveHeaders = sensitiveHeaders
        self.responseCache = responseCache
    }

    /// These policies with `request`'s own appended or replacing the queue's, as below; `nil` when it adds nothing.
    func adding<R: NetworkRequest>(_ request: R) -> RequestPolicies? {
        // Each property is read once (it is the request's code), and no generic helper: this runs for every request.
        var policies = self
        var changed = false
        if case let own = request.adapters, !own.isEmpty { (policies.adapters, changed) = (adapters + own, true) }
        if case let own = request.preconditions, !own.isEmpty { (policies.preconditions, changed) = (preconditions + own, true) }
        if case let own = request.validations, !own.isEmpty { (policies.validations, changed) = (validations + own, true) }
        if case let own = request.sensitiveHeaders, !own.isEmpty { (policies.sensitiveHeaders, changed) = (sensitiveHeaders + own, true) }
        if let own = request.retryPolicy { (policies.retryPolicy, changed) = (own, true) }
        if let own = request.limits { (policies.limits, changed) = (own, true) }
        if let own = request.redirectPolicy { (policies.redirectPolicy, changed) = (own, true) }
        if let own = request.responseCache { (policies.responseCache, changed) = (own, true) }
        if !request.usesAuthenticator, authenticator != nil { (policies.authenticator, changed) = (nil, true) }
        return changed ? policies : nil
    }
}

extension NetworkRequest {
    /// `nil`: the queue's retry policy applies.
    public var retryPolicy: RetryPolicy? { nil }
    /// None: only the queue's adapters run.
    public var adapters: [RequestAdapter] { [] }
    /// None: only the queue's preconditions are checked.
    public var preconditions: [RequestPrecondition] { [] }
    /// None: only the queue's validations run.
    public var validations: [ResponseValidation] { [] }
    /// `true`: the queue's authenticator, if any, applies.
    public var usesAuthenticator: Bool { true }
    /// `nil`: the queue's limits apply.
    public var limits: TransferLimits? { nil }
    /// `nil`: the queue's redirect policy applies.
    public var redirectPolicy: RedirectPolicy? { nil }
    /// None: only the queue's sensitive headers.
    public var sensitiveHeaders: [String] { [] }
    /// `nil`: the queue's response cache, if any.
    public var responseCache: ResponseCache? { nil }
    /// ``CacheUse/useCache``.
    public var cacheUse: CacheUse { .useCache }
}

extension OperationQueue {
    /// The policies every request added to this queue from now on goes through (a request reads them when
    /// it is added with `addRequest` or another `add…` method of Requests). Default: none.
    ///
    /// They are held for the queue by Requests, and released the next time any queue's policies are set after
    /// this queue is freed; assign `RequestPolicies()` before dropping a queue to release them at once.
    ///
    /// Set one policy at a time, so that none erases another; assigning a whole `RequestPolicies(…)` replaces every
    /// policy set before. Each line is a read, a change and a write of the queue's policies: set them before the queue
    /// is shared, not from two threads at once.
    ///
    /// ```swift
    /// queue.requestPolicies.retryPolicy = .default
    /// queue.requestPolicies.authenticator = tokens
    /// queue.requestPolicies.monitors.append(RequestLogger())
    /// ```
    public var requestPolicies: RequestPolicies {
        get { QueuePolicyTable.shared.policies(for: self).policies }
        set { QueuePolicyTable.shared.set(SharedPolicies(newValue), for: self) }
    }

    /// The queue's policies, shared by reference with its requests.
    var requestPolicyBox: SharedPolicies {
        QueuePolicyTable.shared.policies(for: self)
    }
}

/// Policies shared by reference: every queued operation holds a pointer to its queue's, not a copy, unless
/// its request adds its own.
final class SharedPolicies: Sendable {
    static let none = SharedPolicies(RequestPolicies())

    let policies: RequestPolicies

    init(_ policies: RequestPolicies) {
        self.policies = policies
    }

    /// These policies with `request`'s own added; `self` when it adds nothing.
    func adding<R: NetworkRequest>(_ request: R) -> SharedPolicies {
        policies.adding(request).map(SharedPolicies.init) ?? self
    }
}

/// `OperationQueue` cannot store new properties, so each queue's policies live here, keyed by identity.
/// The weak reference tells a live queue from a new one that reuses a freed queue's address.
private final class QueuePolicyTable: @unchecked Sendable {
    private struct Entry {
        weak var queue: OperationQueue?
        let policies: SharedPolicies
    }

    static let shared = QueuePolicyTable()

    private let lock = NSLock()
    private var entries: [ObjectIdentifier: Entry] = [:]

    func policies(for queue: OperationQueue) -> SharedPolicies {
        lock.lock()
        defer { lock.unlock() }
        guard let entry = entries[ObjectIdentifier(queue)] else { return .none }
        guard entry.queue === queue else {
            entries[ObjectIdentifier(queue)] = nil  // a freed queue's, found at its old address
            return .none
        }
        return entry.policies
    }

    func set(_ policies: SharedPolicies, for queue: OperationQueue) {
        lock.lock()
        defer { lock.unlock() }
        entries = entries.filter { $0.value.queue != nil }
        entries[ObjectIdentifier(queue)] = Entry(queue: queue, policies: policies)
    }
}
