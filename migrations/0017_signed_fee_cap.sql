-- The highest fee cap signed for a transaction is kept on its row (issue 28).
--
-- The funds check's reload (UnminedCost) reads what every unmined transaction of a signer may
-- still cost: its gas limit times the highest fee cap signed for it. That cap lived only in
-- tx_attempt, so the reload looked up each transaction's attempts: about 70% of its time,
-- and the reload was a tenth of the database's statement time in bench-chain. Each
-- statement that stores an attempt now also keeps the highest cap on the row it moves.
--
-- The cap counts only while the row's current attempt is the one it was kept with:
-- max_fee_for_hash holds that attempt's key (tx_hash_key, the first 8 bytes of its hash).
-- A node of an earlier version, during a rolling upgrade, signs and re-prices without
-- keeping the cap: the current attempt changes, the key no longer matches, and the reload
-- reads the attempts for that row, as it does for rows signed before this migration. So it
-- never counts less than the attempts say. (A trigger could clear the cap instead, but a
-- BEFORE UPDATE row trigger has PostgreSQL lock every updated row first: a WAL record more
-- for each of the two updates a transfer makes.)
ALTER TABLE managed_tx ADD COLUMN IF NOT EXISTS max_fee_signed numeric(78, 0);
ALTER TABLE managed_tx ADD COLUMN IF NOT EXISTS max_fee_for_hash bigint;

-- tx_hash_key is the first 8 bytes of a 0x-prefixed hex hash as a bigint; PostgreSQL inlines
-- it into the statements that call it.
CREATE OR REPLACE FUNCTION tx_hash_key(hash text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT ('x' || substr(hash, 3, 16))::bit(64)::bigint $$;
