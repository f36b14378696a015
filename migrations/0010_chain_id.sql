-- Several chains in one deployment: the same key is a different signer on each chain, so
-- chain_id joins every key (lease, nonce cursor, managed rows, attempts, feed, quarantine).
--
-- The migration is online: it runs in steps (the migrator splits the file at "txm:step"
-- lines) and no step holds a lock that stops readers for longer than a catalog change.
-- 1. The column arrives with the database's chain as a default. A non-volatile default is
--    stored in the catalog, not written into every row, so existing rows read it at once and
--    the table is not rewritten; the default is dropped again so no new row can omit it.
-- 2. The new unique indexes are built CONCURRENTLY: reads and writes go on meanwhile.
-- 3. One short transaction swaps the keys over to the new indexes.
--
-- The chain of existing rows is the one the database recorded (chain_identity, written at
-- every start since migration 0004), else the one the migrator was configured with
-- (txm.configured_chain_id); a database with rows and neither is refused, never guessed.

-- txm:step
DO $$
DECLARE
    recorded   bigint[] := ARRAY(SELECT chain_id::bigint FROM chain_identity ORDER BY recorded_at);
    configured text     := NULLIF(current_setting('txm.configured_chain_id', true), '');
    has_rows   boolean  := EXISTS (SELECT 1 FROM managed_tx) OR EXISTS (SELECT 1 FROM signer_lease)
                           OR EXISTS (SELECT 1 FROM signer_nonce_cursor) OR EXISTS (SELECT 1 FROM signer_quarantine);
    existing   text;
BEGIN
    IF cardinality(recorded) > 1 THEN
        RAISE EXCEPTION 'chain_identity records % chains (%) for a database that served one: cannot tell which chain its rows belong to', cardinality(recorded), recorded;
    ELSIF cardinality(recorded) = 1 THEN
        existing := recorded[1]::text;
    ELSIF configured IS NOT NULL THEN
        existing := configured;
    ELSIF has_rows THEN
        RAISE EXCEPTION 'the database holds transactions but no recorded chain: start the previous version once against its chain, or migrate with the chain configured (txm.configured_chain_id)';
    ELSE
        existing := '0'; -- no rows: the default is never read
    END IF;
    PERFORM set_config('txm.existing_chain_id', existing, false);
END $$;

ALTER TABLE signer_lease           ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE signer_nonce_cursor    ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE signer_quarantine      ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE managed_tx             ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE tx_attempt             ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE tx_completions         ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE stuck_resolution_audit ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT current_setting('txm.existing_chain_id')::bigint;
ALTER TABLE signer_lease           ALTER COLUMN chain_id DROP DEFAULT;
ALTER TABLE signer_nonce_cursor    ALTER COLUMN chain_id DROP DEFAULT;
ALTER TABLE signer_quarantine      ALTER COLUMN chain_id DROP DEFAULT;
ALTER TABLE managed_tx             ALTER COLUMN chain_id DROP DEFAULT;
ALTER TABLE tx_attempt             ALTER COLUMN chain_id DROP DEFAULT;
ALTER TABLE tx_completions         ALTER COLUMN chain_id DROP DEFAULT;
ALTER TABLE stuck_resolution_audit ALTER COLUMN chain_id DROP DEFAULT;

-- A concurrent build that was interrupted leaves an invalid index behind under its name;
-- drop those so the builds below start again instead of skipping them.
DO $$
DECLARE
    leftover text;
BEGIN
    FOR leftover IN
        SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE NOT i.indisvalid AND c.relname LIKE '%\_by\_chain'
    LOOP
        EXECUTE format('DROP INDEX %I', leftover);
    END LOOP;
END $$;

-- txm:step no-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS signer_lease_pkey_by_chain ON signer_lease (chain_id, signer);
-- txm:step no-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS signer_lease_ownership_key_by_chain ON signer_lease (chain_id, signer, owner_node, fencing_token);
-- txm:step no-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS signer_nonce_cursor_pkey_by_chain ON signer_nonce_cursor (chain_id, signer);
-- txm:step no-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS signer_quarantine_pkey_by_chain ON signer_quarantine (chain_id, signer);
-- txm:step no-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS managed_tx_signer_nonce_key_by_chain ON managed_tx (chain_id, signer, nonce);
-- txm:step no-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS managed_tx_signer_request_id_key_by_chain ON managed_tx (chain_id, signer, request_id) WHERE request_id IS NOT NULL;
-- txm:step no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS managed_tx_open_idx_by_chain ON managed_tx (chain_id, signer, state, nonce) WHERE state IN ('ALLOCATED', 'TRACKING', 'STUCK');
-- txm:step no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS managed_tx_mined_idx_by_chain ON managed_tx (chain_id, signer, block_number) WHERE state IN ('TRACKING', 'STUCK') AND receipt IS NOT NULL;

-- txm:step
-- The swap: catalog changes only (the new indexes are built and the columns NOT NULL), so
-- the exclusive locks last milliseconds; the migrator bounds the wait for them with a lock
-- timeout and tries again rather than queue readers behind a long transaction.
ALTER TABLE signer_lease DROP CONSTRAINT signer_lease_pkey;
ALTER TABLE signer_lease ADD CONSTRAINT signer_lease_pkey PRIMARY KEY USING INDEX signer_lease_pkey_by_chain;
DROP INDEX signer_lease_ownership_key;
ALTER INDEX signer_lease_ownership_key_by_chain RENAME TO signer_lease_ownership_key;
ALTER TABLE signer_nonce_cursor DROP CONSTRAINT signer_nonce_cursor_pkey;
ALTER TABLE signer_nonce_cursor ADD CONSTRAINT signer_nonce_cursor_pkey PRIMARY KEY USING INDEX signer_nonce_cursor_pkey_by_chain;
ALTER TABLE signer_quarantine DROP CONSTRAINT signer_quarantine_pkey;
ALTER TABLE signer_quarantine ADD CONSTRAINT signer_quarantine_pkey PRIMARY KEY USING INDEX signer_quarantine_pkey_by_chain;
DROP INDEX managed_tx_signer_nonce_key;
ALTER INDEX managed_tx_signer_nonce_key_by_chain RENAME TO managed_tx_signer_nonce_key;
DROP INDEX managed_tx_signer_request_id_key;
ALTER INDEX managed_tx_signer_request_id_key_by_chain RENAME TO managed_tx_signer_request_id_key;
DROP INDEX managed_tx_open_idx;
ALTER INDEX managed_tx_open_idx_by_chain RENAME TO managed_tx_open_idx;
DROP INDEX managed_tx_mined_idx;
ALTER INDEX managed_tx_mined_idx_by_chain RENAME TO managed_tx_mined_idx;
