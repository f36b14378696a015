-- A signer whose chain nonce is above everything the database knows for it (a failover to a
-- standby that missed commits, or the key used outside the service) is quarantined: no new
-- nonces are allocated for it until an operator has looked at the unknown nonces and
-- released it. One row per signer; a released row is reused by the next detection.
CREATE TABLE signer_quarantine (
    signer        text        PRIMARY KEY,
    db_next_nonce bigint      NOT NULL,
    chain_nonce   bigint      NOT NULL,
    detected_at   timestamptz NOT NULL DEFAULT now(),
    detected_by   text        NOT NULL,
    fencing_token bigint      NOT NULL,
    released_at   timestamptz,
    released_by   text,
    release_note  text
);
