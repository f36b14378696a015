-- Transactions the service created itself to fill a nonce hole (a zero-value self-transfer
-- at a nonce nothing else will use): the feed marks their completions so consumers can tell
-- them from their own. A constant default: no table rewrite.
ALTER TABLE managed_tx ADD COLUMN placeholder boolean NOT NULL DEFAULT false;
