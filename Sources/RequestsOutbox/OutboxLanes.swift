import Foundation
import Requests

/// The outbox's in-memory state, which entry sends next: pending entries by identifier, the ready ones in order,
/// each lane's entries in order. Not thread-safe: ``Outbox`` holds it behind its lock.
struct OutboxLanes {
    enum Phase: Equatable {
        /// Behind an earlier entry of its lane.
        case waiting
        /// Its turn has come; it starts when a slot is free.
        case ready
        case running
        /// Waiting for a retry timer of this generation.
        case backoff(generation: Int)
        case parked
    }

    struct Slot {
        var entry: OutboxEntry
        var phase: Phase
        /// Set by ``Outbox/drop(_:)`` while an attempt is in flight: the entry leaves when the attempt ends.
        var dropRequested = false
        /// Finished (added to the queue) when the entry is settled; made on demand by ``Outbox/operation(for:)``.
        var settledOperation: Operation?
        /// The attempt in flight and its number (see ``Outbox/conclude(_:_:attempt:)``), for cancelling it on drop
        /// or close.
        var attempt: (number: UInt64, operation: Operation)?
    }

    /// What attempts reuse: the request value (enqueued in this process, or decoded once from its JSON) and the URL
    /// request made from its frozen form.
    struct Made {
        var request: any OutboxRequest
        var urlRequest: URLRequest?
    }

    private(set) var slots: [UInt64: Slot] = [:]
    /// The request and URL request of entries that have them in this process, kept for their attempts. Apart from
    /// the slots, so that the entries found on open, which have none until their first attempt, do not hold room.
    private var made: [UInt64: Made] = [:]
    /// Entries whose turn has come, oldest first; `readyHead` is the index of the next one.
    private var ready: [UInt64] = []
    private var readyHead = 0
    /// Each lane's pending entries; the first is the lane's head (ready, running or in backoff), the rest wait.
    private var lanes: [String: LaneQueue] = [:]
    /// The pending and parked entries of each coalescing key.
    private var keyed: [String: Set<UInt64>] = [:]
    private(set) var pendingCount = 0
    private(set) var deadLetterCount = 0

    subscript(id: UInt64) -> Slot? {
        get { slots[id] }
        set { slots[id] = newValue }
    }

    /// What attempts of `id` reuse, if it has any.
    func made(_ id: UInt64) -> Made? { made[id] }

    /// Keeps what attempts of a present entry reuse.
    mutating func keep(_ made: Made, for id: UInt64) {
        guard slots[id] != nil else { return }
        self.made[id] = made
    }

    /// Adds a pending entry, with what its attempts reuse if any; it is ready at once unless its lane has an entry
    /// before it.
    mutating func addPending(_ entry: OutboxEntry, made: Made? = nil) {
        pendingCount += 1
        if let key = entry.coalescingKey { keyed[key, default: []].insert(entry.id) }
        if let made { self.made[entry.id] = made }
        guard let lane = entry.lane, let last = lanes[lane]?.last else {
            slots[entry.id] = Slot(entry: entry, phase: .ready)
            ready.append(entry.id)
            if let lane = entry.lane { lanes[lane] = LaneQueue(first: entry.id) }
            return
        }
        slots[entry.id] = Slot(entry: entry, phase: .waiting)
        if last < entry.id {
            lanes[lane]?.append(entry.id)  // in place: the common case, enqueues in identifier order
        } else {
            // Concurrent enqueues may arrive out of identifier order: a waiting entry goes after those with smaller
            // identifiers, so that the order here is the order after a restart.
            let slots = self.slots
            lanes[lane]?.insertWaiting(entry.id) { slots[$0]?.phase == .waiting }
        }
    }

    /// The entries with the coalescing key `key` that have no attempt in flight, oldest first.
    func waiting(withKey key: String) -> [UInt64] {
        (keyed[key] ?? []).filter { slots[$0]?.phase != .running }.sorted()
    }

    /// Adds a parked entry (found parked on open).
    mutating func addParked(_ entry: OutboxEntry) {
        deadLetterCount += 1
        if let key = entry.coalescingKey { keyed[key, default: []].insert(entry.id) }
        slots[entry.id] = Slot(entry: entry, phase: .parked)
    }

