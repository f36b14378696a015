-- Events beyond completions, for webhook subscriptions, and signers' funding.
--
-- service_event holds what is not a transaction's final state: a signer's balance crossing
-- its low-water mark and back, a refill sent, an intent sent for approval. Positions are
-- taken from event_sequencer under its row lock, held until the inserting transaction
-- commits, so positions commit in order: a reader paging by position never misses an event.
-- event_id is the event's idempotency key; an event recorded twice keeps its first row.
CREATE TABLE event_sequencer (
    id            boolean PRIMARY KEY DEFAULT true,
    last_position bigint  NOT NULL DEFAULT 0,
    CONSTRAINT event_sequencer_one_row CHECK (id)
);
INSERT INTO event_sequencer (id) VALUES (true);

CREATE TABLE service_event (
    position bigint      PRIMARY KEY,
    event_id text        NOT NULL UNIQUE,
    kind     text        NOT NULL,
    chain_id bigint      NOT NULL,
    signer   text        NOT NULL,
    payload  jsonb       NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX service_event_at_idx ON service_event (at);

-- A subscription's cursor in service_event, beside its cursor in the completions feed.
ALTER TABLE webhook_subscription ADD COLUMN event_cursor bigint NOT NULL DEFAULT 0;

-- A signer's funding: under low_water its balance is low (an event), at high_water again it
-- has recovered (the gap between the two is the hysteresis, so a balance hovering at one
-- mark does not fire at every look). With a treasury, a low signer is sent, as an ordinary
-- transaction from the treasury through the service (its policies apply), what takes it up
-- to high_water; refill_tx_id is the refill in flight, at most one per signer.
CREATE TABLE signer_funding (
    chain_id     bigint      NOT NULL,
    signer       text        NOT NULL,
    low_water    numeric     NOT NULL,
    high_water   numeric     NOT NULL,
    treasury     text,
    state        text        NOT NULL DEFAULT 'ok',
    last_balance numeric,
    refill_tx_id uuid,
    refills      bigint      NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    updated_by   text        NOT NULL,
    PRIMARY KEY (chain_id, signer),
    CONSTRAINT signer_funding_state_check CHECK (state IN ('ok', 'low')),
    CONSTRAINT signer_funding_marks_check CHECK (high_water > low_water AND low_water >= 0)
);
