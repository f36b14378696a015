-- Payouts and their transactional outbox. A payout and its outbox row are written in one
-- transaction (services.PayoutService.Create), so neither exists without the other.
CREATE TABLE payouts (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- Optional client key (Idempotency-Key header): a create retried after a lost answer
    -- returns the first payout instead of paying twice.
    idempotency_key text        UNIQUE,
    to_address      text        NOT NULL CHECK (to_address ~ '^0x[0-9a-fA-F]{40}$'),
    -- Wei; numeric(78,0) holds every uint256.
    amount          numeric(78, 0) NOT NULL CHECK (amount > 0),
    status          text        NOT NULL DEFAULT 'PENDING'
                                CHECK (status IN ('PENDING', 'SUBMITTED', 'PAID', 'FAILED')),
    tx_id           text,
    tx_hash         text,
    failure_reason  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- One transaction per payout: a second tx id for the same payout would mean a double
-- payment, so the database refuses it.
CREATE UNIQUE INDEX payouts_tx_id ON payouts (tx_id) WHERE tx_id IS NOT NULL;

-- The outbox row's id is the requestId sent to txmanager: a re-send after a crash is a
-- replay of the same request, never a second transaction.
CREATE TABLE payout_outbox (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    payout_id    uuid        NOT NULL UNIQUE REFERENCES payouts (id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- The relay skips the row until then (backoff after a failed send).
    available_at timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    sent_at      timestamptz
);

CREATE INDEX payout_outbox_due ON payout_outbox (available_at, created_at) WHERE sent_at IS NULL;

-- The inbox: one row per completion applied, written in the transaction that moves the
-- feed cursor. The primary key makes a second application of one completion fail instead
-- of passing unnoticed.
CREATE TABLE payout_completions (
    tx_id      text        PRIMARY KEY,
    payout_id  uuid        NOT NULL REFERENCES payouts (id),
    status     text        NOT NULL,
    feed_cursor text       NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
