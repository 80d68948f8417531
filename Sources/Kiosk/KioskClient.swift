import Foundation
import KioskAPI
import KioskRPC
import KioskWire
import Logging
import NIOConcurrencyHelpers

/// The Kiosk SDK: buy, restore, verify and download, with the feel of StoreKit 2.
///
/// ```swift
/// let kiosk = try KioskClient(configuration: KioskConfiguration(token: token, stateDirectory: stateDir))
/// Task {
///     for await transaction in kiosk.transactionUpdates {   // approved, queued or unfinished purchases
///         deliver(transaction)
///         try await kiosk.finish(transaction)
///     }
/// }
/// let products = try await kiosk.products(for: ["credits.5"]).products
/// switch try await kiosk.purchase(products[0], quantity: 4, paymentMethod: "test-card:4242424242424242") {
/// case .success(let transaction): deliver(transaction); try await kiosk.finish(transaction)
/// case .pending: break          // ask to buy, or queued offline: comes on transactionUpdates
/// case .userCancelled: break
/// }
/// ```
///
/// Every payment is journaled in the state directory, with its idempotency
/// key, before it is sent. A payment the store could not be reached for stays
/// queued and is sent again (with backoff) until the store answers; after a
/// crash the journal is replayed with the same keys, so no payment is lost and
/// none is charged twice.
///
/// The state directory is private to the user: it is made 0700 (an existing
/// one open to others is tightened), its files are created 0600, and every
/// rename or removal in it is followed by an fsync of the directory. A journal
/// file that cannot be used is moved to `journal/corrupt/`, logged and listed in
/// ``setAsideJournalEntries``.
public final class KioskClient: Sendable {
    /// The configuration.
    public let configuration: KioskConfiguration
    let store: RPCClient
    private let accessToken = NIOLockedValueBox<(token: String, refreshMs: Int64)?>(nil)
    let content: RPCClient
    private let journal: PaymentJournal
    private let updates = TransactionBroadcast()
    private let entitlementChanges = EntitlementBroadcast()
    private let state = NIOLockedValueBox(SyncState())
    private let wakeRequested = NIOLockedValueBox(false)

    private struct SyncState {
        var delivered: Set<String> = []
        var inFlight: Set<String> = []
        /// The events said the entitlements changed and reading them failed: read them again on the next pass.
        var entitlementsStale = false
        var background: Task<Void, Never>?
        var closed = false
    }

    /// Creates a client and starts its background work: sending queued
    /// payments and looking for transactions to deliver on ``transactionUpdates``.
    /// Call ``close()`` when done: the background work keeps the client alive.
    /// - Throws: ``KioskError`` when the state directory cannot be used (or made private).
    public init(configuration: KioskConfiguration) throws {
        self.configuration = configuration
        let tls: ClientTLS?
        switch configuration.transportSecurity {
        case .plaintext:
            tls = nil
        case .tls(let trustRootsPath, let serverName):
            do {
                tls = try ClientTLS(trustRootsPath: trustRootsPath, serverName: serverName)
            } catch {
                throw KioskError(.cannotConnect, "cannot set up TLS: \(error)")
            }
        }
        let rpc = ClientConfiguration(
            connectTimeout: .seconds(3),
            backoff: ConnectionBackoff(
                initial: .milliseconds(50), maximum: .seconds(1), multiplier: 2, jitter: 0.2, maximumAttempts: 2),
            defaultTimeout: configuration.callTimeout, tls: tls)
        guard !configuration.storeEndpoints.isEmpty, !configuration.contentEndpoints.isEmpty else {
            throw KioskError(.invalidRequest, "the configuration lists no store or no content endpoint")
        }
        store = RPCClient(endpoints: configuration.storeEndpoints, configuration: rpc)
        content = RPCClient(endpoints: configuration.contentEndpoints, configuration: rpc)
        do {
            if let former = try PrivateFiles.makeDirectory(configuration.stateDirectory, tighteningExisting: true) {
                configuration.logger.notice(
                    "the state directory was open to others (mode \(String(former, radix: 8))); it is 0700 now",
                    metadata: ["kiosk.state-directory": "\(configuration.stateDirectory)"])
            }
            journal = try PaymentJournal(stateDirectory: configuration.stateDirectory, logger: configuration.logger)
        } catch {
            throw KioskError(.unknown, "cannot use the state directory \(configuration.stateDirectory): \(error)")
        }
        let task = Task { await self.synchronize() }
        state.withLockedValue { $0.background = task }
    }

    /// Stops the background work and closes the connections. Queued payments stay in the journal.
    public func close() async {
        let task = state.withLockedValue { state -> Task<Void, Never>? in
            state.closed = true
            return state.background
        }
        task?.cancel()
        signal()
        await task?.value
        updates.finish()
        entitlementChanges.finish()
        await store.close()
        await content.close()
    }

