-- Approvals: an intent a spending policy sends for approval waits here, without a nonce,
-- until enough distinct approvers agree, one of them rejects it, or it expires.
--
-- approval_id becomes the transaction's tx_id once it is admitted, so a caller reading the
-- id it was answered with sees the intent wait and then the transaction it became. The
-- intent is kept as the create carried it (gas_limit as given, 0 when left to estimation),
-- so the admission runs the create path again with the same fingerprint.
--
-- state: AWAITING_APPROVAL, APPROVED (enough approvals, waiting for the signer's lease
-- owner to allocate it), ADMITTED (allocated: managed_tx has a row with this tx_id), and
-- the final EXPIRED, REJECTED and REFUSED (approved, but the create path refused it for
-- good: a policy window full, the signer retired). A final state writes the approval's
-- completion into tx_completions (tx_id = approval_id) in the same statement, so the feed
-- carries it like any final transaction.
CREATE TABLE tx_approval (
    approval_id              uuid        PRIMARY KEY,
    chain_id                 bigint      NOT NULL,
    signer                   text        NOT NULL,
    request_id               text,
    fingerprint              bytea       NOT NULL,
    requester                text        NOT NULL,
    to_address               text,
    value_wei                numeric     NOT NULL DEFAULT 0,
    data                     bytea       NOT NULL DEFAULT '\x'::bytea,
    gas_limit                bigint      NOT NULL DEFAULT 0,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    -- What sent the intent for approval: the policy's scope and version, and why.
    policy_scope             text        NOT NULL,
    policy_version           bigint      NOT NULL,
    reason                   text        NOT NULL,
    -- Who may approve: holders of role, required of them, never the requester.
    role                     text        NOT NULL,
    required                 integer     NOT NULL,
    state                    text        NOT NULL DEFAULT 'AWAITING_APPROVAL',
    final_reason             text        NOT NULL DEFAULT '',
    created_at               timestamptz NOT NULL DEFAULT now(),
    expires_at               timestamptz NOT NULL,
    decided_at               timestamptz,
    CONSTRAINT tx_approval_state_check CHECK (state IN ('AWAITING_APPROVAL', 'APPROVED', 'ADMITTED', 'EXPIRED', 'REJECTED', 'REFUSED')),
    CONSTRAINT tx_approval_required_check CHECK (required BETWEEN 1 AND 10)
);
-- A request id names one intent per chain and signer, waiting or admitted.
CREATE UNIQUE INDEX tx_approval_request_idx ON tx_approval (chain_id, signer, request_id) WHERE request_id IS NOT NULL;
-- The open approvals: what the admission loop, expiry and the pending gauges read.
CREATE INDEX tx_approval_open_idx ON tx_approval (expires_at) WHERE state IN ('AWAITING_APPROVAL', 'APPROVED');

-- One approver's decision on one approval: a credential decides once.
CREATE TABLE tx_approval_vote (
    approval_id uuid        NOT NULL,
    approver    text        NOT NULL,
    approve     boolean     NOT NULL,
    note        text        NOT NULL DEFAULT '',
    node_id     text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (approval_id, approver)
);

-- How approvals are read: absent texts as empty strings, amounts as decimal text, and
-- whether the approval is past its expiry by the database's clock (the one expiry uses).
-- Every read of an approval, the vote's locking one included, takes these columns.
CREATE VIEW tx_approval_read AS
SELECT approval_id, chain_id, signer, COALESCE(request_id, '')::text AS request_id, fingerprint, requester,
       COALESCE(to_address, '')::text AS to_address, value_wei::text AS value_wei, data, gas_limit,
       COALESCE(max_fee_per_gas::text, '')::text AS max_fee_per_gas, COALESCE(max_priority_fee_per_gas::text, '')::text AS max_priority_fee_per_gas,
       policy_scope, policy_version, reason, role, required, state, final_reason, created_at, expires_at, decided_at,
       (expires_at <= now())::bool AS expired
FROM tx_approval;
