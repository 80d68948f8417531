import Foundation
import KioskAPI
import KioskSigning
import KioskWire

/// A receipt's bytes as the verified-receipt cache's key: hashed once, with
/// the process's randomly seeded SipHash (`Hasher`), and compared byte for
/// byte, so a colliding hash never returns another receipt's entry (a
/// cryptographic hash would cost more and protect nothing more here).
/// An entry holds the bytes themselves (shared with the request's array, not
/// copied). The signature covers only the receipt's payload, so a caller can
/// pad a valid receipt with fields of its own and each padded copy verifies:
/// receipts over ``largestCached`` bytes are checked every time instead of
/// cached, which bounds the receipt bytes the cache holds at its capacity
/// times that (10 MiB at the default 10,000 entries; a store's receipt is a
/// few hundred bytes).
struct ReceiptKey: Hashable, Sendable {
    /// The longest receipt cached, in bytes.
    static let largestCached = 1024

    let bytes: [UInt8]
    private let hash: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        var hasher = Hasher()
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        hash = hasher.finalize()
    }

    func hash(into hasher: inout Hasher) { hasher.combine(hash) }

    /// The table's hash: the SipHash already taken, mixed with the table's seed, without running a
    /// second `Hasher` over it on every lookup and insert.
    func _rawHashValue(seed: Int) -> Int { hash ^ seed }

    static func == (lhs: ReceiptKey, rhs: ReceiptKey) -> Bool {
        guard lhs.hash == rhs.hash, lhs.bytes.count == rhs.bytes.count else { return false }
        // memcmp: `Array.==` compares element by element.
        return lhs.bytes.withUnsafeBytes { left in
            rhs.bytes.withUnsafeBytes { right in
                left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0
            }
        }
    }
}

/// What a decision reads of a verified receipt: kept instead of the whole
/// payload (three strings instead of seven: less to copy in and release on
/// eviction, smaller nodes).
struct VerifiedReceipt: Sendable {
    var transactionID: String
    var accountID: String
    var productID: String
    /// 0: does not expire.
    var expiresDateMs: Int64
    /// The entitlements its product granted when it was signed (empty for most receipts: no allocation).
    var entitlements: [String]

    /// The fields kept, read from a payload where protobuf-c unpacked it (``ReceiptVerifier/verify(_:nowMs:keeping:)``).
    init(unpacked payload: borrowing ReceiptV1.ReceiptPayload.CStruct) throws(WireError) {
        transactionID = try CField.string(payload.transaction_id, field: "ReceiptPayload.transaction_id")
        accountID = try CField.string(payload.account_id, field: "ReceiptPayload.account_id")
        productID = try CField.string(payload.product_id, field: "ReceiptPayload.product_id")
        expiresDateMs = payload.expires_date_ms
        entitlements =
            payload.n_entitlements == 0
            ? []
            : try CField.strings(payload.n_entitlements, payload.entitlements, field: "ReceiptPayload.entitlements")
    }
}

/// A bounded least-recently-used cache of verified receipts, keyed by the
/// receipt bytes. Capacity 0 turns it off.
struct VerifiedReceiptCache {
    private struct Node {
        var key: ReceiptKey
        var receipt: VerifiedReceipt
        var previous: Int?
        var next: Int?
    }

    let capacity: Int
    private var nodes: [Node] = []
    private var index: [ReceiptKey: Int] = [:]
    private var head: Int?  // most recent
    private var tail: Int?  // least recent
    private var free: [Int] = []
    private(set) var hits: UInt64 = 0
    private(set) var misses: UInt64 = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 0)
    }

    var count: Int { index.count }

    /// The receipt verified for `key`, counting a hit or a miss.
    mutating func lookup(_ key: ReceiptKey) -> VerifiedReceipt? {
        guard let slot = index[key] else {
            misses += 1
            return nil
        }
        hits += 1
        moveToFront(slot)
        return nodes[slot].receipt
    }

    /// Counts a miss without a lookup (the cache is off); returns nil.
    mutating func missed() -> VerifiedReceipt? {
        misses += 1
        return nil
    }

    mutating func insert(_ key: ReceiptKey, _ receipt: VerifiedReceipt) {
        guard capacity > 0 else { return }
        if let slot = index[key] {
            nodes[slot].receipt = receipt
            moveToFront(slot)
            return
        }
        if index.count >= capacity, let last = tail { remove(slot: last) }
        let node = Node(key: key, receipt: receipt, previous: nil, next: head)
        let slot: Int
        if let reused = free.popLast() {
            nodes[reused] = node
            slot = reused
        } else {
            nodes.append(node)
            slot = nodes.count - 1
        }
        if let head { nodes[head].previous = slot }
        head = slot
        if tail == nil { tail = slot }
        index[key] = slot
    }

    /// Forgets every entry (the store's keys changed: a retired key's receipts
    /// must be checked again); the hit and miss counts stay.
    mutating func removeAll() {
        nodes.removeAll()
        index.removeAll()
        free.removeAll()
        head = nil
        tail = nil
    }

    /// Evicts every entry for `transactionID`.
    mutating func evict(transactionID: String) {
        let slots = index.values.filter { nodes[$0].receipt.transactionID == transactionID }
        for slot in slots { remove(slot: slot) }
    }

    private mutating func unlink(_ slot: Int) {
        let node = nodes[slot]
        if let previous = node.previous { nodes[previous].next = node.next } else { head = node.next }
        if let next = node.next { nodes[next].previous = node.previous } else { tail = node.previous }
        nodes[slot].previous = nil
        nodes[slot].next = nil
    }

    private mutating func moveToFront(_ slot: Int) {
        guard head != slot else { return }
        unlink(slot)
        nodes[slot].next = head
        if let head { nodes[head].previous = slot }
        head = slot
        if tail == nil { tail = slot }
    }

    private mutating func remove(slot: Int) {
        unlink(slot)
        index.removeValue(forKey: nodes[slot].key)
        free.append(slot)
    }
}
