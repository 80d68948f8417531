// The store's domain types (subscriptions, money, the payment processor port) are part of this
// library's API: a program that imports KioskStore sees them.
@_exported import KioskStoreCore