    // MARK: Calls

    func options(idempotencyKey: String? = nil, timeout: Duration? = nil) -> CallOptions {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(configuration.token)")
        if let idempotencyKey { metadata.add("idempotency-key", idempotencyKey) }
        return CallOptions(timeout: timeout ?? configuration.callTimeout, metadata: metadata)
    }

    /// Options of a call to the content service: an access token from the
    /// store (never the account's own token), fetched when there is none or it
    /// is past half its life.
    func contentOptions(timeout: Duration? = nil) async throws -> CallOptions {
        let nowMs = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        let token: String
        if let cached = accessToken.withLockedValue({ $0 }), nowMs < cached.refreshMs {
            token = cached.token
        } else {
            let issued = try await storeCall(
                "AccessToken", StoreV1.AccessTokenRequest(audience: "content"), StoreV1.AccessTokenResponse.self,
                doing: "getting an access token for the content service")
            // Renewed at half its life (by this machine's clock: the store's may differ).
            let refreshMs = nowMs + max(issued.expiresMs - nowMs, 0) / 2
            accessToken.withLockedValue { $0 = (issued.accessToken, refreshMs) }
            token = issued.accessToken
        }
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        return CallOptions(timeout: timeout ?? configuration.callTimeout, metadata: metadata)
    }

    /// Forgets the access token (the content service refused it: expired, or its key retired); the next call gets a new one.
    func dropAccessToken() {
        accessToken.withLockedValue { $0 = nil }
    }

    func storeCall<Request: WireMessage, Response: WireMessage>(
        _ method: String, _ request: Request, _ response: Response.Type, idempotencyKey: String? = nil,
        doing what: String
    ) async throws -> Response {
        do {
            return try await failingOver(store) {
                try await store.unary(
                    "/kiosk.store.v1.Store/\(method)", request: request, response: response,
                    options: options(idempotencyKey: idempotencyKey))
            }
        } catch {
            throw KioskError.from(error, doing: what)
        }
    }

    /// Runs `call`, and again when the connection it went out on was lost
    /// while another replica is listed (``RPCClient/lostConnectionRetries`` times). Every store
    /// call is safe to repeat (reads, and writes that carry an idempotency key
    /// or set a state), so a replica killed mid-call costs a retry, not an error.
    ///
    /// A store answers ABORTED when another store process is making the same payment (a replica that
    /// took it and was killed, until the database sees its session end): sent again after 25 ms,
    /// doubling, up to 6 times (about 1.6 s), with the same key.
    func failingOver<T>(_ client: RPCClient, _ call: () async throws -> T) async throws -> T {
        var retries = client.lostConnectionRetries
        var busy = 0
        while true {
            do {
                return try await call()
            } catch let error as RPCError where retries > 0 && Self.isLostConnection(error) && !Task.isCancelled {
                retries -= 1
                configuration.logger.debug("retrying on another replica: \(error.message)")
            } catch let error as RPCError
                where error.code == .aborted && error.source == .remote && busy < 6 && !Task.isCancelled
            {
                busy += 1
                configuration.logger.debug("sending again: \(error.message)")
                try await Task.sleep(for: .milliseconds(25 << (busy - 1)))
            }
        }
    }

    /// True for a call that failed because its connection went away (not a server's answer, not a deadline).
    static func isLostConnection(_ error: Error) -> Bool {
        guard let error = error as? RPCError else { return false }
        return error.code == .unavailable && (error.source == .connection || error.source == .unprocessed)
    }

    // MARK: Products

    /// The products with `ids`, and the ids the store does not sell.
    /// - Returns: a ``ProductsResult``: ``ProductsResult/products`` in the order asked (each with its title and its
    ///   price in the account's storefront, ``ProductsResult/storefrontCountryCode``), and
    ///   ``ProductsResult/invalidIdentifiers``, the ids the catalog does not have (StoreKit's invalid identifiers).
    public func products(for ids: [String]) async throws -> ProductsResult {
        let response = try await storeCall(
            "ListProducts", StoreV1.ListProductsRequest(productIDs: ids), StoreV1.ListProductsResponse.self,
            doing: "listing products")
        return ProductsResult(
            products: response.products.map(Product.init), invalidIdentifiers: response.invalidProductIDs,
            storefrontCountryCode: response.storefront)
    }

    /// The storefront the account buys in: an ISO 3166-1 alpha-3 country code ("USA", "FRA"), as StoreKit's
    /// `Storefront.current?.countryCode`. Products are listed, and charged, in its prices.
    public var storefrontCountryCode: String {
        get async throws { try await account().storefront }
    }

