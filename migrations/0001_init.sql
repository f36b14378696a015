-- Per-signer execution right. fencing_token increases on every acquisition after expiry or
-- change of owner and never on renewal; every critical write names the token it holds.
CREATE TABLE signer_lease (
    signer        text        PRIMARY KEY,
    owner_node    text        NOT NULL,
    fencing_token bigint      NOT NULL CHECK (fencing_token > 0),
    acquired_at   timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX signer_lease_owner_node_idx ON signer_lease (owner_node);
CREATE INDEX signer_lease_expires_at_idx ON signer_lease (expires_at);

-- The database's side of max(chain, cache, db): the next nonce this service would allocate.
CREATE TABLE signer_nonce_cursor (
    signer        text        PRIMARY KEY,
    next_nonce    bigint      NOT NULL CHECK (next_nonce >= 0),
    fencing_token bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The authoritative record of a transaction: its nonce, state machine and final evidence.
CREATE TABLE managed_tx (
    tx_id            uuid        PRIMARY KEY,
    signer           text        NOT NULL,
    request_id       text,
    intent_hash      bytea       NOT NULL,
    nonce            bigint      NOT NULL CHECK (nonce >= 0),
    payload          jsonb       NOT NULL,
    tx_hash          text,
    state            text        NOT NULL,
    sub_state        text,
    last_submit_at   timestamptz,
    next_resubmit_at timestamptz,
    submit_attempts  integer     NOT NULL DEFAULT 0,
    last_error       text,
    receipt          jsonb,
    block_number     bigint,
    block_hash       text,
    confirmed_at     timestamptz,
    fencing_token    bigint      NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT managed_tx_state_check CHECK (state IN ('ALLOCATED', 'TRACKING', 'CONFIRMED', 'FAILED_FINAL', 'STUCK'))
);
CREATE UNIQUE INDEX managed_tx_signer_request_id_key ON managed_tx (signer, request_id) WHERE request_id IS NOT NULL;
CREATE UNIQUE INDEX managed_tx_signer_nonce_key ON managed_tx (signer, nonce);
CREATE INDEX managed_tx_tx_hash_idx ON managed_tx (tx_hash) WHERE tx_hash IS NOT NULL;
-- Scheduler scans only look at transactions that are not final yet.
CREATE INDEX managed_tx_open_idx ON managed_tx (signer, state, nonce) WHERE state IN ('ALLOCATED', 'TRACKING', 'STUCK');
CREATE INDEX managed_tx_resubmit_idx ON managed_tx (next_resubmit_at) WHERE state = 'TRACKING';

-- Every signed raw transaction broadcast for a managed transaction, so a receipt for any
-- attempt (the original or a replacement) is recognised.
CREATE TABLE tx_attempt (
    tx_hash                  text        PRIMARY KEY,
    tx_id                    uuid        NOT NULL REFERENCES managed_tx (tx_id),
    signer                   text        NOT NULL,
    nonce                    bigint      NOT NULL,
    kind                     text        NOT NULL,
    max_fee_per_gas          numeric(78) NOT NULL,
    max_priority_fee_per_gas numeric(78) NOT NULL,
    gas_limit                bigint      NOT NULL,
    raw_tx                   bytea       NOT NULL,
    fencing_token            bigint      NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tx_attempt_tx_id_idx ON tx_attempt (tx_id);

-- The poll feed of final results. Sequence order is not commit order, so each row records
-- its writing transaction's id: the feed serves rows ordered by (xid, seq) and only those
-- whose transaction is older than every transaction still running.
CREATE TABLE tx_completions (
    seq          bigserial   PRIMARY KEY,
    xid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    tx_id        uuid        NOT NULL REFERENCES managed_tx (tx_id),
    signer       text        NOT NULL,
    status       text        NOT NULL,
    completed_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX tx_completions_xid_seq_idx ON tx_completions (xid, seq);
CREATE UNIQUE INDEX tx_completions_tx_id_key ON tx_completions (tx_id);