    /// The next ready entry, now running, or `nil`.
    mutating func nextReady() -> UInt64? {
        while readyHead < ready.count {
            let id = ready[readyHead]
            readyHead += 1
            if readyHead > 1024, readyHead * 2 > ready.count {
                ready.removeFirst(readyHead)
                readyHead = 0
            }
            if slots[id]?.phase == .ready {
                slots[id]?.phase = .running
                return id
            }
        }
        return nil
    }

    /// Makes an entry in backoff (or running, for a probe) ready again.
    mutating func makeReady(_ id: UInt64) {
        guard slots[id] != nil else { return }
        slots[id]?.phase = .ready
        ready.append(id)
    }

    /// Entries in backoff, made ready now (``Outbox/retryNow()``).
    mutating func wakeAll() {
        for (id, slot) in slots {
            if case .backoff = slot.phase { makeReady(id) }
        }
    }

    /// Removes a pending entry that settled (sent or dropped), or a parked one that was dropped; the next entry of
    /// its lane becomes ready. Returns the slot.
    @discardableResult
    mutating func remove(_ id: UInt64) -> Slot? {
        guard let slot = slots.removeValue(forKey: id) else { return nil }
        made[id] = nil
        if let key = slot.entry.coalescingKey {
            keyed[key]?.remove(id)
            if keyed[key]?.isEmpty == true { keyed[key] = nil }
        }
        if slot.phase == .parked {
            deadLetterCount -= 1
        } else {
            pendingCount -= 1
            leaveLane(slot.entry)
        }
        return slot
    }

    /// Parks a pending entry; the next entry of its lane becomes ready.
    mutating func park(_ id: UInt64, _ letter: OutboxDeadLetter) {
        guard var slot = slots[id], slot.phase != .parked else { return }
        leaveLane(slot.entry)
        slot.phase = .parked
        slot.entry.deadLetter = letter
        slot.attempt = nil
        // Finished by the parking (the caller adds it to the queue): a retried entry gets a new one on demand.
        slot.settledOperation = nil
        slots[id] = slot
        pendingCount -= 1
        deadLetterCount += 1
    }

    /// Makes a parked entry pending again, at the end of its lane.
    mutating func unpark(_ id: UInt64) {
        guard var slot = slots.removeValue(forKey: id), slot.phase == .parked else { return }
        deadLetterCount -= 1
        slot.entry.deadLetter = nil
        slot.entry.attempts = 0
        addPending(slot.entry)
    }

    private mutating func leaveLane(_ entry: OutboxEntry) {
        guard let lane = entry.lane, let wasHead = lanes[lane]?.remove(entry.id) else { return }
        if lanes[lane]?.isEmpty ?? true {
            lanes[lane] = nil
        } else if wasHead, let next = lanes[lane]?.first, slots[next]?.phase == .waiting {
            makeReady(next)
        }
    }

    /// Pending entries in identifier order, then parked ones.
    func entries(parked: Bool) -> [OutboxEntry] {
        slots.values.filter { ($0.phase == .parked) == parked }.map(\.entry).sorted { $0.id < $1.id }
    }
}

/// One lane's pending entries, in order; the first is the lane's head. Removing the head is O(1) (amortised).
struct LaneQueue {
    private var ids: [UInt64]
    private var head = 0

    init(first: UInt64) { ids = [first] }

    var first: UInt64? { head < ids.count ? ids[head] : nil }
    var last: UInt64? { head < ids.count ? ids.last : nil }
    var isEmpty: Bool { head >= ids.count }

    mutating func append(_ id: UInt64) { ids.append(id) }

    /// Inserts `id` after the entries with smaller identifiers, but only among those `isWaiting` says have not
    /// started (never before the head).
    mutating func insertWaiting(_ id: UInt64, isWaiting: (UInt64) -> Bool) {
        var index = ids.count
        while index > head + 1, ids[index - 1] > id, isWaiting(ids[index - 1]) { index -= 1 }
        ids.insert(id, at: index)
    }

    /// Removes `id`; returns whether it was the head, or `nil` when it is not in the lane.
    mutating func remove(_ id: UInt64) -> Bool? {
        if first == id {
            head += 1
            if head > 64, head * 2 > ids.count {
                ids.removeFirst(head)
                head = 0
            }
            return true
        }
        guard let index = ids[head...].firstIndex(of: id) else { return nil }
        ids.remove(at: index)
        return false
    }
}
