// The store's domain types (records, lifecycles, money, the ports), its ledger (SQLite and
// PostgreSQL) and its integrations (Stripe, webhook delivery over HTTP) are part of this library's
// API: a program that imports KioskStore sees them.
@_exported import KioskSigning
@_exported import KioskStoreCore
@_exported import KioskStoreIntegrations
@_exported import KioskStoreLedger
