import KioskCommands

/// The program: `KioskCommand`, defined in `KioskCommands`.
@main
extension KioskCommand {}