    /// Moves the account to another storefront (ISO 3166-1 alpha-3, "FRA"), as a buyer changing their App Store
    /// country. Purchases are charged in its prices at once. A subscription keeps its price to the end of the period
    /// paid, then renews in the new storefront's price; when that is higher or in another currency the buyer must
    /// consent first (``SubscriptionStatus/priceIncreasePending``, ``consentToPriceIncrease(originalTransactionID:)``) or
    /// the subscription ends with its period.
    /// - Returns: the storefront now.
    /// - Throws: ``KioskError`` `invalidRequest` for a code that is not three capital letters.
    @discardableResult
    public func setStorefront(_ countryCode: String) async throws -> String {
        try await storeCall(
            "SetStorefront", StoreV1.SetStorefrontRequest(storefront: countryCode), StoreV1.Account.self,
            doing: "changing the storefront"
        ).storefront
    }

    /// True when the account may make payments (StoreKit's `canMakePayments`).
    public var canMakePayments: Bool {
        get async throws { try await account().paymentsAllowed }
    }

    /// The account's credit balance: a whole number of credits (consumables add ``Product/creditsPerUnit`` times the
    /// quantity bought; ``spendCredits(_:idempotencyKey:)`` takes them).
    public var creditBalance: UInt64 {
        get async throws { try await account().creditBalance }
    }

    private func account() async throws -> StoreV1.Account {
        try await storeCall(
            "GetAccount", StoreV1.GetAccountRequest(), StoreV1.Account.self, doing: "reading the account")
    }

    /// Spends credits; returns the new balance. The key makes a retry safe.
    /// - Throws: ``KioskError`` `insufficientCredits` when the balance is too low.
    public func spendCredits(_ amount: Int64, idempotencyKey: String = UUID().uuidString) async throws -> UInt64 {
        try await storeCall(
            "SpendCredits", StoreV1.SpendCreditsRequest(amount: amount), StoreV1.SpendCreditsResponse.self,
            idempotencyKey: idempotencyKey, doing: "spending credits"
        ).balance
    }

    // MARK: Purchasing

    /// Buys `quantity` of `product`.
    ///
    /// - Returns: `.success` (deliver, then ``finish(_:)``), `.pending` (ask to
    ///   buy, or the store could not be reached and the payment is queued; the
    ///   transaction arrives on ``transactionUpdates``) or `.userCancelled`.
    /// - Throws: ``KioskError``: `paymentNotAllowed`, `productUnavailable`,
    ///   `paymentInvalid`, `invalidRequest`, `notAuthenticated`, `unknown`.
    public func purchase(
        _ product: Product, quantity: UInt32 = 1, paymentMethod: String, offer: SubscriptionOffer? = nil
    ) async throws -> PurchaseResult {
        try await purchase(productID: product.id, quantity: quantity, paymentMethod: paymentMethod, offer: offer)
    }

    /// Buys `quantity` of the product with `productID`; see ``purchase(_:quantity:paymentMethod:offer:)``.
    /// - Parameters:
    ///   - productID: the product's id, e.g. `credits.5`.
    ///   - quantity: units to buy, from 1 to the product's ``Product/maxQuantity`` (else `invalidRequest`).
    ///   - paymentMethod: how to pay, as the store's payment processor reads it (the simulated processor takes
    ///     `test-card:4242424242424242`, `test-cancel`, `test-ask`).
    ///   - offer: an auto-renewable subscription's introductory or (signed) promotional offer; a refused offer
    ///     throws `invalidOfferIdentifier`, `invalidSignature`, `missingOfferParams` or `ineligibleForOffer`.
    public func purchase(
        productID: String, quantity: UInt32 = 1, paymentMethod: String, offer: SubscriptionOffer? = nil
    ) async throws -> PurchaseResult {
        let entry = JournalEntry(
            key: UUID().uuidString, productID: productID, quantity: quantity, paymentMethod: paymentMethod,
            createdMs: Date().milliseconds, offer: offer)
        // In flight before it is journaled, so the background work never sends it at the same time.
        state.withLockedValue { _ = $0.inFlight.insert(entry.key) }
        defer { state.withLockedValue { _ = $0.inFlight.remove(entry.key) } }
        try journal.record(entry)
        let response: StoreV1.PurchaseResponse
        do {
            response = try await send(entry)
        } catch let error as KioskError where error.isConnectivity {
            // Kept in the journal; the background work sends it when the store is back.
            signal()
            return .pending
        } catch let error as KioskError where error.isDefinitiveRefusal {
            journal.remove(entry.key)
            throw error
        } catch {
            // Cancelled, or an answer that does not say whether the store took the payment: it
            // stays queued, and the background work learns the outcome with the same key.
            signal()
            if Task.isCancelled { throw CancellationError() }
            throw error
        }
        journal.remove(entry.key)
        return try result(of: response)
    }

