-- name: UnminedCost :one
-- The most a signer's transactions at @from_nonce and above may still cost: each one's value
-- plus its gas limit (the highest signed, where a replacement raised it) at the highest fee
-- cap signed for it, or at the intent's own cap, or at
-- @fallback_fee when nothing is signed yet. @from_nonce is the signer's nonce at the block
-- its balance was read at: the transactions below it are paid for in that balance, whether
-- their receipts are recorded yet or not, and those at and above it are not, whatever
-- receipt another endpoint gave for them. The highest cap signed is on the row where it was
-- kept with the current attempt (migration 0017); the attempts are read only where it was
-- not (COALESCE stops at the first value, so the sub-query runs for those rows alone).
SELECT COALESCE(SUM(
           (m.payload->>'value')::numeric
           + GREATEST((m.payload->>'effectiveGasLimit')::numeric, (m.payload->>'gasLimit')::numeric, COALESCE((m.payload->>'signedGasLimit')::numeric, 0))
             * COALESCE(CASE WHEN m.max_fee_for_hash = tx_hash_key(m.tx_hash) THEN m.max_fee_signed END,
                        (SELECT max(t.max_fee_per_gas) FROM tx_attempt t WHERE t.tx_id = m.tx_id),
                        NULLIF(m.payload->>'maxFeePerGas', '')::numeric, (@fallback_fee::text)::numeric)
       ), 0)::text AS cost
FROM managed_tx m
WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.nonce >= @from_nonce;

-- name: UnminedDataSizes :many
-- How many of a signer's transactions at @from_nonce and above (UnminedCost) carry each size
-- of call data, in bytes: on an OP-stack chain each one's L1 data fee is bounded by its
-- size. Transfers all share size 0, so the answer is a few rows however long the backlog.
SELECT COALESCE((length(m.payload->>'data') - 2) / 2, 0)::int AS data_bytes, count(*)::bigint AS txs
FROM managed_tx m
WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.nonce >= @from_nonce
GROUP BY 1;
