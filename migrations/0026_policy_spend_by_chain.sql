-- Spending windows count each chain on its own. A policy names a signer or a credential on
-- every chain the deployment serves, and the same key on two chains spends two currencies:
-- summed into one window, 100 wei of one chain's token would use up a limit meant for the
-- other's. Buckets from before this migration have no chain (0); the windows count them on
-- every chain until they age out (31 days at most), so no limit loosens at the upgrade.
ALTER TABLE policy_spend ADD COLUMN IF NOT EXISTS chain_id bigint NOT NULL DEFAULT 0;
ALTER TABLE policy_spend DROP CONSTRAINT IF EXISTS policy_spend_pkey;
ALTER TABLE policy_spend ADD CONSTRAINT policy_spend_pkey PRIMARY KEY (scope_kind, scope, chain_id, minute);
-- Every write names its chain from now on: no default, as on every other chain-keyed table.
ALTER TABLE policy_spend ALTER COLUMN chain_id DROP DEFAULT;