    private func send(_ entry: JournalEntry) async throws -> StoreV1.PurchaseResponse {
        try await storeCall(
            "Purchase",
            StoreV1.PurchaseRequest(
                productID: entry.productID, quantity: entry.quantity, paymentMethod: entry.paymentMethod,
                offer: entry.offer?.message),
            StoreV1.PurchaseResponse.self, idempotencyKey: entry.key, doing: "purchasing \(entry.productID)")
    }

    private func result(of response: StoreV1.PurchaseResponse) throws -> PurchaseResult {
        guard let message = response.transaction else {
            throw KioskError(.unknown, "the store answered without a transaction")
        }
        switch message.state {
        case .purchased:
            let transaction = Transaction(message)
            // Delivered here, so transactionUpdates will not carry it too (see `deliver`).
            state.withLockedValue { _ = $0.delivered.insert(transaction.id) }
            return .success(transaction)
        case .deferred:
            return .pending
        case .failed:
            switch message.errorCode {
            case 2: return .userCancelled
            case 3: throw KioskError(.paymentInvalid, message.errorMessage)
            case 4: throw KioskError(.paymentNotAllowed, message.errorMessage)
            case 5: throw KioskError(.productUnavailable, message.errorMessage)
            case 11: throw KioskError(.invalidOfferIdentifier, message.errorMessage)
            case 12: throw KioskError(.invalidSignature, message.errorMessage)
            case 13: throw KioskError(.missingOfferParams, message.errorMessage)
            case 18: throw KioskError(.ineligibleForOffer, message.errorMessage)
            default: throw KioskError(.unknown, message.errorMessage)
            }
        default:
            throw KioskError(.unknown, "the store answered with transaction state \(message.state.rawValue)")
        }
    }

    /// Redeems an offer code the buyer typed (`ABCD-EFGH-JKLM-NPQR`, or a custom word; case, spaces and dashes do not
    /// matter): the store buys the code's product at the code's price (a free code needs no `paymentMethod`) and the
    /// answer is a purchase's: `.success` with the transaction (its `offerID` is `code:<batch>`) to deliver and
    /// finish. Not queued while the store cannot be reached: call again (the same `idempotencyKey` answers once).
    /// - Throws: ``KioskError``: `invalidOfferIdentifier` (11) for a code that is unknown, used, revoked, expired or
    ///   at its limit, its message starting with the store's reason (`offer_code_used: …`); `ineligibleForOffer` (18)
    ///   when the account redeemed one for that subscription group or code already, or is subscribed;
    ///   `tooManyAttempts` after too many wrong codes; `cannotConnect`.
    public func redeem(
        code: String, paymentMethod: String = "", idempotencyKey: String = UUID().uuidString
    ) async throws -> PurchaseResult {
        let response = try await storeCall(
            "RedeemOfferCode", StoreV1.RedeemOfferCodeRequest(code: code, paymentMethod: paymentMethod),
            StoreV1.PurchaseResponse.self, idempotencyKey: idempotencyKey, doing: "redeeming an offer code")
        do {
            return try result(of: response)
        } catch let error as KioskError {
            guard let reason = response.transaction?.errorReason, !reason.isEmpty else { throw error }
            throw KioskError(error.code, "\(reason): \(error.message)")
        }
    }

    /// Payments queued in the journal, not yet answered by the store.
    public var queuedPaymentCount: Int { journal.entries().count }

    /// Files of the payment journal this client could not use as queued
    /// payments (not readable, not an entry) and moved aside, in the order it
    /// did: at start (so they are here once `init` returns) or on a later look
    /// at the journal. Each was also logged as a warning on the configuration's
    /// `logger`. Their bytes stay in the state directory's `journal/corrupt/`
    /// until removed; what they held is not sent.
    public var setAsideJournalEntries: [SetAsideJournalEntry] { journal.setAsideEntries }

    /// Sends the queued payments now (the background work does this too, with
    /// backoff); returns how many are still queued. Their transactions arrive on
    /// ``transactionUpdates``.
    @discardableResult
    public func sendQueuedPayments() async -> Int {
        _ = await replayJournal()
        return journal.entries().count
    }

    /// Sends every queued payment not in flight; false when the store could not be reached.
    private func replayJournal() async -> Bool {
        let busy = state.withLockedValue { $0.inFlight }
        for entry in journal.entries() where !busy.contains(entry.key) {
            do {
                let response = try await send(entry)
                journal.remove(entry.key)
                if let transaction = response.transaction { deliver(transaction) }
            } catch let error as KioskError where error.isDefinitiveRefusal {
                // The store refused it outright (e.g. the product's limits changed): nothing to send any more.
                journal.remove(entry.key)
            } catch {
                // Unreachable, cancelled, or an unclear answer: keep it for the next attempt.
                return false
            }
        }
        return true
    }

    // MARK: Receipts

