-- The highest fee cap signed for a transaction is kept on its row (issue 28).
--
-- The funds check's reload (UnminedCost) reads what every unmined transaction of a signer may
-- still cost: its gas limit times the highest fee cap signed for it. That cap lived only in
-- tx_attempt, so the reload looked up each transaction's attempts: about 70% of its time,
-- and the reload was a tenth of the database's statement time in bench-chain. Each
-- statement that stores an attempt now also keeps the highest cap on the row it moves.
--
-- max_fee_signed is NULL where it is not known: rows signed before this migration, and rows
-- a node of an earlier version (during a rolling upgrade) signs or re-prices. The reload
-- reads the attempts for those, as before, so it never counts less than the attempts say.
-- The trigger keeps a cap from going stale: a write that makes another attempt current
-- (tx_hash changes) without also setting the cap (an earlier version's statement) clears it.
-- It is a WHEN clause on the columns named in the SET list, so the statements that keep the
-- cap, and every update that leaves tx_hash alone, never run the function.
ALTER TABLE managed_tx ADD COLUMN IF NOT EXISTS max_fee_signed numeric(78, 0);

CREATE OR REPLACE FUNCTION managed_tx_forget_stale_fee_cap() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.max_fee_signed := NULL;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS managed_tx_forget_stale_fee_cap ON managed_tx;
CREATE TRIGGER managed_tx_forget_stale_fee_cap
    BEFORE UPDATE OF tx_hash ON managed_tx
    FOR EACH ROW
    WHEN (NEW.tx_hash IS DISTINCT FROM OLD.tx_hash AND NEW.max_fee_signed IS NOT DISTINCT FROM OLD.max_fee_signed)
    EXECUTE FUNCTION managed_tx_forget_stale_fee_cap();
