-- The chain this database belongs to, recorded on the first start. Every later start
-- compares what the endpoints serve with it, so the database is never driven against
-- another network, nor against a development chain that was reset (its blocks and nonces
-- gone while the rows still expect them).
CREATE TABLE chain_identity (
    chain_id     numeric     PRIMARY KEY,
    genesis_hash text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