    /// Keeps the signed receipt of `transaction` in the state directory, as
    /// `receipts/<transaction id>.receipt`: created 0600, written atomically
    /// (the directory fsynced), replacing an earlier copy.
    /// - Returns: The receipt file's location.
    /// - Throws: ``KioskError`` `unknown` when it cannot be written.
    @discardableResult
    public func saveReceipt(of transaction: Transaction) throws -> URL {
        // Transaction ids come from the store: keep them to one plain name in `receipts/`.
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard !transaction.id.isEmpty, !transaction.id.hasPrefix("."), transaction.id.allSatisfy(allowed.contains)
        else {
            throw KioskError(
                .unknown, "the transaction id \(transaction.id.debugDescription) cannot name a receipt file")
        }
        let directory = (configuration.stateDirectory as NSString).appendingPathComponent("receipts")
        let path = (directory as NSString).appendingPathComponent("\(transaction.id).receipt")
        do {
            try PrivateFiles.makeDirectory(directory, tighteningExisting: true)
            try PrivateFiles.writeAtomically(Data(transaction.signedReceipt), to: path)
        } catch {
            throw KioskError(.unknown, "cannot save the receipt of \(transaction.id): \(error)")
        }
        return URL(fileURLWithPath: path)
    }

    // MARK: Transactions

    /// Transactions the app has not handled yet: every unfinished transaction
    /// once at start, approved ask-to-buy purchases, and queued payments once
    /// the store took them. Deliver each, then ``finish(_:)`` it.
    public var transactionUpdates: AsyncStream<Transaction> { updates.subscribe() }

    /// The account's purchased transactions not finished yet, oldest first
    /// (read a page of 500 at a time).
    public var unfinishedTransactions: [Transaction] {
        get async throws { try await unfinishedMessages().map(Transaction.init) }
    }

    private func unfinishedMessages() async throws -> [StoreV1.Transaction] {
        var out: [StoreV1.Transaction] = []
        var token = ""
        repeat {
            let page = try await storeCall(
                "Unfinished", StoreV1.UnfinishedRequest(pageSize: 500, pageToken: token),
                StoreV1.UnfinishedResponse.self,
                doing: "reading unfinished transactions")
            out += page.transactions
            token = page.hasMore ? page.nextPageToken : ""
        } while !token.isEmpty
        return out
    }

    /// Every transaction of the account (purchased, deferred, refunded), oldest
    /// first, read from the store a page at a time as the sequence is consumed.
    public func transactionHistory(pageSize: UInt32 = 100) -> AsyncThrowingStream<Transaction, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    var token = ""
                    repeat {
                        let page = try await self.storeCall(
                            "History", StoreV1.HistoryRequest(pageSize: pageSize, pageToken: token),
                            StoreV1.HistoryResponse.self, doing: "reading the transaction history")
                        for message in page.transactions { continuation.yield(Transaction(message)) }
                        token = page.hasMore ? page.nextPageToken : ""
                    } while !token.isEmpty && !Task.isCancelled
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Every transaction of the account, consumables included, oldest first, read
    /// a page at a time (ListTransactions) as the sequence is consumed; `filter`
    /// narrows it. Also ``Transaction/all(in:)``.
    public func allTransactions(
        productIDs: [String] = [], revokedOnly: Bool = false,
        pageSize: UInt32 = 100
    ) -> AsyncThrowingStream<Transaction, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    var token = ""
                    repeat {
                        let request = StoreV1.ListTransactionsRequest(
                            productIDs: productIDs, revoked: revokedOnly ? 1 : 0, limit: pageSize, pageToken: token)
                        let page = try await self.storeCall(
                            "ListTransactions", request, StoreV1.ListTransactionsResponse.self,
                            doing: "listing the account's transactions")
                        for message in page.transactions { continuation.yield(Transaction(message)) }
                        token = page.hasMore ? page.nextPageToken : ""
                    } while !token.isEmpty && !Task.isCancelled
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// One of the account's transactions, by id.
    /// - Throws: ``KioskError`` `.notFound`-like when the account has no such transaction.
    public func transaction(id: String) async throws -> Transaction {
        Transaction(
            try await storeCall(
                "GetTransaction", StoreV1.GetTransactionRequest(transactionID: id), StoreV1.Transaction.self,
                doing: "looking up transaction \(id)"))
    }

    /// Marks a transaction finished (the app delivered it); idempotent.
    public func finish(_ transaction: Transaction) async throws {
        try await finish(transactionID: transaction.id)
    }

    /// Marks the transaction with `transactionID` finished; idempotent.
    public func finish(transactionID: String) async throws {
        _ = try await storeCall(
            "Finish", StoreV1.FinishRequest(transactionID: transactionID), StoreV1.FinishResponse.self,
            doing: "finishing \(transactionID)")
    }

