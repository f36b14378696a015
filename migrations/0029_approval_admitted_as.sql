-- The transaction an approved intent was admitted as. It is the approval's own id, except
-- when the chain already held the intent: a database restored from a backup taken after the
-- approval and before its admission came back, shows the approval approved and not
-- admitted. Its transaction, sent in the meantime and since lost from the database, is
-- recovered from the chain and adopted by the admission rather than sent a second time; the
-- approval then names that recovered transaction here.
ALTER TABLE tx_approval ADD COLUMN IF NOT EXISTS admitted_tx_id uuid;

-- As before, with admitted_tx_id (the approval's own id when none is recorded).
CREATE OR REPLACE VIEW tx_approval_read AS
SELECT approval_id, chain_id, signer, COALESCE(request_id, '')::text AS request_id, fingerprint, requester,
       COALESCE(to_address, '')::text AS to_address, value_wei::text AS value_wei, data, gas_limit,
       COALESCE(max_fee_per_gas::text, '')::text AS max_fee_per_gas, COALESCE(max_priority_fee_per_gas::text, '')::text AS max_priority_fee_per_gas,
       policy_scope, policy_version, reason, role, required, state, final_reason, created_at, expires_at, decided_at,
       (expires_at <= now())::bool AS expired,
       COALESCE(admitted_tx_id, approval_id) AS admitted_tx_id
FROM tx_approval;

-- Retention deletes an approval with its transaction's completion, found by either id.
CREATE INDEX IF NOT EXISTS tx_approval_admitted_tx_idx ON tx_approval (admitted_tx_id) WHERE admitted_tx_id IS NOT NULL;
