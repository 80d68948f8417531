import ArgumentParser
import Foundation
import Kiosk
import Logging

/// The `kiosk` command line: buy, restore, verify and download from a Kiosk store (`kiosk --help`).
public struct KioskCommand: AsyncParsableCommand {
    /// Creates the command (ArgumentParser fills in its options).
    public init() {}

    public static let configuration = CommandConfiguration(
        commandName: "kiosk",
        abstract: "Buy, restore, verify and download from a Kiosk store.",
        discussion: """
            Exit codes: 0 done, 1 refused (payment declined or not allowed, product unavailable, \
            insufficient credits, download refused, receipt not valid), 3 the store or content \
            service cannot be reached (a purchase stays queued and is sent on a later run), \
            4 any other error, 64 bad usage.
            """,
        subcommands: [
            Products.self, Buy.self, Redeem.self, Restore.self, Entitlements.self, Access.self, Balance.self,
            Spend.self,
            Unfinished.self, History.self, TransactionLookup.self, RequestRefund.self, Finish.self, Verify.self,
            Download.self, Subscriptions.self, AutoRenew.self, AcceptPrice.self, PaymentMethod.self,
            StorefrontCommand.self,
        ])
}

/// Options every command takes; flags win over the environment.
struct Connection: ParsableArguments {
    @Option(
        help:
            "The store, host:port, or its replicas as host:port,host:port (or KIOSK_STORE); a call whose connection is lost is sent again to the next."
    )
    var store: String?
    @Option(help: "The content service, host:port or host:port,host:port (or KIOSK_CONTENT).") var content: String?
    @Option(help: "The account's bearer token (or KIOSK_TOKEN).") var token: String?
    @Option(
        name: .customLong("tls-ca"),
        help:
            "PEM trust roots of the services' TLS certificates (or KIOSK_TLS_CA); without it, plaintext to loopback only."
    )
    var tlsCA: String?
    @Flag(name: .customLong("tls-system-roots"), help: "Speak TLS trusting the system's roots (a public CA).")
    var tlsSystemRoots = false
    @Option(
        name: .customLong("state-dir"),
        help: "Where queued payments and receipts are kept (or KIOSK_STATE_DIR; default ~/.kiosk).")
    var stateDir: String?
    @Flag(help: "Print JSON for scripts.") var json = false

    var stateDirectory: String {
        stateDir ?? env("KIOSK_STATE_DIR") ?? (NSHomeDirectory() as NSString).appendingPathComponent(".kiosk")
    }

