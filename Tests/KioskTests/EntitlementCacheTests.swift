import Foundation
import KioskAPI
import Testing

@testable import Kiosk

/// The state directory's copy of the entitlements, read offline: the store's time moves with this machine's clock
/// since the answer, and a clock set back before the answer keeps only what never ends.
@Suite struct EntitlementCacheTests {
    static let answer = StoreV1.EntitlementsResponse(
        entitlements: [
            StoreV1.Entitlement(
                entitlementID: "pro", productID: "pass.week", transactionID: "tx_1", source: "purchase",
                expiresMs: 6_000),
            StoreV1.Entitlement(
                entitlementID: "filters", productID: "filter.pack", transactionID: "tx_2", source: "purchase"),
        ], asOfMs: 5_000)

    @Test func anEndComesByTheTimeElapsedHere() {
        let cached = CachedEntitlements(accountID: "digest", response: Self.answer, fetchedAtMs: 1_000)
        let soon = cached.infos(localNowMs: 1_500)
        #expect(soon.isCached && soon["pro"].isActive && soon["filters"].isActive)
        #expect(soon.confirmedDate == Date(milliseconds: 5_000))
        let later = cached.infos(localNowMs: 2_000)
        #expect(!later["pro"].isActive && later["filters"].isActive, "the store's time reached 6,000: the pass ended")
    }

    @Test func aClockSetBackKeepsOnlyWhatNeverEnds() {
        let cached = CachedEntitlements(accountID: "digest", response: Self.answer, fetchedAtMs: 1_000)
        let setBack = cached.infos(localNowMs: 999)
        #expect(!setBack["pro"].isActive && setBack["filters"].isActive)
        #expect(setBack["gold"] == .inactive("gold"), "one never held is inactive, not missing")
    }
}
