#if KIOSK_FUZZ
// The libFuzzer build (Scripts/fuzz.sh: -sanitize=fuzzer -DKIOSK_FUZZ).
//
// libFuzzer's own `main` cannot be used: SwiftPM links every executable
// product with `main` aliased to the module's renamed entry point
// (`kiosk_fuzz_main`, so tests can link the module), which a target without
// @main leaves undefined. So this @main hands the arguments to libFuzzer's
// driver, exactly what libFuzzer's `main` does.

import CLibFuzzer
import KioskFuzzing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTest(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    fuzzOne(UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size))
    return 0
}

@main
enum KioskFuzz {
    static func main() {
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzTest))
    }
}

#else
// The normal build: a corpus replayer. `kiosk-fuzz PATH...` runs every file
// (directories recursively) through `fuzzOne` and prints how many it ran; a
// crash is a regression.

import Foundation
import KioskFuzzing

@main
enum KioskFuzz {
    static func main() {
        let paths = Array(CommandLine.arguments.dropFirst())
        guard !paths.isEmpty else {
            FileHandle.standardError.write(Data("usage: kiosk-fuzz FILE-OR-DIRECTORY...\n".utf8))
            exit(2)
        }
        do {
            let verbose = ProcessInfo.processInfo.environment["KIOSK_FUZZ_VERBOSE"] != nil
            let count = try replay(paths) { path in
                if verbose { print(path) }
            }
            print("kiosk-fuzz: replayed \(count) inputs")
        } catch {
            FileHandle.standardError.write(Data("kiosk-fuzz: \(error)\n".utf8))
            exit(1)
        }
    }
}
#endif
