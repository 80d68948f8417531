import ArgumentParser
import Foundation
import KioskAPI
import KioskRPC
import KioskStore
import KioskWire
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// `kiosk-bench crash`: the store under purchase load, killed with SIGKILL at
/// random moments and restarted, with the payment processor (the Stripe API
/// double) in its own process counting the charges it made. Clients retry
/// every unanswered purchase with its idempotency key. At the end every
/// answered purchase must be in the ledger exactly once, charges must equal
/// recorded transactions, every balance the sum of its movements, and no
/// payment intent may be left open after reconciliation.
struct CrashTest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash",
        abstract: "Kill the store with SIGKILL under purchase load and check that no money is lost or taken twice.")
    @Option(help: "How many times the store is killed.") var kills = 20
    @Option(help: "Clients buying at once (one account each).") var clients = 4
    @Option(help: "Purchases in flight per client.") var inFlight = 4
    @Option(
        help: "Longest time between a start and its kill, in milliseconds (each kill waits a random time up to it).")
    var maxLifeMs = 600
    @Option(help: "A seed for the kill times (default: random).") var seed: UInt64?
    @Option(help: "Keep the data dir here instead of a temporary one.") var dataDir: String?

    func run() async throws {
        let root = dataDir ?? (NSTemporaryDirectory() + "kiosk-crash-" + UUID().uuidString)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { if dataDir == nil { try? FileManager.default.removeItem(atPath: root) } }
        let bin = URL(
            fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0]
        )
        .deletingLastPathComponent()
        let storeBinary = bin.appendingPathComponent("kiosk-store").path
        let doubleBinary = bin.appendingPathComponent("stripe-double").path
        var random = SeededRandom(seed: seed ?? UInt64.random(in: 1...UInt64.max))
        print(
            "crash: seed \(random.seed), \(kills) kills, \(clients) clients × \(inFlight) in flight, data dir \(root)")

        // The processor, in its own process.
        let processor = try Child(binary: doubleBinary, arguments: [], readyPrefix: "stripe-double listening on")
        defer { processor.stop(SIGTERM) }
        let processorPort = try processor.port()
        let keyFile = root + "/stripe.key"
        try Data("sk_test_kiosk_stripe_double\n".utf8).write(to: URL(fileURLWithPath: keyFile))
        let catalog = root + "/catalog.json"
        try Data(
            #"""
            {"bundle_id": "com.example.crash", "products": [
              {"id": "credits.5", "type": "consumable", "title": "5 credits", "price": "0.99", "currency": "USD", "credits": 5, "max_quantity": 10},
              {"id": "credits.10", "type": "consumable", "title": "10 credits", "price": "1.79", "currency": "USD", "credits": 10, "max_quantity": 10}
            ]}
            """#.utf8
        ).write(to: URL(fileURLWithPath: catalog))
        let data = root + "/store"
        var created: [String] = []
        for _ in 0..<clients {
            let output = try Child.output(storeBinary, ["account", "create", "--data-dir", data, "--json"])
            guard let token = output.split(separator: "\"").drop(while: { $0 != "token" }).dropFirst(2).first else {
                throw ValidationError("account create printed \(output)")
            }
            created.append(String(token))
        }
        let serveArguments = [
            "serve", "--data-dir", data, "--catalog", catalog, "--port", "0", "--log-level", "error",
            "--payment-processor", "stripe", "--stripe-key-file", keyFile,
            "--stripe-api-base", "http://127.0.0.1:\(processorPort)", "--stripe-lookup-delay-ms", "0",
        ]

        let book = Book(clients: clients)
        let tokens = created
        let inFlight = inFlight
        var killsDone = 0
        var generation = 0
        while true {
            let store = try Child(
                binary: storeBinary, arguments: serveArguments, readyPrefix: "kiosk-store listening on")
            let port = try store.port()
            generation += 1
            let finalRound = killsDone == kills
            let client = RPCClient(
                host: "127.0.0.1", port: port,
                configuration: ClientConfiguration(
                    backoff: ConnectionBackoff(
                        initial: .milliseconds(5), maximum: .milliseconds(20), multiplier: 2, jitter: 0,
                        maximumAttempts: 2)))
            if finalRound {
                // No more kills: every purchase not answered yet is retried until it is.
                await book.drive(client: client, tokens: tokens, inFlight: inFlight, newPurchases: false, until: nil)
                await client.close()
                store.stop(SIGTERM)
                break
            }
            let life = Duration.milliseconds(Int64(random.next(upTo: UInt64(maxLifeMs)) + 20))
            let deadline = ContinuousClock.now + life
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    await book.drive(
                        client: client, tokens: tokens, inFlight: inFlight, newPurchases: true, until: deadline)
                }
                group.addTask {
                    try? await Task.sleep(until: deadline)
                    store.stop(SIGKILL)
                }
            }
            await client.close()
            killsDone += 1
        }

        // Settle what the dead processes left (a store is not running now), then check.
        let reconciled = try Child.output(
            storeBinary,
            [
                "reconcile", "--data-dir", data, "--catalog", catalog, "--all", "--json",
                "--payment-processor", "stripe", "--stripe-key-file", keyFile,
                "--stripe-api-base", "http://127.0.0.1:\(processorPort)", "--stripe-lookup-delay-ms", "0",
            ])
        let stats = try Child.get("http://127.0.0.1:\(processorPort)/_double/stats")
        let charges =
            (try JSONSerialization.jsonObject(with: Data(stats.utf8)) as? [String: Any])?["charges"] as? Int ?? -1

        let ledger = try Ledger(directory: data)
        var failures: [String] = []
        var recorded = 0
        var balancesChecked = 0
        var answeredPurchases = 0
        for (index, token) in tokens.enumerated() {
            guard let account = try await ledger.account(tokenHash: Store.tokenHash(token)) else {
                failures.append("account of client \(index) missing")
                continue
            }
            let transactions = try ledger.transactions(accountID: account.id)
            recorded += transactions.count
            let byID = Dictionary(grouping: transactions, by: \.id)
            for (key, answer) in book.answers(client: index) {
                answeredPurchases += 1
                if (byID[answer]?.count ?? 0) != 1 {
                    failures.append(
                        "answered purchase \(key) (\(answer)) is in the ledger \(byID[answer]?.count ?? 0) times")
                }
            }
            if Set(transactions.compactMap(\.paymentID)).count != transactions.count {
                failures.append("a payment id is recorded twice")
            }
            let movements = try ledger.creditMovementsTotal(accountID: account.id)
            if movements != Int64(account.creditBalance) {
                failures.append("client \(index): balance \(account.creditBalance) ≠ movements \(movements)")
            }
            let bought = transactions.reduce(UInt64(0)) { $0 + $1.credits }
            if bought != account.creditBalance {
                failures.append("client \(index): balance \(account.creditBalance) ≠ credits bought \(bought)")
            }
            balancesChecked += 1
        }
        let open = try ledger.intentCounts()[.pending] ?? 0
        let reconciledCounts = try ledger.reconciledCounts()
        if charges != recorded {
            failures.append("the processor made \(charges) charges, the ledger records \(recorded) transactions")
        }
        if open != 0 { failures.append("\(open) payment intents still open after reconciliation") }
        let unanswered = book.unanswered
        if unanswered != 0 { failures.append("\(unanswered) purchases never answered") }
        print(
            "crash: \(killsDone) kills (SIGKILL), \(generation) store starts; answered purchases \(answeredPurchases), retried after a failure \(book.retries), abandoned after a failure (never retried) \(book.abandoned)"
        )
        print(
            "crash: ledger transactions \(recorded), processor charges \(charges), balances checked \(balancesChecked) (each = sum of its movements), open intents \(open)"
        )
        print(
            "crash: payments the store died in the middle of, settled by reconciliation: \(reconciledCounts.charged) found charged and recorded, \(reconciledCounts.closed) found uncharged and closed"
        )
        print("crash: final reconcile \(reconciled.trimmingCharacters(in: .whitespacesAndNewlines))")
        if failures.isEmpty {
            print("crash: OK — every answered purchase recorded once, charges = transactions, no intent open")
        } else {
            for failure in failures { print("crash: FAIL \(failure)") }
            throw ExitCode(1)
        }
    }
}

/// Which purchases each client has made and what the store answered.
final class Book: Sendable {
    private struct State {
        var next: [Int]
        var answers: [[String: String]]  // per client: key → transaction id
        var pending: [Set<Int>]  // per client: purchase numbers sent, not answered
        var retries = 0
        var abandoned = 0
    }
    private let state: NIOLockedValueBox<State>

    init(clients: Int) {
        state = NIOLockedValueBox(
            State(
                next: Array(repeating: 0, count: clients), answers: Array(repeating: [:], count: clients),
                pending: Array(repeating: [], count: clients)))
    }

    func answers(client: Int) -> [String: String] { state.withLockedValue { $0.answers[client] } }
    var unanswered: Int { state.withLockedValue { $0.pending.reduce(0) { $0 + $1.count } } }
    var retries: Int { state.withLockedValue { $0.retries } }
    var abandoned: Int { state.withLockedValue { $0.abandoned } }

    /// Every fifth buyer never comes back (the app was deleted): its purchase is not retried after a failure.
    /// Only reconciliation can then record a charge the store made before it died.
    static func isAbandonedOnFailure(_ number: Int) -> Bool { number % 5 == 4 }

    private func failed(client: Int, number: Int) {
        guard Self.isAbandonedOnFailure(number) else { return }
        state.withLockedValue { state in
            if state.pending[client].remove(number) != nil { state.abandoned += 1 }
        }
    }

    static func key(client: Int, number: Int) -> String { "crash-\(client)-\(number)" }
    static func quantity(_ number: Int) -> UInt32 { UInt32(number % 3 + 1) }

    /// The next purchase for `client`: an unanswered one first (a retry), else a new one (when allowed).
    private func take(client: Int, newPurchases: Bool, busy: inout Set<Int>) -> Int? {
        state.withLockedValue { state in
            if let retry = state.pending[client].subtracting(busy).min() {
                busy.insert(retry)
                state.retries += 1
                return retry
            }
            guard newPurchases else { return nil }
            let number = state.next[client]
            state.next[client] += 1
            state.pending[client].insert(number)
            busy.insert(number)
            return number
        }
    }

    private func answered(client: Int, number: Int, transactionID: String) {
        state.withLockedValue { state in
            state.pending[client].remove(number)
            state.answers[client][Self.key(client: client, number: number)] = transactionID
        }
    }

    /// Purchases from every client until `until` (or, with nil, until every purchase is answered).
    func drive(
        client: RPCClient, tokens: [String], inFlight: Int, newPurchases: Bool, until deadline: ContinuousClock.Instant?
    ) async {
        await withTaskGroup(of: Void.self) { group in
            for (index, token) in tokens.enumerated() {
                let busy = NIOLockedValueBox<Set<Int>>([])
                for _ in 0..<inFlight {
                    group.addTask {
                        var failuresInARow = 0
                        while deadline.map({ ContinuousClock.now < $0 }) ?? true {
                            guard
                                let number = busy.withLockedValue({
                                    self.take(client: index, newPurchases: newPurchases, busy: &$0)
                                })
                            else { return }
                            defer { _ = busy.withLockedValue { $0.remove(number) } }
                            var options = bearer(token, timeout: .seconds(5))
                            options.metadata.add("idempotency-key", Self.key(client: index, number: number))
                            let request = StoreV1.PurchaseRequest(
                                productID: number % 2 == 0 ? "credits.5" : "credits.10",
                                quantity: Self.quantity(number), paymentMethod: "pm_card_visa")
                            do {
                                let response = try await client.unary(
                                    "/kiosk.store.v1.Store/Purchase", request: request,
                                    response: StoreV1.PurchaseResponse.self, options: options)
                                if let transaction = response.transaction, transaction.state == .purchased {
                                    self.answered(
                                        client: index, number: number, transactionID: transaction.transactionID)
                                    failuresInARow = 0
                                }
                            } catch {
                                // Killed mid-call, or not up yet: it stays pending and is sent again (unless its buyer gives up).
                                self.failed(client: index, number: number)
                                failuresInARow += 1
                                if deadline == nil, failuresInARow > 50 { return }
                                if deadline == nil { try? await Task.sleep(for: .milliseconds(10)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A child process that prints `<readyPrefix> 127.0.0.1:PORT …` when it is ready.
final class Child: Sendable {
    let process: Process
    private let line: String

    init(binary: String, arguments: [String], readyPrefix: String) throws {
        let (process, output) = try Self.launch(binary, arguments)
        var bytes: [UInt8] = []
        while !bytes.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            bytes += chunk
        }
        line = String(decoding: bytes, as: UTF8.self)
        self.process = process
        guard line.hasPrefix(readyPrefix) else {
            process.terminate()
            throw ValidationError("\(binary) did not start: \(line)")
        }
    }

    func port() throws -> Int {
        guard let address = line.split(separator: " ").first(where: { $0.hasPrefix("127.0.0.1:") }),
            let port = Int(address.dropFirst("127.0.0.1:".count))
        else { throw ValidationError("no port in \(line)") }
        return port
    }

    func stop(_ signal: Int32) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
    }

    /// Starts `binary` with its standard output on a pipe.
    private static func launch(_ binary: String, _ arguments: [String]) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        return (process, output)
    }

    /// Runs a command to its end; its standard output.
    static func output(_ binary: String, _ arguments: [String]) throws -> String {
        let (process, output) = try launch(binary, arguments)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw ValidationError("\(binary) \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// An HTTP GET on loopback with curl (Scripts/setup.sh installs it when missing).
    static func get(_ url: String) throws -> String {
        try output("/usr/bin/curl", ["-sf", url])
    }
}

/// splitmix64: reproducible kill times from a printed seed.
struct SeededRandom {
    let seed: UInt64
    private var state: UInt64
    init(seed: UInt64) {
        self.seed = seed
        state = seed
    }
    mutating func next(upTo bound: UInt64) -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return (z ^ (z >> 31)) % max(bound, 1)
    }
}
