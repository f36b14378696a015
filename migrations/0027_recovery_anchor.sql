-- Where a recovery after a database loss may start reading the chain, once retention has
-- deleted every transaction of a signer on record. A recovery starts its forward scan at the
-- block of the newest transaction on record below the first unknown nonce; a signer idle for
-- longer than the retention horizon has none, and on a node that keeps no old state the scan
-- would start at the chain's first block. Retention keeps here, per signer, the newest final
-- transaction it deleted: a row of its own, so the hot nonce cursor is never locked by it.
CREATE TABLE IF NOT EXISTS signer_pruned_anchor (
    chain_id     bigint NOT NULL,
    signer       text   NOT NULL,
    nonce        bigint NOT NULL,
    tx_hash      text   NOT NULL,
    block_number bigint NOT NULL,
    PRIMARY KEY (chain_id, signer)
);
