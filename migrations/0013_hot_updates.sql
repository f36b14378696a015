-- Fewer index entries and more HOT updates per transaction (issue 28).
--
-- managed_tx_tx_hash_idx and managed_tx_resubmit_idx serve no query: every look-up by hash
-- goes through tx_attempt's primary key, and every scan of next_resubmit_at is per
-- (chain_id, signer) through managed_tx_open_idx. Each cost an index entry on every insert
-- and every non-HOT update, and the second made the resubmission claim (which rewrites
-- next_resubmit_at) a non-HOT update.
-- txm:step no-transaction
DROP INDEX CONCURRENTLY IF EXISTS managed_tx_tx_hash_idx;
-- txm:step no-transaction
DROP INDEX CONCURRENTLY IF EXISTS managed_tx_resubmit_idx;

-- A transaction's row is rewritten a few times in its first seconds; room left in its page
-- lets the rewrites that touch no indexed column (a broadcast's outcome, a resubmission
-- claim) stay HOT: a new version in the same page and no index entry. Pages written from
-- now on keep it.
-- txm:step
ALTER TABLE managed_tx SET (fillfactor = 70);