    private func env(_ name: String) -> String? {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    private func endpoints(_ flag: String?, _ variable: String, default port: Int) throws -> [ServiceEndpoint] {
        let text = flag ?? env(variable) ?? "127.0.0.1:\(port)"
        do {
            return try ServiceEndpoint.list(parsing: text)
        } catch {
            throw ValidationError("\(error)")
        }
    }

    func client() throws -> KioskClient {
        guard let token = token ?? env("KIOSK_TOKEN") else {
            throw ValidationError("an account token is needed: --token or KIOSK_TOKEN (kiosk-store account create)")
        }
        var configuration = KioskConfiguration(token: token, stateDirectory: stateDirectory)
        configuration.storeEndpoints = try endpoints(store, "KIOSK_STORE", default: 7301)
        configuration.contentEndpoints = try endpoints(content, "KIOSK_CONTENT", default: 7302)
        if let ca = tlsCA ?? env("KIOSK_TLS_CA") {
            configuration.transportSecurity = .tls(trustRootsPath: ca)
        } else if tlsSystemRoots {
            configuration.transportSecurity = .tls(trustRootsPath: nil)
        }
        configuration.logger.logLevel = .error  // set-aside journal entries are reported below, in the command's words
        let kiosk = try KioskClient(configuration: configuration)
        for entry in kiosk.setAsideJournalEntries {
            FileHandle.standardError.write(
                Data(
                    "kiosk: warning: the queued payment file \(entry.name) cannot be used (\(entry.reason)); it was moved to \(entry.path) and is not sent\n"
                        .utf8))
        }
        return kiosk
    }

    /// Runs `body` with a client, prints its errors and exits with the documented codes.
    func run(_ body: (KioskClient) async throws -> Void) async throws {
        let kiosk = try client()
        do {
            await kiosk.sendQueuedPayments()
            try await body(kiosk)
            await kiosk.close()
        } catch let error as KioskError {
            await kiosk.close()
            fail(error)
        } catch let exit as ExitCode {
            await kiosk.close()
            throw exit
        } catch {
            await kiosk.close()
            fail(KioskError(.unknown, "\(error)"))
        }
    }

    func fail(_ error: KioskError) -> Never {
        if json {
            print(
                Output.line(
                    Output.Failure(
                        error: error.code.description, code: Int(error.code.rawValue), message: error.message)))
        } else {
            FileHandle.standardError.write(Data("kiosk: \(error.message)\n".utf8))
        }
        switch error.code {
        case .cannotConnect: Foundation.exit(3)
        case .paymentInvalid, .paymentNotAllowed, .productUnavailable, .insufficientCredits, .downloadRefused,
            .paymentCancelled,
            .notAuthenticated, .invalidRequest, .notFound, .invalidOfferIdentifier, .invalidSignature,
            .missingOfferParams, .ineligibleForOffer, .tooManyAttempts:
            Foundation.exit(1)
        default: Foundation.exit(4)
        }
    }

    /// Prints `value` as one line of JSON with `--json`, else `text`.
    func emit(_ value: some Encodable, text: String) {
        print(json ? Output.line(value) : text)
    }

    /// A list of transactions: `{key: [...]}` in JSON, a line each (or `empty`) as text.
    func emit(_ transactions: [Transaction], key: String, empty: String) {
        emit(
            [key: transactions.map(Output.TransactionObject.init)],
            text: transactions.isEmpty ? empty : transactions.map(line).joined(separator: "\n"))
    }
}

func line(_ transaction: Transaction) -> String {
    var text =
        "\(transaction.id)  \(transaction.productID) ×\(transaction.purchasedQuantity)  original \(transaction.originalID)"
    if let expiry = transaction.expirationDate { text += "  expires \(expiry.formatted(.iso8601))" }
    if let offer = transaction.offerID { text += "  offer \(offer)" }
    if transaction.state != "PURCHASED" { text += "  \(transaction.state)" }
    if transaction.revocationDate != nil { text += "  REVOKED" }
    if transaction.refundCreditShortfall > 0 { text += " (\(transaction.refundCreditShortfall) credits already spent)" }
    return text
}

/// Keeps the receipt of a transaction in the state directory (`receipts/`, 0600); returns its path.
func saveReceipt(_ transaction: Transaction, with kiosk: KioskClient) throws -> String {
    try kiosk.saveReceipt(of: transaction).path
}

struct Products: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List products and prices (all, or the ids given).")
    @OptionGroup var connection: Connection
    @Argument(help: "Product ids; none lists the whole catalog.") var ids: [String] = []

    func run() async throws {
        try await connection.run { kiosk in
            let result = try await kiosk.products(for: ids)
            connection.emit(
                Output.Products(
                    products: result.products.map {
                        Output.Products.Product(
                            id: $0.id, type: $0.type.rawValue, title: $0.displayName, price: "\($0.price)",
                            currency: $0.currencyCode, displayPrice: $0.displayPrice)
                    },
                    invalidProductIDs: result.invalidIdentifiers, storefront: result.storefrontCountryCode),
                text: (result.products.map { "\($0.id)  \($0.displayPrice)  \($0.type.rawValue)  \($0.displayName)" }
                    + result.invalidIdentifiers.map { "\($0)  (not sold)" }).joined(separator: "\n"))
        }
    }
}