    /// Every restorable transaction of the account (non-consumables and
    /// subscriptions, not revoked), with its original transaction id; then the
    /// sequence ends, or throws a ``KioskError``.
    /// - Returns: a sequence of ``Transaction`` values, oldest first: what another device of the same account
    ///   bought, with receipts that verify; deliver what each unlocks.
    public func restore() -> AsyncThrowingStream<Transaction, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                // A stream broken by a lost connection starts again on another replica; what was yielded is not yielded twice.
                var yielded: Set<String> = []
                var retries = store.lostConnectionRetries
                while true {
                    let stream = store.serverStreaming(
                        "/kiosk.store.v1.Store/Restore", request: StoreV1.RestoreRequest(),
                        response: StoreV1.Transaction.self, options: options())
                    do {
                        for try await message in stream where yielded.insert(message.transactionID).inserted {
                            continuation.yield(Transaction(message))
                        }
                        continuation.finish()
                        return
                    } catch  where retries > 0 && Self.isLostConnection(error) && !Task.isCancelled {
                        retries -= 1
                    } catch {
                        continuation.finish(throwing: KioskError.from(error, doing: "restoring purchases"))
                        return
                    }
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The non-consumables and live subscriptions the account owns, without revoked ones.
    public var currentEntitlements: [Transaction] {
        get async throws {
            var out: [Transaction] = []
            for try await transaction in restore()
            where transaction.productType != .autoRenewable && transaction.isActive() {
                out.append(transaction)
            }
            // Auto-renewable subscriptions: the store's status decides (its clock; a grace period keeps the
            // entitlement, an early expiry ends it), one entry per subscription, its latest transaction.
            for status in try await subscriptionStatus() where status.isEntitled {
                if let latest = status.latestTransaction, latest.revocationDate == nil { out.append(latest) }
            }
            return out
        }
    }

    // MARK: Entitlements

    /// The account's entitlements, by the store: `entitlements["pro"].isActive`. When the store cannot be reached
    /// (``KioskError/Code-swift.struct/cannotConnect``), the copy kept in the state directory from the last answer,
    /// with ``EntitlementInfos/isCached`` set and ``EntitlementInfos/confirmedDate`` saying when the store last
    /// confirmed it; an entitlement in it stays active until its expiration date, by the time elapsed since.
    /// - Throws: ``KioskError``; `cannotConnect` only when there is no copy for this account's token either.
    public var entitlements: EntitlementInfos {
        get async throws {
            do {
                return try await refreshEntitlements()
            } catch let error as KioskError where error.isConnectivity {
                guard let cached = cachedEntitlements() else { throw error }
                return cached.infos(localNowMs: Date().milliseconds)
            }
        }
    }

    /// The account's entitlements each time what is active changes: a purchase, a renewal that lapsed, a refund, an
    /// expiry, a grant. The client looks whenever the account's events say an entitlement started or ended (the
    /// background work reads them every ``KioskConfiguration/updatePollInterval``) and whenever ``entitlements`` is
    /// read; a new listener first gets the last value seen, if any.
    public var entitlementUpdates: AsyncStream<EntitlementInfos> { entitlementChanges.subscribe() }

    /// Asks the store, keeps the answer in the state directory and tells ``entitlementUpdates`` listeners.
    @discardableResult
    private func refreshEntitlements() async throws -> EntitlementInfos {
        let response = try await storeCall(
            "Entitlements", StoreV1.EntitlementsRequest(), StoreV1.EntitlementsResponse.self,
            doing: "reading entitlements")
        let infos = EntitlementInfos(
            active: Dictionary(
                response.entitlements.map { ($0.entitlementID, Entitlement($0)) },
                uniquingKeysWith: { first, _ in first }),
            confirmedDate: Date(milliseconds: response.asOfMs), isCached: false)
        let cached = CachedEntitlements(
            accountID: tokenDigest, response: response, fetchedAtMs: Date().milliseconds)
        if let data = try? JSONEncoder().encode(cached) {
            do {
                try PrivateFiles.writeAtomically(data, to: entitlementsPath)
            } catch {
                configuration.logger.debug("keeping the entitlements in the state directory failed: \(error)")
            }
        }
        entitlementChanges.offer(infos)
        return infos
    }

    /// The state directory's copy, when it is this token's.
    private func cachedEntitlements() -> CachedEntitlements? {
        guard let data = FileManager.default.contents(atPath: entitlementsPath),
            let cached = try? JSONDecoder().decode(CachedEntitlements.self, from: data), cached.accountID == tokenDigest
        else { return nil }
        return cached
    }

    /// Where the last entitlements answer is kept.
    private var entitlementsPath: String {
        (configuration.stateDirectory as NSString).appendingPathComponent("entitlements.json")
    }

    /// What the entitlements copy is keyed by: the SHA-256 of the account token (the token itself is never written).
    private var tokenDigest: String {
        var hasher = SHA256Hasher()
        hasher.update(Array(configuration.token.utf8))
        return hasher.finalize().hexString
    }

    /// Asks the store whether a receipt is real.
    /// - Parameter receipt: a signed receipt: ``Transaction/signedReceipt``, or a file ``saveReceipt(of:)`` wrote.
    /// - Returns: the store's verdict: ``VerificationResult/status`` 0 is a receipt the store signed, for this
    ///   environment; other statuses say why not (21003 not authentic: forged or tampered). A valid receipt may still
    ///   have been refunded: ``VerificationResult/revocationDate``. ``VerificationResult/isValid`` is both at once.
    /// - Throws: ``KioskError`` when the store cannot be asked (a refusal is an answer, not an error).
    public func verify(receipt: [UInt8]) async throws -> VerificationResult {
        let response = try await storeCall(
            "VerifyReceipt", StoreV1.VerifyReceiptRequest(signedReceipt: receipt),
            StoreV1.VerifyReceiptResponse.self, doing: "verifying a receipt")
        return VerificationResult(
            status: response.status, message: response.message, transactionID: response.receipt?.transactionID,
            productID: response.receipt?.productID, accountID: response.receipt?.accountID,
            revocationDate: response.revocationDateMs > 0 ? Date(milliseconds: response.revocationDateMs) : nil,
            revocationReason: response.revocationReason.isEmpty ? nil : response.revocationReason)
    }

    // MARK: Hosted content

    /// The content service's products, joined with the store's prices.
    public func hostedProducts() async throws -> [HostedProduct] {
        let listed: ContentV1.ListContentResponse
        do {
            // Open to anyone: no token goes with it.
            listed = try await failingOver(content) {
                try await content.unary(
                    "/kiosk.content.v1.Content/ListContent", request: ContentV1.ListContentRequest(),
                    response: ContentV1.ListContentResponse.self,
                    options: CallOptions(timeout: configuration.callTimeout))
            }
        } catch {
            throw KioskError.from(error, doing: "listing hosted content")
        }
        let products = try await self.products(for: listed.items.map(\.productID)).products
        let byID = Dictionary(products.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        return listed.items.map { item in
            HostedProduct(
                productID: item.productID, product: byID[item.productID], contentVersion: item.contentVersion,
                size: item.originalSize, downloadSize: item.compressedSize, sha256: item.sha256, title: item.title,
                entitlementID: item.entitlementID.isEmpty ? nil : item.entitlementID)
        }
    }

    /// Starts downloading the hosted file of `productID` bought in `transaction`
    /// into `directory`; follow ``KioskDownload/events``. A download broken
    /// earlier (even by a crash) resumes from its last complete chunk.
    public func download(productID: String, transaction: Transaction, to directory: URL) -> KioskDownload {
        KioskDownload(client: self, productID: productID, receipt: transaction.signedReceipt, directory: directory)
    }

    /// Starts downloading the hosted file of `productID`, which the content service gates by an entitlement the
    /// account holds (``HostedProduct/entitlementID``), with the receipt of the transaction that grants it.
    /// - Throws: ``KioskError`` `notFound` when `entitlement` is not active.
    public func download(productID: String, entitlement: Entitlement, to directory: URL) async throws -> KioskDownload {
        guard entitlement.isActive, let transactionID = entitlement.transactionID else {
            throw KioskError(.notFound, "the account does not hold the entitlement \(entitlement.id)")
        }
        let granting = try await transaction(id: transactionID)
        return download(productID: productID, transaction: granting, to: directory)
    }

    // MARK: Background work

    /// Asks the background work to look at the journal now.
    private func signal() {
        wakeRequested.withLockedValue { $0 = true }
    }

    /// Sleeps for `duration`, waking early (within 50 ms) after ``signal()``.
    private func nap(_ duration: Duration) async {
        let end = ContinuousClock.now + duration
        while ContinuousClock.now < end, !Task.isCancelled {
            if wakeRequested.withLockedValue({ flag in
                defer { flag = false }
                return flag
            }) {
                return
            }
            try? await Task.sleep(for: min(.milliseconds(50), ContinuousClock.now.duration(to: end)))
        }
    }

    /// Yields a transaction on ``transactionUpdates`` once. While a `purchase`
    /// call is waiting for its answer, transactions not delivered yet are held
    /// back (a later pass brings them): the one being bought may be among them,
    /// and it belongs to `purchase`'s answer, not to the updates.
    private func deliver(_ message: StoreV1.Transaction) {
        guard message.state == .purchased, !message.finished else { return }
        let isNew = state.withLockedValue { state -> Bool in
            guard state.inFlight.isEmpty else { return false }
            return state.delivered.insert(message.transactionID).inserted
        }
        if isNew { updates.yield(Transaction(message)) }
    }

    /// Where the account's event log was read to: the events file of the state directory.
    private var eventCursorPath: String {
        (configuration.stateDirectory as NSString).appendingPathComponent("events.cursor")
    }

    /// The cursor saved in `text` (the events file: "<account id> <cursor>") for `accountID`; nil when there is
    /// none or it is another account's (a state directory used with another account, or another store, starts
    /// afresh). A bare number, as a state directory from before the account was recorded holds, is taken as
    /// this account's.
    static func savedEventCursor(_ text: String?, accountID: String) -> UInt64? {
        guard let parts = text?.split(whereSeparator: \.isWhitespace), let first = parts.first else { return nil }
        if parts.count == 1 { return UInt64(first) }
        guard parts.count == 2, first == accountID else { return nil }
        return UInt64(parts[1])
    }

    /// Yields again, on ``transactionUpdates``, the transactions the store refunded, restored (a dispute won),
    /// extended (a renewal date moved later) or whose subscription ended since the last look, reading the account's events after the cursor saved for it. The first time
    /// (no cursor saved for this account) it starts at the end of the log: what happened before this state
    /// directory is history.
    private func followAccountEvents(accountID: String) async throws {
        let saved = Self.savedEventCursor(
            try? String(contentsOfFile: eventCursorPath, encoding: .utf8), accountID: accountID)
        var cursor = saved ?? 0
        let save = { (cursor: UInt64) in
            try PrivateFiles.writeAtomically(Data("\(accountID) \(cursor)\n".utf8), to: self.eventCursorPath)
        }
        var entitlementsChanged = state.withLockedValue { $0.entitlementsStale }
        while true {
            let request = StoreV1.ListEventsRequest(
                since: cursor, limit: 100,
                types: [
                    .refunded, .refundReversed, .expired, .renewalExtended, .entitlementStarted, .entitlementEnded,
                ])
            let page: StoreV1.ListEventsResponse
            do {
                page = try await failingOver(store) {
                    try await store.unary(
                        "/kiosk.store.v1.Store/ListEvents", request: request, response: StoreV1.ListEventsResponse.self,
                        options: options())
                }
            } catch let error as RPCError where error.code == .unimplemented {
                throw EventLogUnsupported()
            }
            if saved != nil {
                for signed in page.events {
                    guard let event = try? StoreV1.Event(serializedBytes: signed.event) else { continue }
                    if event.type == .entitlementStarted || event.type == .entitlementEnded {
                        // What is active now, once a page (the events tell that something changed, not all of it).
                        entitlementsChanged = true
                    } else if !event.transactionID.isEmpty {
                        do {
                            var transaction = try await self.transaction(id: event.transactionID)
                            if event.type == .expired { transaction.expirationReason = "\(event.expirationReason)" }
                            updates.yield(transaction)
                        } catch let error as KioskError where error.code == .notFound {
                            // Gone from the store (a cleared sandbox ledger): nothing to yield; move on.
                        }
                    }
                    // Saved after each event: one yielded is not yielded again after a failure further on.
                    cursor = event.eventID
                    try save(cursor)
                }
            }
            if page.cursor != cursor || saved == nil {
                cursor = page.cursor
                try save(cursor)
            }
            if entitlementsChanged {
                entitlementsChanged = false
                let read = (try? await refreshEntitlements()) != nil
                state.withLockedValue { $0.entitlementsStale = !read }
            }
            guard page.hasMore, !Task.isCancelled else { return }
        }
    }

    /// Sends queued payments and looks for transactions to deliver, until closed.
    private func synchronize() async {
        var delay = configuration.retryInitialDelay
        var followsEvents = true
        var accountID: String?  // read once: the events file names the account its cursor belongs to
        while !Task.isCancelled, !state.withLockedValue({ $0.closed }) {
            var reachable = await replayJournal()
            if reachable {
                do {
                    for message in try await unfinishedMessages() {
                        deliver(message)
                    }
                } catch {
                    reachable = false
                }
            }
            if reachable, followsEvents {
                do {
                    let id: String
                    if let known = accountID {
                        id = known
                    } else {
                        id = try await account().accountID
                        accountID = id
                    }
                    try await followAccountEvents(accountID: id)
                } catch is EventLogUnsupported {
                    followsEvents = false  // a store older than the event log
                } catch {
                    configuration.logger.debug("reading the account's events failed: \(error)")
                }
            }
            if Task.isCancelled { return }
            if reachable {
                delay = configuration.retryInitialDelay
                await nap(configuration.updatePollInterval)
            } else {
                await nap(delay)
                delay = min(delay * 2, configuration.retryMaximumDelay)
            }
        }
    }
}

/// The store answers UNIMPLEMENTED to ListEvents: it predates the event log.
private struct EventLogUnsupported: Error {}
