-- Fenced writes lock the signer's lease row FOR KEY SHARE instead of FOR SHARE, so the
-- owner's renewal (an UPDATE of expires_at alone) no longer waits behind them: under a
-- steady stream of writers a FOR SHARE lock is never free, the renewal timed out and the
-- owner lost a lease it was using. A takeover must still wait for every open fenced write.
-- It does because it changes owner_node and fencing_token, and this index makes them key
-- columns: PostgreSQL takes FOR UPDATE-strength locks for an UPDATE (and an ON CONFLICT DO
-- UPDATE) that sets a column of a unique index, and FOR KEY SHARE conflicts with that. The
-- index is unique trivially (signer alone is the primary key); it exists for its lock mode.
CREATE UNIQUE INDEX signer_lease_ownership_key ON signer_lease (signer, owner_node, fencing_token);