struct Buy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Buy a product.")
    @OptionGroup var connection: Connection
    @Argument(help: "The product id.") var product: String
    @Option(help: "Units to buy.") var quantity: UInt32 = 1
    @Option(name: .customLong("payment-method"), help: "E.g. test-card:4242424242424242, test-cancel, test-ask.")
    var paymentMethod = "test-card:4242424242424242"
    @Option(
        help:
            "A subscription offer: introductory, or a promotional offer's id (with the --offer-* values the app's server signed)."
    )
    var offer: String?
    @Option(name: .customLong("offer-key-id"), help: "Promotional offer: the signing key's id.") var offerKeyID = ""
    @Option(name: .customLong("offer-nonce"), help: "Promotional offer: its single-use nonce.") var offerNonce = ""
    @Option(name: .customLong("offer-timestamp-ms"), help: "Promotional offer: when it was signed (ms since 1970).")
    var offerTimestampMs: Int64 = 0
    @Option(name: .customLong("offer-signature"), help: "Promotional offer: the Ed25519 signature, hex.")
    var offerSignature = ""

    var subscriptionOffer: SubscriptionOffer? {
        get throws {
            guard let offer else { return nil }
            if offer == "introductory" { return .introductory }
            var signature: [UInt8] = []
            let digits = Array(offerSignature.utf8)
            guard digits.count % 2 == 0 else { throw ValidationError("--offer-signature must be hex digits") }
            for index in stride(from: 0, to: digits.count, by: 2) {
                guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                    throw ValidationError("--offer-signature must be hex digits")
                }
                signature.append(byte)
            }
            return .promotional(
                offerID: offer, keyID: offerKeyID, nonce: offerNonce, timestampMs: offerTimestampMs,
                signature: signature)
        }
    }

    func run() async throws {
        let offer = try subscriptionOffer
        try await connection.run { kiosk in
            let queuedBefore = kiosk.queuedPaymentCount
            switch try await kiosk.purchase(
                productID: product, quantity: quantity, paymentMethod: paymentMethod, offer: offer)
            {
            case .success(let transaction):
                let receipt = try saveReceipt(transaction, with: kiosk)
                var object = Output.TransactionObject(transaction)
                object.state = "purchased"
                object.receiptFile = receipt
                connection.emit(
                    object, text: "purchased \(product) ×\(quantity): transaction \(transaction.id)\nreceipt \(receipt)"
                )
            case .pending:
                // Queued by this purchase (an older stuck entry must not turn an ask-to-buy into "queued").
                let queued = kiosk.queuedPaymentCount > queuedBefore
                connection.emit(
                    Output.PurchaseState(state: queued ? "queued" : "pending"),
                    text: queued
                        ? "queued: the store cannot be reached; it is sent on a later run"
                        : "pending: waiting for approval (ask to buy)")
                if queued { throw ExitCode(3) }
            case .userCancelled:
                connection.emit(Output.PurchaseState(state: "cancelled"), text: "cancelled")
                throw ExitCode(1)
            }
        }
    }
}

struct Redeem: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Redeem an offer code: the store buys its product at the code's price (a free code needs no method).")
    @OptionGroup var connection: Connection
    @Argument(help: "The code, e.g. ABCD-EFGH-JKLM-NPQR or a custom word.") var code: String
    @Option(name: .customLong("payment-method"), help: "A code that is not free: what pays, e.g. test-card:4242….")
    var paymentMethod = ""

    func run() async throws {
        try await connection.run { kiosk in
            switch try await kiosk.redeem(code: code, paymentMethod: paymentMethod) {
            case .success(let transaction):
                let receipt = try saveReceipt(transaction, with: kiosk)
                var object = Output.TransactionObject(transaction)
                object.state = "purchased"
                object.receiptFile = receipt
                connection.emit(
                    object,
                    text:
                        "redeemed: \(transaction.productID) ×\(transaction.purchasedQuantity), transaction \(transaction.id)\nreceipt \(receipt)"
                )
            case .pending:
                connection.emit(Output.PurchaseState(state: "pending"), text: "pending: waiting for approval")
            case .userCancelled:
                connection.emit(Output.PurchaseState(state: "cancelled"), text: "cancelled")
                throw ExitCode(1)
            }
        }
    }
}

struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Restore purchases (non-consumables and subscriptions).")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await connection.run { kiosk in
            var restored: [Transaction] = []
            for try await transaction in kiosk.restore() {
                restored.append(transaction)
                _ = try saveReceipt(transaction, with: kiosk)
            }
            connection.emit(restored, key: "transactions", empty: "nothing to restore")
        }
    }
}

struct Entitlements: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "What the account owns now: non-consumables and live subscriptions.")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await connection.run { kiosk in
            let owned = try await kiosk.currentEntitlements
            connection.emit(owned, key: "entitlements", empty: "no entitlements")
        }
    }
}

