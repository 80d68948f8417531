import KioskStoreCommands

/// The program: `KioskStoreCommand`, defined in `KioskStoreCommands`.
@main
extension KioskStoreCommand {}
