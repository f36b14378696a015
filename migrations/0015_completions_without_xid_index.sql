-- One index entry fewer per completion (issue 28).
--
-- tx_completions_xid_seq_idx ordered the feed before completions had positions (migration
-- 0006). Since then it serves one statement: translating a cursor from before positions
-- ("<xid>-<seq>", PositionOfLegacyCursor), which a consumer does once, on its first poll
-- after that upgrade. That look-up now reads the table; every finality statement no longer
-- writes an entry for each completion into an index nothing else reads.
-- txm:step no-transaction
DROP INDEX CONCURRENTLY IF EXISTS tx_completions_xid_seq_idx;