struct Access: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "The catalog's entitlements the account holds now (\"pro\"): what grants each, its source and its end; with an id, exit 1 unless it is held."
    )
    @OptionGroup var connection: Connection
    @Argument(help: "One entitlement id: print it, and exit 1 unless it is active.") var entitlementID: String?

    func run() async throws {
        var held = true
        try await connection.run { kiosk in
            let infos = try await kiosk.entitlements
            var shown = infos.active.values.sorted { $0.id < $1.id }
            if let entitlementID {
                shown = [infos[entitlementID]]
                held = infos[entitlementID].isActive
            }
            connection.emit(
                Output.Access(
                    entitlements: shown.map(Output.EntitlementObject.init),
                    confirmedDate: infos.confirmedDate.formatted(.iso8601), cached: infos.isCached ? true : nil),
                text: shown.isEmpty ? "no entitlements" : shown.map(line).joined(separator: "\n"))
        }
        if !held { throw ExitCode(1) }
    }
}

func line(_ entitlement: Entitlement) -> String {
    guard entitlement.isActive else { return "\(entitlement.id)  not active" }
    var text = "\(entitlement.id)  active  \(entitlement.source?.rawValue ?? "")  \(entitlement.productID ?? "")"
    text += "  \(entitlement.transactionID ?? "")"
    text += entitlement.expirationDate.map { "  until \($0.formatted(.iso8601))" } ?? "  no end"
    if entitlement.willRenew { text += "  renews" }
    return text
}

func line(_ status: SubscriptionStatus) -> String {
    var text = "\(status.originalTransactionID)  \(status.productID)  \(status.state.rawValue)"
    switch status.state {
    case .active:
        text +=
            status.willAutoRenew
            ? "  renews \(status.expirationDate.formatted(.iso8601))"
                + (status.renewalPrice.map { " for \($0) \(status.currencyCode)" } ?? "")
            : "  auto-renew off, ends \(status.expirationDate.formatted(.iso8601))"
    case .inGracePeriod:
        text +=
            "  payment failed; entitled until \(status.gracePeriodExpirationDate?.formatted(.iso8601) ?? "?"), retrying"
    case .inBillingRetry:
        text += "  payment failed; retrying until \(status.billingRetryEndDate?.formatted(.iso8601) ?? "?")"
    case .expired:
        text +=
            "  ended \(status.expirationDate.formatted(.iso8601))"
            + (status.expirationReason.map { " (\($0.rawValue))" } ?? "")
    case .revoked, .unknown:
        break
    }
    if status.priceIncreasePending {
        text += "  price increase: not agreed (kiosk accept-price \(status.originalTransactionID))"
    }
    return text + "  periods paid: \(status.periodsPaid)"
}

extension Connection {
    /// One subscription's status: its JSON object, or its line.
    func emit(_ status: SubscriptionStatus) { emit(Output.SubscriptionObject(status), text: line(status)) }
}

struct Subscriptions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Where the account's auto-renewable subscriptions stand: state, renewal date and price, grace and retry, why one expired."
    )
    @OptionGroup var connection: Connection
    @Argument(help: "One subscription's original transaction id (default: all).") var originalTransactionID: String?

    func run() async throws {
        try await connection.run { kiosk in
            let statuses = try await kiosk.subscriptionStatus(originalTransactionID: originalTransactionID)
            connection.emit(
                Output.Subscriptions(subscriptions: statuses.map(Output.SubscriptionObject.init)),
                text: statuses.isEmpty ? "no subscriptions" : statuses.map(line).joined(separator: "\n"))
        }
    }
}

struct AutoRenew: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "auto-renew",
        abstract: "Turn a subscription's auto-renew off (it ends with the paid period) or on again.")
    @OptionGroup var connection: Connection
    @Argument(help: "The subscription's original transaction id.") var originalTransactionID: String
    @Argument(help: "on or off.") var setting: String

    func validate() throws {
        guard setting == "on" || setting == "off" else { throw ValidationError("say on or off, not \"\(setting)\"") }
    }

    func run() async throws {
        try await connection.run { kiosk in
            connection.emit(try await kiosk.setAutoRenew(originalTransactionID: originalTransactionID, setting == "on"))
        }
    }
}

