-- Safety rails for keys that hold money: a signer paused by an operator, spending policies
-- per signer and per credential with their rolling-window totals, and an append-only audit
-- trail whose records are chained by hash.

-- A paused signer refuses new creates (409 SIGNER_PAUSED) while its transactions in flight go
-- on to a final state; unlike retiring, resuming it is one call and its key stays in service.
-- Writer batches read these columns with the roster state, under the same FOR KEY SHARE lock
-- a pause takes FOR UPDATE, so no create is allocated after the pause is recorded.
ALTER TABLE signer_roster
    ADD COLUMN paused_at  timestamptz,
    ADD COLUMN paused_by  text NOT NULL DEFAULT '',
    ADD COLUMN pause_note text NOT NULL DEFAULT '';

-- The policy in force for one scope: a signer (scope is its EIP-55 address) or a credential
-- (scope is its id, the API key id or JWT subject). rules is the policy document the admin
-- API accepted (docs/policies.md); version counts its changes from 1. A scope without a row has
-- no policy. Writer batches read the rows of their signers and credentials inside the fenced
-- allocation transaction, and lock them FOR UPDATE where a rule keeps a rolling total, so
-- every node admitting for the same scope takes its turn.
CREATE TABLE spending_policy (
    scope_kind text        NOT NULL,
    scope      text        NOT NULL,
    version    bigint      NOT NULL,
    rules      jsonb       NOT NULL,
    windowed   boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL,
    PRIMARY KEY (scope_kind, scope),
    CONSTRAINT spending_policy_scope_kind_check CHECK (scope_kind IN ('signer', 'credential'))
);

-- Every version a scope's policy has had, the deletions included (rules NULL).
CREATE TABLE spending_policy_version (
    scope_kind text        NOT NULL,
    scope      text        NOT NULL,
    version    bigint      NOT NULL,
    rules      jsonb,
    changed_at timestamptz NOT NULL DEFAULT now(),
    changed_by text        NOT NULL,
    PRIMARY KEY (scope_kind, scope, version)
);

-- What was admitted under a windowed policy, by the minute: value sent and worst-case fee
-- (gas limit times the fee cap). A rolling window sums the buckets of the current minute and
-- of the whole minutes before it, so it never counts less than the window holds. Rows older
-- than the longest window are pruned.
CREATE TABLE policy_spend (
    scope_kind text        NOT NULL,
    scope      text        NOT NULL,
    minute     timestamptz NOT NULL,
    value_wei  numeric     NOT NULL DEFAULT 0,
    fee_wei    numeric     NOT NULL DEFAULT 0,
    PRIMARY KEY (scope_kind, scope, minute)
);

-- The audit trail: one record per admin action, policy change and approval, never updated.
-- Each record's hash covers its fields and the previous record's hash (docs/audit.md), so a
-- record edited or deleted in SQL breaks the chain at that record. audit_head holds the last
-- record's sequence and hash (appends lock it, so records are numbered one at a time) and,
-- after the trail's own retention pruned its oldest records, the last pruned record's, which
-- the first record kept must follow.
CREATE TABLE audit_record (
    seq       bigint      PRIMARY KEY,
    at        timestamptz NOT NULL,
    node_id   text        NOT NULL,
    actor     text        NOT NULL,
    action    text        NOT NULL,
    subject   text        NOT NULL,
    before    text        NOT NULL DEFAULT '',
    after     text        NOT NULL DEFAULT '',
    prev_hash bytea       NOT NULL,
    hash      bytea       NOT NULL
);
CREATE INDEX audit_record_at_idx ON audit_record (at);
CREATE INDEX audit_record_subject_idx ON audit_record (subject, seq);

CREATE TABLE audit_head (
    id                  boolean     PRIMARY KEY DEFAULT true,
    last_seq            bigint      NOT NULL DEFAULT 0,
    last_hash           bytea       NOT NULL DEFAULT '\x'::bytea,
    pruned_through_seq  bigint      NOT NULL DEFAULT 0,
    pruned_through_hash bytea       NOT NULL DEFAULT '\x'::bytea,
    CONSTRAINT audit_head_one_row CHECK (id)
);
INSERT INTO audit_head (id) VALUES (true);
