-- Attempts and completions are written without a per-row foreign key check (issue 28).
--
-- PostgreSQL checks a foreign key one inserted row at a time: a query of managed_tx that
-- also locks the row FOR KEY SHARE, which writes that lock into the row and the WAL. For the
-- signing statement (an attempt a transfer) and the finality statement (a completion a
-- transfer) that was a quarter of their execution time: 15 us a row each.
--
-- What the keys guaranteed, a child row never without its transaction, the statements now
-- give themselves: every insert into tx_attempt or tx_completions takes its rows from the
-- managed_tx rows the same statement updated or inserted (RETURNING), so each parent exists
-- and stays locked until the commit. Retention, the only statement that deletes a
-- transaction, deletes its attempts and completions with it, and only once it is final,
-- which a statement writing a child row has just made sure it is not (attempts) or holds the
-- row's lock (completions). TestChildRowsComeFromTheRowsTheStatementWrote holds every query
-- to this.
ALTER TABLE tx_attempt DROP CONSTRAINT IF EXISTS tx_attempt_tx_id_fkey;
ALTER TABLE tx_completions DROP CONSTRAINT IF EXISTS tx_completions_tx_id_fkey;