struct PaymentMethod: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "payment-method",
        abstract: "Replace the payment method renewals and billing retries are charged to.",
        discussion:
            "On Stripe the store saves it to your Stripe Customer for renewals without you (nothing is charged); a card the processor refuses changes nothing."
    )
    @OptionGroup var connection: Connection
    @Argument(help: "A pm_… id (pm_card_visa in Stripe's test mode), or test-card:… on a sandbox store.")
    var paymentMethod: String

    func run() async throws {
        try await connection.run { kiosk in
            let saved = try await kiosk.setPaymentMethod(paymentMethod)
            connection.emit(
                Output.SavedPaymentMethod(paymentMethod: saved.paymentMethod, subscriptions: saved.subscriptions),
                text:
                    "renewals now charge \(saved.paymentMethod) (\(saved.subscriptions) live subscription\(saved.subscriptions == 1 ? "" : "s"))"
            )
        }
    }
}

struct AcceptPrice: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept-price",
        abstract: "Agree to a subscription's new, higher price (without it, it ends with its period).")
    @OptionGroup var connection: Connection
    @Argument(help: "The subscription's original transaction id.") var originalTransactionID: String

    func run() async throws {
        try await connection.run { kiosk in
            connection.emit(try await kiosk.consentToPriceIncrease(originalTransactionID: originalTransactionID))
        }
    }
}

struct Balance: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The account's credit balance.")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await connection.run { kiosk in
            let balance = try await kiosk.creditBalance
            connection.emit(Output.Balance(balance: Int64(clamping: balance)), text: "\(balance) credits")
        }
    }
}

struct StorefrontCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storefront",
        abstract: "The account's storefront, or move it to another (an ISO 3166-1 alpha-3 country code).",
        discussion: """
            Products are listed and charged in the storefront's prices. After a move, subscriptions keep their price \
            to the end of the period paid, then renew in the new storefront's price; when that is higher or in \
            another currency, `kiosk accept-price` must agree to it first or the subscription ends with its period.
            """)
    @OptionGroup var connection: Connection
    @Argument(help: "The storefront to move to, e.g. FRA; none prints the current one.") var storefront: String?

    func run() async throws {
        try await connection.run { kiosk in
            guard let storefront else {
                let current = try await kiosk.storefrontCountryCode
                connection.emit(Output.Storefront(storefront: current), text: current)
                return
            }
            let previous = try await kiosk.storefrontCountryCode
            let now = try await kiosk.setStorefront(storefront)
            connection.emit(
                Output.Storefront(storefront: now, previous: previous),
                text: previous == now ? "storefront \(now) (unchanged)" : "storefront \(now) (was \(previous))")
        }
    }
}

struct Spend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Spend credits.")
    @OptionGroup var connection: Connection
    @Argument(help: "Credits to spend.") var amount: Int64

    func run() async throws {
        try await connection.run { kiosk in
            let balance = try await kiosk.spendCredits(amount)
            connection.emit(
                Output.Balance(balance: Int64(clamping: balance), spent: amount),
                text: "spent \(amount); \(balance) credits left")
        }
    }
}

struct Unfinished: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Transactions not finished yet.")
    @OptionGroup var connection: Connection

    func run() async throws {
        try await connection.run { kiosk in
            let open = try await kiosk.unfinishedTransactions
            connection.emit(open, key: "transactions", empty: "no unfinished transactions")
        }
    }
}

struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Every transaction of the account, consumables included, oldest first (paged from the store).")
    @OptionGroup var connection: Connection
    @Option(help: "Only these products (comma-separated).") var product: String?
    @Flag(help: "Only refunded (revoked) transactions.") var refunded = false

    func run() async throws {
        try await connection.run { kiosk in
            var all: [Transaction] = []
            let products = (product ?? "").split(separator: ",").map { String($0) }
            for try await transaction in kiosk.allTransactions(
                productIDs: products, revokedOnly: refunded, pageSize: 500)
            { all.append(transaction) }
            connection.emit(all, key: "transactions", empty: "no transactions")
        }
    }
}

struct TransactionLookup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transaction", abstract: "Look one of the account's transactions up by id.")
    @OptionGroup var connection: Connection
    @Argument(help: "The transaction id.") var id: String

    func run() async throws {
        try await connection.run { kiosk in
            connection.emit([try await kiosk.transaction(id: id)], key: "transactions", empty: "")
        }
    }
}

