import Foundation
import Kiosk

/// Buys a product from a Kiosk store and downloads its hosted file from the content service, as a program built
/// on the SDK would: lists the product, buys it with a test card, downloads the file showing its progress,
/// finishes the transaction and prints the file's path. Exits non-zero, saying why, if any step fails.
///
///     KIOSK_TOKEN=kiosk_… buy-and-download [PRODUCT] [DIRECTORY]
@main
struct BuyAndDownload {
    static let usage = """
        usage: buy-and-download [PRODUCT] [DIRECTORY]
        Buys PRODUCT (default book.swift) with a test card, downloads its hosted file into DIRECTORY (default: \
        the current directory), finishes the transaction and prints the file's path; progress goes to stderr.
        Environment: KIOSK_TOKEN (the account's token, required), KIOSK_STORE and KIOSK_CONTENT (host:port, \
        default 127.0.0.1:7301 and 127.0.0.1:7302), KIOSK_TLS_CA (TLS trusting this CA's PEM; without it \
        plaintext, to loopback only), KIOSK_STATE_DIR (the SDK's state; default: a new temporary directory).
        Exit status: 0 done, 1 refused, 3 a service cannot be reached or the purchase is pending, 4 any other \
        error, 64 bad usage.
        """
    static let paymentMethod = "test-card:4242424242424242"

    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.contains("-h") || arguments.contains("--help") {
            print(usage)
            return
        }
        guard arguments.count <= 2 else { fail(Failure(message: "too many arguments\n\(usage)", status: 64)) }
        let environment = ProcessInfo.processInfo.environment
        func variable(_ name: String) -> String? {
            environment[name].flatMap { $0.isEmpty ? nil : $0 }
        }
        guard let token = variable("KIOSK_TOKEN") else {
            fail(Failure(message: "KIOSK_TOKEN is not set (`kiosk-store account create` prints a token)", status: 64))
        }
        let productID = arguments.first ?? "book.swift"
        let directory = URL(fileURLWithPath: arguments.count > 1 ? arguments[1] : ".")
        // Without KIOSK_STATE_DIR, a directory of this run's own (removed at the end unless a payment is queued).
        let temporaryState = variable("KIOSK_STATE_DIR") == nil
        let stateDirectory =
            variable("KIOSK_STATE_DIR")
            ?? (NSTemporaryDirectory() as NSString).appendingPathComponent("buy-and-download-" + UUID().uuidString)

        var configuration = KioskConfiguration(token: token, stateDirectory: stateDirectory)
        do {
            configuration.storeEndpoints = try ServiceEndpoint.list(
                parsing: variable("KIOSK_STORE") ?? "127.0.0.1:7301")
            configuration.contentEndpoints = try ServiceEndpoint.list(
                parsing: variable("KIOSK_CONTENT") ?? "127.0.0.1:7302")
        } catch {
            fail(Failure(message: "KIOSK_STORE or KIOSK_CONTENT: \(error)", status: 64))
        }
        if let roots = variable("KIOSK_TLS_CA") {
            configuration.transportSecurity = .tls(trustRootsPath: roots)
        }

        let kiosk: KioskClient
        do {
            kiosk = try KioskClient(configuration: configuration)
        } catch {
            fail(error)
        }
        var failure: (any Error)?
        do {
            let file = try await buyAndDownload(productID, into: directory, with: kiosk)
            print(file.path)
        } catch {
            failure = error
        }
        await kiosk.close()
        if temporaryState {
            if kiosk.queuedPaymentCount == 0 {
                try? FileManager.default.removeItem(atPath: stateDirectory)
            } else {
                note("a payment is still queued in \(stateDirectory): run again with KIOSK_STATE_DIR=\(stateDirectory)")
            }
        }
        if let failure { fail(failure) }
    }

    /// The journey: the product, the purchase, the download, the finish. Returns the file's location.
    static func buyAndDownload(_ productID: String, into directory: URL, with kiosk: KioskClient) async throws -> URL {
        guard let product = try await kiosk.products(for: [productID]).products.first else {
            throw Failure(message: "the store does not sell \(productID)", status: 1)
        }
        note("\(product.id): \(product.displayName), \(product.displayPrice)")
        guard product.hostsContent else {
            throw Failure(message: "\(product.id) has no hosted file to download", status: 1)
        }

        let transaction: Transaction
        switch try await kiosk.purchase(product, paymentMethod: paymentMethod) {
        case .success(let bought):
            // A product bought before is answered with its transaction, not charged again.
            transaction = bought
            note("bought \(product.id): transaction \(bought.id)")
        case .pending:
            throw Failure(
                message: "the purchase of \(product.id) is pending: waiting for approval, or queued until the "
                    + "store can be reached (it is sent again by a later run with the same KIOSK_STATE_DIR)",
                status: 3)
        case .userCancelled:
            throw Failure(message: "the purchase of \(product.id) was cancelled", status: 1)
        }

        // Into a hidden partial file beside the destination, checked, then renamed into place.
        let download = kiosk.download(productID: product.id, transaction: transaction, to: directory)
        var reported = -1
        for await event in download.events {
            guard case .active = event.state, event.totalBytes > 0 else { continue }
            let tenths = Int(event.progress * 10)
            if tenths != reported {
                reported = tenths
                note("downloading \(product.id): \(tenths * 10)% (\(event.bytesDone) of \(event.totalBytes) bytes)")
            }
        }
        let file = try await download.result()
        // Delivered: only now is the transaction finished.
        try await kiosk.finish(transaction)
        note("downloaded \(product.id); transaction \(transaction.id) finished")
        return file
    }

    /// Prints why on standard error and exits with the status the error calls for.
    static func fail(_ error: any Error) -> Never {
        let status: Int32
        let message: String
        if let failure = error as? Failure {
            status = failure.status
            message = failure.message
        } else if let error = error as? KioskError {
            message = "\(error.message) (\(error.code))"
            switch error.code {
            case .cannotConnect:
                status = 3
            case .paymentInvalid, .paymentNotAllowed, .paymentCancelled, .productUnavailable, .notAuthenticated,
                .downloadRefused, .notFound:
                status = 1
            default:
                status = 4
            }
        } else {
            status = 4
            message = "\(error)"
        }
        FileHandle.standardError.write(Data("buy-and-download: \(message)\n".utf8))
        exit(status)
    }
}

/// A step that cannot go on: what to say, and the exit status.
struct Failure: Error {
    var message: String
    var status: Int32
}

/// One line of progress on standard error (standard output carries only the file's path).
func note(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
