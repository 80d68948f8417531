import Foundation
import KioskStoreCore

extension ServiceCredentialRecord {
    init(row: LedgerRow) throws {
        // The table's CHECK allows content and admin only; anything else gets the role with no service method.
        self.init(
            id: try row["id"], role: CallerRole(rawValue: try row["role"]) ?? .account, name: try row["name"],
            createdMs: try row["created_ms"], revokedMs: try row["revoked_ms"])
    }
}

extension Ledger {
    package func addServiceCredential(_ credential: ServiceCredentialRecord, tokenHash: [UInt8]) throws {
        try backend.write { db in
            try db.addServiceCredential(credential, tokenHash: tokenHash)
            try db.recordOperatorAction(
                "created service credential \(credential.id) (role \(credential.role.rawValue), named \(credential.name))",
                nowMs: credential.createdMs)
        }
    }

    /// The credential a secret's hash belongs to, unless revoked.
    package func serviceCredential(tokenHash: [UInt8]) async throws -> ServiceCredentialRecord? {
        try await backend.read { db in try db.serviceCredential(tokenHash: tokenHash) }
    }

    /// Every service credential, revoked ones included, oldest first.
    public func serviceCredentials() throws -> [ServiceCredentialRecord] {
        try backend.read { db in try db.serviceCredentials() }
    }

    /// Marks a credential revoked (and wakes the revocation feeds); false when there is no such credential.
    package func revokeServiceCredential(id: String, nowMs: Int64) throws -> Bool {
        try backend.write { db in
            let revoked = try db.revokeServiceCredential(id: id, nowMs: nowMs)
            if revoked {
                try db.recordOperatorAction("revoked service credential \(id)", nowMs: nowMs)
                try Self.announceChange(db)
            }
            return try revoked || db.serviceCredentials().contains { $0.id == id }
        }
    }
}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    public func addServiceCredential(_ credential: ServiceCredentialRecord, tokenHash: [UInt8]) throws {
        do {
            try execute(
                "INSERT INTO service_credentials (id, role, name, token_hash, created_ms) VALUES (?, ?, ?, ?, ?)",
                [credential.id, credential.role.rawValue, credential.name, tokenHash, credential.createdMs])
        } catch let error as LedgerError where error.kind == .uniqueViolation {
            throw StoreError(.conflict, "service credential \(credential.id) or its secret exists already")
        }
    }

    public func serviceCredential(tokenHash: [UInt8]) throws -> ServiceCredentialRecord? {
        try fetchOne("SELECT * FROM service_credentials WHERE token_hash = ? AND revoked_ms = 0", [tokenHash]).map(
            ServiceCredentialRecord.init)
    }

    public func serviceCredentials() throws -> [ServiceCredentialRecord] {
        try fetchAll("SELECT * FROM service_credentials ORDER BY created_ms, id").map(ServiceCredentialRecord.init)
    }

    public func revokeServiceCredential(id: String, nowMs: Int64) throws -> Bool {
        try execute("UPDATE service_credentials SET revoked_ms = ? WHERE id = ? AND revoked_ms = 0", [nowMs, id]) > 0
    }

    public func revokedServiceCredentialIDs() throws -> Set<String> {
        Set(try values(String.self, "SELECT id FROM service_credentials WHERE revoked_ms > 0"))
    }
}