struct RequestRefund: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request-refund",
        abstract:
            "Ask for a refund of one of the account's purchases; the store's operator grants or denies it (asking again shows where it stands)."
    )
    @OptionGroup var connection: Connection
    @Option(help: "Why (shown to the operator).") var reason = ""
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        try await connection.run { kiosk in
            let request = try await kiosk.requestRefund(transactionID: transaction, reason: reason)
            var object = Output.RefundRequested(
                transactionID: request.transactionID, productID: request.productID, reason: request.reason,
                state: request.state.rawValue,
                requestedMs: Int64(request.requestDate.timeIntervalSince1970 * 1000))
            var text = "refund of \(request.transactionID) (\(request.productID)) requested: \(request.state.rawValue)"
            if let decided = request.decisionDate {
                object.decidedMs = Int64(decided.timeIntervalSince1970 * 1000)
                object.decisionReason = request.decisionReason ?? ""
                text += " (\(request.decisionReason ?? ""))"
            }
            connection.emit(object, text: text)
        }
    }
}

struct Finish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Finish a transaction (the product was delivered).")
    @OptionGroup var connection: Connection
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        try await connection.run { kiosk in
            try await kiosk.finish(transactionID: transaction)
            connection.emit(Output.Finished(finished: transaction), text: "finished \(transaction)")
        }
    }
}

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Ask the store whether a receipt file is real.")
    @OptionGroup var connection: Connection
    @Argument(help: "A receipt file (as saved by buy or restore).") var file: String

    func run() async throws {
        try await connection.run { kiosk in
            guard let data = FileManager.default.contents(atPath: file) else {
                throw KioskError(.notFound, "cannot read \(file)")
            }
            let result = try await kiosk.verify(receipt: [UInt8](data))
            let object = Output.Verified(
                status: Int(result.status), valid: result.isValid, message: result.message,
                transactionID: result.transactionID, productID: result.productID,
                revocationReason: result.revocationReason)
            connection.emit(
                object,
                text: "status \(result.status): \(result.message)"
                    + (result.transactionID.map { " (transaction \($0), \(result.productID ?? "?"))" } ?? ""))
            if !result.isValid { throw ExitCode(1) }
        }
    }
}

struct Download: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download a bought hosted product, then finish its transaction.")
    @OptionGroup var connection: Connection
    @Argument(help: "The product id.") var product: String
    @Option(help: "Directory for the file.") var out = "."

    func run() async throws {
        try await connection.run { kiosk in
            var owned: Transaction?
            for try await transaction in kiosk.restore()
            where transaction.productID == product && transaction.isActive() {
                owned = transaction
            }
            if owned == nil {
                owned = try await kiosk.unfinishedTransactions.first { $0.productID == product }
            }
            guard let transaction = owned else {
                throw KioskError(.downloadRefused, "this account has not bought \(product)")
            }
            let download = kiosk.download(productID: product, transaction: transaction, to: URL(fileURLWithPath: out))
            let terminal = isatty(STDOUT_FILENO) == 1 && !connection.json
            var lastPercent = -100
            for await event in download.events {
                let percent = Int(event.progress * 100)
                switch event.state {
                case .active where terminal:
                    let width = 30
                    let filled = Int(event.progress * Double(width))
                    let eta = event.estimatedTimeRemaining.map { " ETA \($0.components.seconds)s" } ?? ""
                    FileHandle.standardOutput.write(
                        Data(
                            "\r[\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(percent)% \(event.bytesDone)/\(event.totalBytes) bytes\(eta)   "
                                .utf8))
                case .active where !connection.json && percent / 25 != lastPercent / 25:
                    print("downloading \(product): \(percent)% (\(event.bytesDone)/\(event.totalBytes) bytes)")
                    lastPercent = percent
                default:
                    break
                }
            }
            if terminal { print("") }
            let file = try await download.result()
            try await kiosk.finish(transaction)
            connection.emit(
                Output.Downloaded(productID: product, file: file.path, transactionID: transaction.id, finished: true),
                text: "downloaded \(product) to \(file.path); transaction \(transaction.id) finished")
        }
    }
}
