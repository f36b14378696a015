-- Whether each signer's key source signs, as the node driving the signer last found it.
--
-- A signer whose key source cannot sign (a KMS that hangs or refuses, a disabled key) keeps
-- its allocated transactions unsigned. The node holding its lease records here, fenced, when
-- signing started failing and the key source's last error (never a secret: the error text is
-- cleaned of credentials before it is stored), and clears it with the first signature that
-- succeeds. Every node reads it: the signer status, a transaction's view while it waits for
-- its signature, and the per-signer gauges one scrape of any node shows for the whole roster.
CREATE TABLE IF NOT EXISTS signer_signing (
    chain_id       bigint      NOT NULL,
    signer         text        NOT NULL,
    failing_since  timestamptz,
    last_error     text        NOT NULL DEFAULT '',
    last_error_at  timestamptz,
    last_signed_at timestamptz,
    node_id        text        NOT NULL,
    fencing_token  bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain_id, signer)
);
