#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// The drain benchmarks' requests (the outbox's entry, and the same POST sent directly) and server side
// (`requests-bench outbox-drain`, OutboxDrain.swift and OutboxDrainDirect.swift).

/// One entry: a POST of a small JSON body, answered 201.
struct DrainEntry: OutboxRequest, NoContentRequest {
    var url: String
    var lane: String
    var seq: Int

    var identifier: String { "\(lane):\(seq)" }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var shouldEnforceNoContent: Bool { false }

    /// About 90 bytes: `{"lane":"lane-1","seq":17,"text":"…"}`.
    var body: Data { Data(#"{"lane":"\#(lane)","seq":\#(seq),"text":"an outbox entry of the drain benchmark"}"#.utf8) }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        guard let target = URL(string: url) else { return completion(.failure(URLError(.badURL))) }
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.httpBody = body
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        completion(.success(request))
    }
}

/// The direct side's request: what an outbox attempt of a `DrainEntry` sends, and how (one attempt, no cache, the
/// attempt timeout as its deadline), with the answer's body as its success.
struct DirectDrainPost: DataRequest {
    typealias Success = Data
    typealias Failure = Error

    let url: URL
    let body: Data
    let key: String
    let identifier: String
    let limits: TransferLimits?

    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var retryPolicy: RetryPolicy? { RetryPolicy(maxAttempts: 1) }
    var responseCache: ResponseCache? { nil }
    var cacheUse: CacheUse { .bypass }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = body
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("\"\(key)\"", forHTTPHeaderField: "Idempotency-Key")
        completion(.success(request))
    }

    func processData(_ data: Data) throws -> Data { data }
}

/// The drain's server side, for one scenario: applies each `Idempotency-Key` once, answers its repeats as the first
/// time (201, the same body), loses the answer of a share of the keys on their first arrival (applied, then the
/// connection is closed unanswered: ``fault(for:)``, the server's ``RequestFaultRule``) and refuses a share of them
/// with a 503 on their first arrival, unapplied. The shares are picked by a hash of the key, so the key's next
/// delivery is answered.
final class DrainLedger: @unchecked Sendable {
    let path: String
    private let lostRate: Double
    private let refusalRate: Double
    private let lock = NSLock()
    private var applied: [String: Int] = [:]
    private var bodies: [String: Data] = [:]
    private var seen: Set<String> = []
    private var refused: Set<String> = []
    /// When each lost answer was lost (``ResourceUsage/now()``), until the key arrives again.
    private var lostAt: [String: Double] = [:]
    private var counts = Counts()

    /// What the server saw.
    struct Counts {
        var deliveries = 0
        /// Deliveries of a key already applied, answered as the first one.
        var repeats = 0
        var lostAnswers = 0
        var refused = 0
        /// A key delivered with another body than its first one, or without a key.
        var conflicts = 0
        var malformed = 0
        /// Seconds from each lost answer to the key's next arrival.
        var resendGaps: [Double] = []
    }

    init(path: String, lostRate: Double, refusalRate: Double) {
        self.path = path
        self.lostRate = lostRate
        self.refusalRate = refusalRate
    }

    /// The key of a request: the header without its quotes.
    private static func key(_ request: LoopbackRequest) -> String {
        (request.headers["idempotency-key"] ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
    }

    /// A number in [0, 1) from `key` and `salt`: FNV-1a, then SplitMix64's finalizer.
    static func fraction(_ key: String, salt: UInt64) -> Double {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ salt
        for byte in key.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        hash = (hash ^ (hash >> 30)) &* 0xBF58_476D_1CE4_E5B9
        hash = (hash ^ (hash >> 27)) &* 0x94D0_49BB_1331_11EB
        hash ^= hash >> 31
        return Double(hash >> 11) / Double(1 << 53)
    }

    /// Records a delivery of `key` with `body`; call with the lock held. Returns whether the key was applied before.
    private func deliver(_ key: String, _ body: Data) -> Bool {
        counts.deliveries += 1
        if let first = bodies[key] {
            if first != body { counts.conflicts += 1 }
        } else {
            bodies[key] = body
        }
        if let lost = lostAt.removeValue(forKey: key) { counts.resendGaps.append(ResourceUsage.now() - lost) }
        return applied[key] != nil
    }

    /// The server's rule: on a key's first arrival, for the lost share, apply it and lose the answer.
    func fault(for request: LoopbackRequest) -> ConnectionFault? {
        guard request.path == path, lostRate > 0 else { return nil }
        let key = Self.key(request)
        guard !key.isEmpty, Self.fraction(key, salt: 0x1057) < lostRate else { return nil }
        return lock.withLock {
            guard seen.insert(key).inserted else { return nil }
            _ = deliver(key, request.body)
            applied[key, default: 0] += 1
            counts.lostAnswers += 1
            lostAt[key] = ResourceUsage.now()
            return .disconnectAfterRequest
        }
    }

    /// The route.
    func handle(_ request: LoopbackRequest) -> LoopbackResponse {
        let key = Self.key(request)
        return lock.withLock {
            guard !key.isEmpty else {
                counts.malformed += 1
                return LoopbackResponse(status: 400, body: Data("no Idempotency-Key".utf8))
            }
            seen.insert(key)
            if deliver(key, request.body) {
                counts.repeats += 1
                return .json(#"{"applied":true}"#, status: 201)
            }
            if refusalRate > 0, !refused.contains(key), Self.fraction(key, salt: 0x503) < refusalRate {
                refused.insert(key)
                counts.refused += 1
                return .json(#"{"error":"try again"}"#, status: 503)
            }
            applied[key, default: 0] += 1
            return .json(#"{"applied":true}"#, status: 201)
        }
    }

    /// How many times each key was applied.
    var applications: [String: Int] { lock.withLock { applied } }

    /// What the server saw so far.
    var snapshot: Counts { lock.withLock { counts } }
}
