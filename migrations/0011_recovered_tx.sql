-- Transactions recovered from the chain after the database lost them (a failover to a
-- standby that missed commits). Reconciliation records each transaction the chain holds at
-- a nonce the database did not know as a row of its own (recovered_at set), unclaimed until
-- a retried create with the same recovery_key (signer, recipient, value, data) adopts it,
-- or unclaimed_until passes. An unclaimed row's completion is held back until then, so the
-- request that adopts it sees it in the feed after its create was answered.
-- txm:step
ALTER TABLE managed_tx ADD COLUMN IF NOT EXISTS recovered_at timestamptz;
ALTER TABLE managed_tx ADD COLUMN IF NOT EXISTS recovery_key bytea;
ALTER TABLE managed_tx ADD COLUMN IF NOT EXISTS unclaimed_until timestamptz;

-- Only unclaimed rows are in it: empty in normal operation, and built without blocking
-- writes on a large table.
-- txm:step no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS managed_tx_unclaimed_idx
    ON managed_tx (chain_id, signer, recovery_key, nonce) WHERE unclaimed_until IS NOT NULL;
