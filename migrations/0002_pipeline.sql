-- Every stuck-transaction resolution, whoever triggered it: who acted, with which lease
-- epoch, and why (docs/design.md#stuck-detection-and-resolution).
CREATE TABLE stuck_resolution_audit (
    id            bigserial   PRIMARY KEY,
    signer        text        NOT NULL,
    tx_id         uuid        NOT NULL REFERENCES managed_tx (tx_id),
    nonce         bigint      NOT NULL,
    action        text        NOT NULL,
    node_id       text        NOT NULL,
    fencing_token bigint      NOT NULL,
    reason        text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stuck_resolution_audit_tx_id_idx ON stuck_resolution_audit (tx_id);

-- Finality scans mined-but-not-final transactions; receipt look-ups scan the rest.
CREATE INDEX managed_tx_mined_idx ON managed_tx (signer, block_number) WHERE state IN ('TRACKING', 'STUCK') AND receipt IS NOT NULL;
