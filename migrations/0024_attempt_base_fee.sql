-- The base fee each attempt was priced against, so the console can draw an attempt's fee
-- beside the market's at the time it was signed. NULL for attempts signed before this
-- migration and for those recovery took from the chain (their pricing is not known here).
-- Adding a nullable column without a default rewrites nothing.
ALTER TABLE tx_attempt ADD COLUMN IF NOT EXISTS base_fee_per_gas numeric(78);
