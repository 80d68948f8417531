import KioskStore

/// What the `kiosk-store` commands print with `--json` (one line each, ``JSONLine``): the field names
/// scripts read, kept in one place.
enum Output {
    /// `account create --json`.
    struct AccountCreated: Encodable {
        var accountID: String, token: String, paymentsAllowed: Bool, storefront: String
        enum CodingKeys: String, CodingKey {
            case accountID = "account_id", token, paymentsAllowed = "payments_allowed", storefront
        }
    }

    /// `service create --json`.
    struct ServiceCredentialCreated: Encodable {
        var id: String, role: String, credential: String
    }

    /// `reconcile --json`.
    struct Reconciled: Encodable {
        struct Intents: Encodable { var pending: Int, completed: Int, closed: Int }
        var charged: Int, deferred: Int, closed: Int, refunded: Int, left: Int
        var intents: Intents
    }

    /// `keys export`: the public keys for receipt verifiers.
    struct PublicKeys: Encodable {
        struct Key: Encodable {
            var keyID: String, ed25519PublicKey: String, notBeforeMs: Int64, notAfterMs: Int64
            enum CodingKeys: String, CodingKey {
                case keyID = "key_id", ed25519PublicKey = "ed25519_public_key", notBeforeMs = "not_before_ms",
                    notAfterMs = "not_after_ms"
            }
        }
        var keys: [Key]
    }
}
