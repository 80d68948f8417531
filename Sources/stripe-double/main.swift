// A local double of Stripe's PaymentIntents API (the StripeDouble test-support target),
// in its own process: the payment processor of Scripts/crash-test.sh, which
// counts the charges it made (GET /_double/stats) while the store is killed.
//
//     stripe-double [--secret-key sk_test_…]
//
// Listens on a free port of 127.0.0.1, prints "stripe-double listening on
// 127.0.0.1:PORT" and serves until SIGTERM or SIGINT.
import Foundation
import KioskHosting
import Logging
import StripeDouble

#if canImport(Glibc)
import Glibc
#endif

var secretKey = StripeDouble.defaultSecretKey
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--secret-key": secretKey = arguments.popFirst() ?? secretKey
    default:
        FileHandle.standardError.write(Data("usage: stripe-double [--secret-key sk_test_…]\n".utf8))
        exit(64)
    }
}
let double = StripeDouble(secretKey: secretKey)
try await double.start()
let banner = "stripe-double listening on 127.0.0.1:\(double.port) (key \(secretKey))\n"
// The banner once SIGTERM is trapped: a script may signal as soon as it reads it.
try await ServiceHosting.serve(
    announce: { FileHandle.standardOutput.write(Data(banner.utf8)) },
    shutdown: { try? await double.shutdown() },
    reloading: nil, logger: Logger(label: "stripe-double"))
