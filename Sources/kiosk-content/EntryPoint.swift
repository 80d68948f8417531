import KioskContentCommands

/// The program: `KioskContentCommand`, defined in `KioskContentCommands`.
@main
extension KioskContentCommand {}
