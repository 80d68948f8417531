import KioskStoreCore

extension LedgerMigration {
    /// v16-support-tools: renewal-date extensions (one per subscription and job: `id` is the job and the subscription,
    /// or a fresh id for an extension of one subscription) and the jobs that extend every subscription of a product.
    package static let v016SupportTools = LedgerMigration(
        id: "v16-support-tools",
        sqlite: [
            """
            CREATE TABLE subscription_extensions (
              id TEXT PRIMARY KEY,
              original_id TEXT NOT NULL,
              job_id TEXT NOT NULL,
              account_id TEXT NOT NULL,
              days INTEGER NOT NULL,
              reason TEXT NOT NULL,
              extended_ms INTEGER NOT NULL,
              old_expires_ms INTEGER NOT NULL,
              new_expires_ms INTEGER NOT NULL
            );
            CREATE INDEX subscription_extensions_by_subscription ON subscription_extensions(original_id, extended_ms);
            CREATE INDEX subscription_extensions_by_job ON subscription_extensions(job_id);
            CREATE TABLE extension_jobs (
              id TEXT PRIMARY KEY,
              product_id TEXT NOT NULL,
              days INTEGER NOT NULL,
              reason TEXT NOT NULL,
              created_ms INTEGER NOT NULL,
              finished_ms INTEGER NOT NULL DEFAULT 0
            );
            """
        ],
        postgres: """
            CREATE TABLE subscription_extensions (
              id TEXT PRIMARY KEY,
              original_id TEXT NOT NULL,
              job_id TEXT NOT NULL,
              account_id TEXT NOT NULL,
              days BIGINT NOT NULL,
              reason TEXT NOT NULL,
              extended_ms BIGINT NOT NULL,
              old_expires_ms BIGINT NOT NULL,
              new_expires_ms BIGINT NOT NULL
            );
            CREATE INDEX subscription_extensions_by_subscription ON subscription_extensions(original_id, extended_ms);
            CREATE INDEX subscription_extensions_by_job ON subscription_extensions(job_id);
            CREATE TABLE extension_jobs (
              id TEXT PRIMARY KEY,
              product_id TEXT NOT NULL,
              days BIGINT NOT NULL,
              reason TEXT NOT NULL,
              created_ms BIGINT NOT NULL,
              finished_ms BIGINT NOT NULL DEFAULT 0
            );
            """)
}
