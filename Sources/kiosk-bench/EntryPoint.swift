import KioskBenchCommands

/// The program: `KioskBench`, defined in `KioskBenchCommands`.
@main
extension KioskBench {}
